package cli

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/pkg/diagnostics"
	"nodemend.dev/nodemend/pkg/diagnostics/collect"
	"nodemend.dev/nodemend/pkg/diagnostics/collectors"
)

// TestLogsSince: --since reaches the agent as the request's
// logCapture.since, and the journal window starts there.
func TestLogsSince(t *testing.T) {
	h := diagtest.NewHost(t)
	node := kubeletNode(t, h)
	var mu sync.Mutex
	var since time.Time
	startAgent(t, node, h, func(o *diagnostics.Options) {
		o.Collectors = func(e *collectors.Env, cats []v1alpha1.LogCategory) []collect.Collector {
			mu.Lock()
			since = e.Since
			mu.Unlock()
			return collectors.For(e, []v1alpha1.LogCategory{v1alpha1.CategoryBase})
		}
	})
	before := time.Now()
	if _, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "logs", node, "--since", "2h", "--keep", "-o", t.TempDir(), "--progress", "plain"); err != nil {
		t.Fatal(err)
	}
	list, err := nd.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, o := range list.Items {
		if o.Spec.NodeName == node {
			found = true
			if s := o.Spec.LogCapture.Since; s == nil || s.Duration != 2*time.Hour {
				t.Errorf("spec.logCapture.since = %v, want 2h", s)
			}
		}
	}
	if !found {
		t.Fatal("no kept nodediagnostic")
	}
	mu.Lock()
	defer mu.Unlock()
	if d := before.Sub(since); d < 2*time.Hour-time.Minute || d > 2*time.Hour+time.Minute {
		t.Errorf("the collectors' window starts %v before the request, want 2h", d)
	}
}

// TestLogsParallel: --parallel bounds how many nodes' bundles are in the
// making at once: with 1, never two; with 3, three (each collector waits
// for the others, so three at once is reached or the run fails).
func TestLogsParallel(t *testing.T) {
	for _, n := range []int{1, 3} {
		var mu sync.Mutex
		cur, peak := 0, 0
		all := make(chan struct{})
		var closeOnce sync.Once
		collector := func(e *collectors.Env, cats []v1alpha1.LogCategory) []collect.Collector {
			return []collect.Collector{{Name: "base/count", Category: "base", Run: func(ctx context.Context, out *collect.Output) error {
				mu.Lock()
				cur++
				peak = max(peak, cur)
				if cur == 3 {
					closeOnce.Do(func() { close(all) })
				}
				mu.Unlock()
				if n > 1 {
					select { // the three nodes' collectors meet here
					case <-all:
					case <-ctx.Done():
					}
				} else {
					time.Sleep(100 * time.Millisecond) // an overlap, if any, is seen
				}
				mu.Lock()
				cur--
				mu.Unlock()
				return out.WriteFile("count.txt", []byte("x\n"))
			}}}
		}
		var nodes []string
		for i := 0; i < 3; i++ {
			h := diagtest.NewHost(t)
			node := kubeletNode(t, h)
			startAgent(t, node, h, func(o *diagnostics.Options) { o.Collectors = collector })
			nodes = append(nodes, node)
		}
		args := append([]string{"--kubeconfig", kubeconfig(t, cfg), "logs", "--parallel", itoa(n), "--fresh", "-o", t.TempDir(), "--progress", "plain"}, nodes...)
		if _, err := run(t, args...); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if peak != n {
			t.Errorf("--parallel %d: %d bundles in the making at once", n, peak)
		}
		mu.Unlock()
	}
}
