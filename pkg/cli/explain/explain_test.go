package explain

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/pkg/cli/eventlog"
)

// Messages as kube-scheduler v1.37.2 wrote them in this package's
// envtest run (pkg/cli TestExplainSchedulerFailures), verbatim.
const (
	msgCPU      = "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint(s). preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
	msgGPU      = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint(s). preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
	msgSelector = "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint(s). preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
	msgSpread   = "0/2 nodes are available: 1 node(s) didn't match pod topology spread constraints (missing required label), 1 node(s) had untolerated taint(s). preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
	msgAnti     = "0/2 nodes are available: 1 node(s) didn't match pod anti-affinity rules, 1 node(s) had untolerated taint(s). preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
	// Older schedulers named the taint (kept: clusters run them).
	msgOldTaint = "0/3 nodes are available: 3 node(s) had untolerated taint {node.kubernetes.io/not-ready: }. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
	msgPVC      = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
)

func TestParseScheduler(t *testing.T) {
	cases := []struct {
		msg   string
		total int
		items []SchedulerItem
	}{
		{msgCPU, 2, []SchedulerItem{{1, "Insufficient cpu"}, {1, "node(s) had untolerated taint(s)"}}},
		{msgSelector, 2, []SchedulerItem{{1, "node(s) didn't match Pod's node affinity/selector"}, {1, "node(s) had untolerated taint(s)"}}},
		{msgOldTaint, 3, []SchedulerItem{{3, "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"}}},
		{msgPVC, 3, []SchedulerItem{{0, "pod has unbound immediate PersistentVolumeClaims"}}},
	}
	for _, tc := range cases {
		total, items, ok := ParseScheduler(tc.msg)
		if !ok || total != tc.total || len(items) != len(tc.items) {
			t.Fatalf("%q: %d %v %v", tc.msg, total, items, ok)
		}
		for i := range items {
			if items[i] != tc.items[i] {
				t.Errorf("%q item %d: %+v, want %+v", tc.msg, i, items[i], tc.items[i])
			}
		}
	}
	if _, _, ok := ParseScheduler("binding rejected: running Bind plugin"); ok {
		t.Error("parsed a message of another shape")
	}
}

func node(name string, labels map[string]string, taints []corev1.Taint, alloc corev1.ResourceList) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Allocatable: alloc}}
}

func TestPodScheduler(t *testing.T) {
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}
	gpuNode := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), "nvidia.com/gpu": resource.MustParse("8")}
	nodes := []corev1.Node{
		node("a", map[string]string{"team": "blue"}, nil, small),
		node("b", map[string]string{"team": "green"}, []corev1.Taint{{Key: "dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule}}, small),
	}
	withReq := func(name corev1.ResourceName, q string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{name: resource.MustParse(q)}
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{name: resource.MustParse(q)}
		return p
	}
	selector := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"team": "red"}}}
	tolerating := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}}}
	cases := []struct {
		name  string
		pod   *corev1.Pod
		nodes []corev1.Node
		msg   string
		want  []string
		avoid []string
	}{
		{"cpu too big for any node", withReq(corev1.ResourceCPU, "8"), nodes, msgCPU, []string{"requests more cpu than any node has (8 > 2)", "have taint dedicated=batch"}, nil},
		{"cpu fits a node but it is full", withReq(corev1.ResourceCPU, "1"), nodes, msgCPU, []string{"not enough free cpu on 1 of 2 nodes"}, nil},
		{"gpu not registered", withReq("nvidia.com/gpu", "1"), nodes, msgGPU, []string{"no node offers nvidia.com/gpu"}, nil},
		{"gpu registered but full", withReq("nvidia.com/gpu", "1"), append(nodes, node("g", nil, nil, gpuNode)), msgGPU, []string{"not enough free nvidia.com/gpu"}, []string{"not registered"}},
		{"selector", selector, nodes, msgSelector, []string{"nodeSelector team=red matches no node (values present: blue, green)"}, nil},
		{"spread label missing", &corev1.Pod{}, nodes, msgSpread, []string{"lack the label a topology spread constraint spreads over"}, nil},
		{"anti-affinity", &corev1.Pod{}, nodes, msgAnti, []string{"excluded by the pod's own podAntiAffinity"}, nil},
		{"tolerated taints are not blamed", tolerating, nodes, msgOldTaint, []string{"node.kubernetes.io/not-ready"}, []string{"dedicated"}},
		{"pvc", &corev1.Pod{}, nodes, msgPVC, []string{"PersistentVolumeClaim of the pod is not bound"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := schedulerFindings(tc.pod, tc.nodes, tc.msg)
			all := causes(fs)
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("no %q in %s", w, all)
				}
			}
			for _, a := range tc.avoid {
				if strings.Contains(all, a) {
					t.Errorf("unexpected %q in %s", a, all)
				}
			}
		})
	}
}

func causes(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.Cause + " | " + f.Fix + "\n")
	}
	return b.String()
}

func TestTaintClass(t *testing.T) {
	for key, want := range map[string]string{
		"nodemend.dev/repair":                            "under repair by nodemend",
		"node.kubernetes.io/not-ready":                   "NotReady",
		"node.kubernetes.io/unschedulable":               "cordoned",
		"karpenter.sh/unregistered":                      "not initialized",
		"node.cloudprovider.kubernetes.io/uninitialized": "not initialized",
		"node.cilium.io/agent-not-ready":                 "not initialized",
		"karpenter.sh/disrupted":                         "disrupted by Karpenter",
		"nvidia.com/gpu":                                 "dedicated",
	} {
		if got, _ := taintClass(key); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", key, got, want)
		}
	}
}

// Karpenter's FailedScheduling: "Failed to schedule pod, " + one clause per
// NodePool (pkg/controllers/provisioning/scheduling), joined by "; ".
func TestKarpenterFindings(t *testing.T) {
	cases := []struct{ msg, want string }{
		{`Failed to schedule pod, incompatible with nodepool "spot", daemonset overhead={"cpu":"150m","pods":"2"}, incompatible requirements, key karpenter.sh/capacity-type, karpenter.sh/capacity-type In [on-demand] not in karpenter.sh/capacity-type In [spot]`,
			"NodePool spot: the pod's node selector/affinity asks for labels or values the NodePool does not allow"},
		{`Failed to schedule pod, incompatible with nodepool "gpu", daemonset overhead={"cpu":"150m"}, did not tolerate nvidia.com/gpu=true:NoSchedule; incompatible with nodepool "default", daemonset overhead={"cpu":"150m"}, no instance type satisfied resources {"cpu":"150","pods":"3"} and requirements karpenter.sh/nodepool In [default]`,
			"NodePool default: no instance type the NodePool allows fits"},
		{`Failed to schedule pod, incompatible with nodepool "gpu", daemonset overhead={"cpu":"150m"}, all available instance types exceed limits for nodepool: "gpu"`,
			"NodePool gpu: the NodePool reached its spec.limits"},
	}
	for _, tc := range cases {
		fs := karpenterFindings(tc.msg)
		if len(fs) != 1 || !strings.Contains(strings.Join(fs[0].Evidence, "\n"), tc.want) || !strings.Contains(fs[0].Cause, "every NodePool") {
			t.Errorf("%q: %+v", tc.msg, fs)
		}
	}
}

func TestNominee(t *testing.T) {
	for msg, want := range map[string]string{"Pod should schedule on: nodeclaim/default-abcde": "default-abcde",
		"Pod should schedule on node: ip-10-0-1-2": "ip-10-0-1-2", "something else": ""} {
		if got := nominee(msg); got != want {
			t.Errorf("%q: %q", msg, got)
		}
	}
}

// TestPodHealthy: a running pod with nothing wrong says so.
func TestPodHealthy(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ok", Namespace: "d"}, Spec: corev1.PodSpec{NodeName: "a"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	r := Pod(PodInput{Pod: p, Events: []eventlog.Event{{Source: eventlog.Kubelet, Reason: "Started", Message: "Started container c"}}})
	if len(r.Findings) != 1 || r.Findings[0].Blocking || r.Findings[0].Cause != "nothing wrong found" {
		t.Fatalf("%+v", r)
	}
}

// An operator's reason on a nodemend condition is explained as one: where
// it is defined and how it recovers, not as an unknown reason.
func TestConditionFindingsOfACustomReason(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-7"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: "AcceleratedHardwareReady", Status: corev1.ConditionFalse, Reason: "CustomXID13Repeated", Message: "NvidiaXID13Warning 5 times within 10m0s"},
		{Type: "KernelReady", Status: corev1.ConditionFalse, Reason: "SomethingNewer", Message: "x"},
	}}}
	fs := conditionFindings(n)
	if len(fs) != 2 {
		t.Fatalf("findings %+v", fs)
	}
	if ev := strings.Join(fs[0].Evidence, " "); !strings.Contains(ev, "a reason of the operator's own") || !strings.Contains(fs[0].Fix, "quiet period") {
		t.Errorf("custom reason finding %+v", fs[0])
	}
	if ev := strings.Join(fs[1].Evidence, " "); strings.Contains(ev, "operator's own") || !strings.Contains(fs[1].Fix, "see the agent's events") {
		t.Errorf("unknown reason finding %+v", fs[1])
	}
}
