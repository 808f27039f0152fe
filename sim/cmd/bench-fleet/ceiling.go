package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ceiling is what this API server sustains in node PATCHes per second from
// a plain client on the same machine while the fleet's heartbeats run: the
// bound on how fast any controller can taint a storm's nodes here.
type ceiling struct {
	patches int
	took    time.Duration
	workers int
}

func (c ceiling) perSecond() float64 { return float64(c.patches) / c.took.Seconds() }

// decisionBound is the goal for the storm's decision p99: due nodes at the
// ceiling's pace, with 20% slack, plus 100 ms for the watch and the
// controller's reaction.
func (c ceiling) decisionBound(due int) time.Duration {
	return time.Duration(1.2*float64(due)/c.perSecond()*float64(time.Second)) + 100*time.Millisecond
}

// measureCeiling patches an annotation on nodes (once each, round-robin
// over workers, no client-side rate limit) for about d and counts the
// PATCHes that succeeded. The patch is the size of a repair's taint
// patch; the nodes are healthy ones the storm does not touch.
func measureCeiling(ctx context.Context, cfg *rest.Config, nodes []string, workers int, d time.Duration) (ceiling, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side limit: measure the server
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return ceiling{}, err
	}
	var done atomic.Int64
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	// Workers stop starting PATCHes at the deadline and finish the ones in
	// flight (cancelling them would only fill the log with client-go's
	// complaints); took runs until the last one is back.
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				i := next.Add(1)
				name := nodes[int(i)%len(nodes)]
				patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"bench.nodemend.dev/ceiling":"%d"}},"spec":{"unschedulable":false}}`, i)
				if _, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
					if ctx.Err() == nil {
						once.Do(func() { firstErr = fmt.Errorf("PATCH %s: %w", name, err) })
					}
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	c := ceiling{patches: int(done.Load()), took: time.Since(start), workers: workers}
	if c.patches == 0 {
		return c, fmt.Errorf("no PATCH succeeded: %v", firstErr)
	}
	return c, nil
}
