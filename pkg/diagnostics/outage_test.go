package diagnostics

import (
	"context"
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/backoff"
	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/pkg/diagnostics/collect"
	"nodemend.dev/nodemend/pkg/diagnostics/collectors"
)

// A capture that finishes while the API server is unreachable keeps its
// result: the final status write is retried with backoff (a handful of
// attempts, not a loop) and lands once the API is back, and the capture
// is not run again.
func TestFinalStatusSurvivesAnOutage(t *testing.T) {
	outage, err := testenv.NewOutage(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer outage.Close()
	node := newNode(t)
	h := diagtest.NewHost(t)
	release := make(chan struct{})
	runs := 0
	startAgent(t, node, h, func(o *Options) {
		o.Config = outage.Config(cfg)
		o.Collectors = func(*collectors.Env, []v1alpha1.LogCategory) []collect.Collector {
			runs++
			return []collect.Collector{{Name: "system/gated", Category: "system", Timeout: time.Minute, Run: func(ctx context.Context, out *collect.Output) error {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
				return out.WriteFile("done", []byte("ok"))
			}}}
		}
	})
	obj := create(t, node, nil)
	waitFor(t, obj.Name, "Running", logState(v1alpha1.CaptureRunning))

	outage.Down()
	puts := func() int {
		return outage.Count(func(r string) bool { return strings.HasPrefix(r, "PUT ") && strings.HasSuffix(r, "/status") })
	}
	objGets := func() int {
		return outage.Count(func(r string) bool { return strings.HasPrefix(r, "GET ") && strings.HasSuffix(r, "/"+obj.Name) })
	}
	before, getsBefore := puts(), objGets()
	down := time.Now()
	close(release)
	time.Sleep(4 * time.Second)
	tries, elapsed := puts()-before, time.Since(down)
	// A status write is a GET then a PUT; a failed GET sends no PUT, so
	// count the GETs of the object.
	gets := objGets() - getsBefore
	bound := backoff.MaxAttempts(StatusRetryInitial, StatusRetryMax, elapsed)
	t.Logf("%d status PUTs, %d GETs of the object in %v of outage (attempt bound %d)", tries, gets, elapsed.Round(time.Millisecond), bound)
	if gets > bound {
		t.Errorf("%d reads of the object in %v of outage: more than the backoff allows (%d)", gets, elapsed, bound)
	}
	if gets < 2 {
		t.Errorf("%d reads of the object in %v of outage: the final write was not retried", gets, elapsed)
	}
	outage.Up()
	done := waitFor(t, obj.Name, "Completed after the outage", logState(v1alpha1.CaptureCompleted))
	if done.Status.LogCapture.Attempts != 1 || runs != 1 {
		t.Errorf("attempts %d, collector runs %d: the capture ran again", done.Status.LogCapture.Attempts, runs)
	}
}
