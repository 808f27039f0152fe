package explain

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/pkg/cli/fleet"
	"nodemend.dev/nodemend/pkg/repair/controlplane"
)

// kubectl mend explain node/NAME says why a control-plane node is not
// repaired: by its role label, or by the etcd static pod it runs (a
// tenant's pod of that name elsewhere proves nothing), and what opts it in.
func TestControlPlaneFindings(t *testing.T) {
	labelled := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Labels: map[string]string{controlplane.RoleLabel: ""}}}
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-2"}}
	etcd := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-cp-2", Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "h"}},
		Spec: corev1.PodSpec{NodeName: "cp-2"}}
	tenant := *etcd.DeepCopy()
	tenant.Namespace = "team-a"
	row := fleet.Node{State: fleet.Blocked, Policy: "default"}

	for _, tc := range []struct {
		name  string
		in    NodeInput
		cause string // "" for no finding
	}{
		{"role label", NodeInput{Node: labelled, Repair: row}, "cp-1 is a control-plane node (the control-plane role label): nodemend does not repair control-plane nodes unless"},
		{"etcd static pod", NodeInput{Node: plain, Pods: []corev1.Pod{etcd}, Repair: row}, "cp-2 is a control-plane node (an etcd member (static pod))"},
		{"a tenant's pod named etcd", NodeInput{Node: plain, Pods: []corev1.Pod{tenant}, Repair: row}, ""},
		{"opted in", NodeInput{Node: labelled, Repair: row, RepairsControlPlane: true}, "policy default repairs control-plane nodes one at a time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := controlPlaneFindings(tc.in)
			if tc.cause == "" {
				if len(fs) != 0 {
					t.Fatalf("findings %+v, want none", fs)
				}
				return
			}
			if len(fs) != 1 || !strings.Contains(fs[0].Cause, tc.cause) {
				t.Fatalf("findings %+v, want one whose cause contains %q", fs, tc.cause)
			}
			if !tc.in.RepairsControlPlane && (!fs[0].Blocking || !strings.Contains(fs[0].Fix, "spec.controlPlane: Repair")) {
				t.Errorf("finding %+v: want blocking, with the opt-in as the fix", fs[0])
			}
		})
	}
}
