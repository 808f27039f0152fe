package explain

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// An inline volume and a PersistentVolume of the same in-tree plugin are
// the same finding: the plugin, the CSI driver migration hands it to, and
// the disk.
func TestInTreeOfVolumeMatchesPV(t *testing.T) {
	cases := []struct {
		inline corev1.VolumeSource
		want   inTree
	}{
		{corev1.VolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-1"}}, inTree{"awsElasticBlockStore", "ebs.csi.aws.com", "vol-1"}},
		{corev1.VolumeSource{GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: "pd-1"}}, inTree{"gcePersistentDisk", "pd.csi.storage.gke.io", "pd-1"}},
		{corev1.VolumeSource{AzureDisk: &corev1.AzureDiskVolumeSource{DiskName: "d-1"}}, inTree{"azureDisk", "disk.csi.azure.com", "d-1"}},
		{corev1.VolumeSource{Cinder: &corev1.CinderVolumeSource{VolumeID: "c-1"}}, inTree{"cinder", "cinder.csi.openstack.org", "c-1"}},
		{corev1.VolumeSource{VsphereVolume: &corev1.VsphereVirtualDiskVolumeSource{VolumePath: "[ds] v.vmdk"}}, inTree{"vsphereVolume", "csi.vsphere.vmware.com", "[ds] v.vmdk"}},
	}
	for _, c := range cases {
		got, ok := inTreeOfVolume(c.inline)
		if !ok || got != c.want {
			t.Errorf("inTreeOfVolume(%s) = %+v, %v; want %+v", c.want.plugin, got, ok, c.want)
		}
	}
	for _, s := range []corev1.VolumeSource{{}, {CSI: &corev1.CSIVolumeSource{Driver: "ebs.csi.aws.com"}}, {EmptyDir: &corev1.EmptyDirVolumeSource{}}} {
		if got, ok := inTreeOfVolume(s); ok {
			t.Errorf("inTreeOfVolume(%+v) = %+v, want none", s, got)
		}
	}
}
