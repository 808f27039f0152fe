package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"nodemend.dev/nodemend/pkg/cli/explain"
)

// TestExplainSchedulerFailures: pods that cannot be scheduled, tried by
// the real kube-scheduler; explain reads its FailedScheduling events
// verbatim and must name each cause.
func TestExplainSchedulerFailures(t *testing.T) {
	ns := namespace(t, "explain-sched")
	createNode(t, testNode{name: "sched-a", labels: map[string]string{"zone": "a", "team": "blue"}})
	createNode(t, testNode{name: "sched-b", labels: map[string]string{"zone": "b", "team": "blue"},
		taints: []corev1.Taint{{Key: "dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule}}})
	ctx := context.Background()
	// An anchor for the anti-affinity case, already bound to sched-a (left
	// to the scheduler, the anti-affinity pod could be placed first).
	anchor := pausePod(ns, "anchor")
	anchor.Spec.NodeName = "sched-a"
	if _, err := core.CoreV1().Pods(ns).Create(ctx, anchor, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	requests := func(name, q string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceName(name): resource.MustParse(q)}
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(name): resource.MustParse(q)}
		}
	}
	cases := []struct {
		name string
		mut  func(*corev1.Pod)
		want []string // substrings of some finding's cause
	}{
		{"cpu", requests("cpu", "8"), []string{"requests more cpu than any node has (8 > 2)"}},
		{"memory", requests("memory", "64Gi"), []string{"requests more memory than any node has"}},
		{"gpu", requests("nvidia.com/gpu", "1"), []string{"no node offers nvidia.com/gpu: the resource is not registered on any node"}},
		{"taint", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "b"} },
			[]string{"have taint dedicated=batch the pod does not tolerate"}},
		{"selector", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"team": "red"} },
			[]string{"nodeSelector team=red matches no node (values present: blue)"}},
		{"anti-affinity", func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{"zone": "a"}
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "anchor"}}, TopologyKey: corev1.LabelHostname}}}}
		}, []string{"excluded by the pod's own podAntiAffinity"}},
		{"spread", func(p *corev1.Pod) {
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "rack", WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
		}, []string{"lack the label a topology spread constraint spreads over"}},
	}
	for _, tc := range cases {
		p := pausePod(ns, tc.name)
		tc.mut(p)
		if _, err := core.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	startScheduler(t)
	kc := kubeconfig(t, cfg)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			waitFailedScheduling(t, ns, tc.name)
			out, err := run(t, "--kubeconfig", kc, "-n", ns, "explain", "pod/"+tc.name, "-o", "json")
			if err != nil {
				t.Fatal(err)
			}
			var r explain.Report
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !hasCause(r, w) {
					t.Errorf("no finding %q in %+v", w, r.Findings)
				}
			}
			if !strings.Contains(out, "nodes are available") {
				t.Errorf("the scheduler's message is not quoted as evidence")
			}
		})
	}
	// The text form names cause and fix.
	out, err := run(t, "--kubeconfig", kc, "-n", ns, "explain", "pod", "gpu")
	if err != nil || !strings.Contains(out, "fix: the device plugin that advertises nvidia.com/gpu") {
		t.Fatalf("text output: %v", err)
	}
}

func hasCause(r explain.Report, want string) bool {
	for _, f := range r.Findings {
		if strings.Contains(f.Cause, want) {
			return true
		}
	}
	return false
}

// waitFailedScheduling waits for the scheduler's first FailedScheduling
// event on the pod.
func waitFailedScheduling(t *testing.T, ns, pod string) {
	t.Helper()
	sel := fields.Set{"involvedObject.name": pod, "reason": "FailedScheduling"}.AsSelector().String()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		evs, err := core.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) > 0 {
			t.Logf("scheduler: %s", evs.Items[0].Message)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no FailedScheduling event for %s/%s", ns, pod)
}

// TestExplainNodeSelectionWithScheduler: the real scheduler's "node(s)
// didn't match Pod's node affinity/selector" in its forms: nothing
// matches, what matches is refused for another reason, terms whose
// expressions match apart but never together; and Karpenter's own
// controller pods (the Karpenter chart's affinity) with only Karpenter
// nodes, and with one free node for two replicas.
func TestExplainNodeSelectionWithScheduler(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "explain-sel")
	createNode(t, testNode{name: "sel-blue", labels: map[string]string{"sel": "t", "team": "blue", "zone": "a"}})
	createNode(t, testNode{name: "sel-green", labels: map[string]string{"sel": "t", "team": "green", "zone": "b"},
		taints: []corev1.Taint{{Key: "dedicated", Value: "green", Effect: corev1.TaintEffectNoSchedule}}})
	createNode(t, testNode{name: "ks-1", labels: map[string]string{"ks": "t", "karpenter.sh/nodepool": "default"}})
	createNode(t, testNode{name: "ks-2", labels: map[string]string{"ks": "t", "karpenter.sh/nodepool": "default"}})
	createNode(t, testNode{name: "ks-free", labels: map[string]string{"ks2": "t"}})

	required := func(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	}
	in := func(key string, values ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
	}
	// The Karpenter chart's controller pod (charts/karpenter values.yaml:
	// nodeSelector kubernetes.io/os: linux, required karpenter.sh/nodepool
	// DoesNotExist, one replica per hostname); ks/ks2 confine each case to
	// this test's nodes.
	karpenter := func(name, confine string) *corev1.Pod {
		p := pausePod(ns, name)
		p.Labels = map[string]string{"app.kubernetes.io/name": "karpenter", "app.kubernetes.io/instance": "karpenter"}
		p.Spec.NodeSelector = map[string]string{corev1.LabelOSStable: "linux", confine: "t"}
		p.Spec.Affinity = required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "karpenter.sh/nodepool", Operator: corev1.NodeSelectorOpDoesNotExist}}})
		p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "karpenter"}}, TopologyKey: corev1.LabelHostname}}}
		return p
	}
	cases := []struct {
		pod  *corev1.Pod
		want string
	}{
		{func() *corev1.Pod {
			p := pausePod(ns, "nomatch")
			p.Spec.Affinity = required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{in("sel", "t"), in("team", "red")}})
			return p
		}(), "the pod's node selection matches no node: node affinity team in (red) matches no node (values present: blue, green)"},
		{func() *corev1.Pod {
			p := pausePod(ns, "tainted")
			p.Spec.NodeSelector = map[string]string{"team": "green"}
			return p
		}(), "the 1 that match (sel-green) are refused for the scheduler's other reasons"},
		{func() *corev1.Pod {
			p := pausePod(ns, "apart")
			p.Spec.Affinity = required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{in("team", "blue"), in("zone", "b")}},
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{in("zone", "c")}})
			return p
		}(), "each of its expressions matches some node, but no node matches all of them together"},
		{karpenter("karpenter-6d9c7b5f4-abcde", "ks"), "Karpenter's own controller pod is pending"},
	}
	for _, tc := range cases {
		if _, err := core.CoreV1().Pods(ns).Create(ctx, tc.pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The second replica, with the first already on the one free node.
	first := karpenter("karpenter-6d9c7b5f4-first", "ks2")
	first.Spec.NodeName = "ks-free"
	if _, err := core.CoreV1().Pods(ns).Create(ctx, first, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	second := karpenter("karpenter-6d9c7b5f4-second", "ks2")
	if _, err := core.CoreV1().Pods(ns).Create(ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	startScheduler(t)
	kc := kubeconfig(t, cfg)
	explainPod := func(t *testing.T, name string) explain.Report {
		t.Helper()
		waitFailedScheduling(t, ns, name)
		out, err := run(t, "--kubeconfig", kc, "-n", ns, "explain", "pod/"+name, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var r explain.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "didn't match Pod's node affinity/selector") {
			t.Errorf("the scheduler's wording is not quoted: %s", out)
		}
		return r
	}
	for _, tc := range cases {
		t.Run(tc.pod.Name, func(t *testing.T) {
			if r := explainPod(t, tc.pod.Name); !hasCause(r, tc.want) {
				t.Errorf("no finding %q in %+v", tc.want, r.Findings)
			}
		})
	}
	t.Run("second replica", func(t *testing.T) {
		r := explainPod(t, second.Name)
		var f *explain.Finding
		for i := range r.Findings {
			if strings.Contains(r.Findings[i].Cause, "Karpenter's own controller pod is pending") {
				f = &r.Findings[i]
			}
		}
		if f == nil || !strings.Contains(strings.Join(f.Evidence, "\n"), "one replica per node, so the 1 node(s) without the label hold at most 1 replica(s)") {
			t.Errorf("finding %+v", f)
		}
	})
}
