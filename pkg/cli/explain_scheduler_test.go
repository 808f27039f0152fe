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
	// An anchor for the anti-affinity case, placed by the scheduler on sched-a.
	anchor := pausePod(ns, "anchor")
	anchor.Spec.NodeSelector = map[string]string{"zone": "a"}
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
