package deploytest

import (
	"os"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func defaultObjects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := Objects(Must[[]byte](t)(os.ReadFile(ManifestsFile())))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func convert[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if o == nil {
		t.Fatal("object not rendered")
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The agent DaemonSet with the defaults: on every node whatever its taints,
// critical priority, host network but not host PID, the host read-only at
// /host with only its two directories writable, resources set, no CPU limit.
func TestAgentDaemonSetShape(t *testing.T) {
	ds := convert[appsv1.DaemonSet](t, Find(defaultObjects(t), "DaemonSet", "nodemend-agent"))
	spec := ds.Spec.Template.Spec
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Operator == corev1.TolerationOpExists && tl.Key == "" && tl.Effect == ""
	}) {
		t.Errorf("tolerations %v do not tolerate every taint", spec.Tolerations)
	}
	if spec.PriorityClassName != "system-node-critical" || !spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("priority %q hostNetwork %v hostPID %v hostIPC %v", spec.PriorityClassName, spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	c := spec.Containers[0]
	writable := map[string]bool{}
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/host" && !m.ReadOnly {
			t.Error("the host root is mounted writable")
		}
		if !m.ReadOnly {
			writable[m.MountPath] = true
		}
	}
	for _, p := range []string{"/host/var/lib/nodemend", "/host/var/log/nodemend", "/tmp"} {
		if !writable[p] {
			t.Errorf("%s is not writable", p)
		}
		delete(writable, p)
	}
	if len(writable) > 0 {
		t.Errorf("more writable mounts: %v", writable)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the agent's root filesystem is writable")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %v", c.Resources)
	}
	if !c.Resources.Limits.Cpu().IsZero() {
		t.Error("a CPU limit throttles detection; the chart sets none")
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Error("no probes")
	}
}

// The controller Deployment with the defaults: two replicas spread over
// nodes, leader election on, restricted security context, a PDB.
func TestControllerDeploymentShape(t *testing.T) {
	objs := defaultObjects(t)
	d := convert[appsv1.Deployment](t, Find(objs, "Deployment", "nodemend-controller"))
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	spec := d.Spec.Template.Spec
	if len(spec.TopologySpreadConstraints) == 0 || spec.TopologySpreadConstraints[0].LabelSelector == nil {
		t.Error("replicas are not spread over nodes")
	}
	c := spec.Containers[0]
	if !slices.Contains(c.Args, "--leader-elect=true") {
		t.Errorf("args %v", c.Args)
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil ||
		!*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("container security context %+v", sc)
	}
	if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil {
		t.Errorf("pod security context %+v", psc)
	}
	if Find(objs, "PodDisruptionBudget", "nodemend-controller") == nil {
		t.Error("no PodDisruptionBudget")
	}
}
