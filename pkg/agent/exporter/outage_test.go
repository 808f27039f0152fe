package exporter

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/pkg/health"
)

// During a 60 s API outage (the real API server behind a proxy that cuts
// every connection) the exporter keeps changing state and retries with its
// backoff: at most MaxWritesPerMinute (19) status PATCHes in the minute,
// not one per change; once the API is back it writes the state of that
// moment within 5 s (RetryMax×1.2 is 4.8 s). The clock is fake: the minute is
// walked in 50 ms steps, each waited on until the exporter is idle again.
func TestOutageWritesAreBoundedAndTheLatestStateFollowsTheReturn(t *testing.T) {
	outage, err := testenv.NewOutage(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer outage.Close()
	c, err := coreclient.New(outage.Config(env.Config))
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := startExporterWith(t, c, newNode(t), clk, "kernel")
	h.eventually("KernelReady True", hasStatus(health.KernelReady, corev1.ConditionTrue, health.HealthyKernelIsReady))
	patches := func() int {
		return outage.Count(func(r string) bool { return strings.HasPrefix(r, "PATCH ") })
	}
	before := patches()

	outage.Down()
	idle := func() {
		for deadline := time.Now().Add(10 * time.Second); !clk.HasWaiters(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the exporter never went back to waiting")
			}
		}
	}
	step := 50 * time.Millisecond
	start := clk.Now()
	for i := 0; clk.Now().Sub(start) < time.Minute; i++ {
		// A change every 100 ms of the outage: each one alone would be a
		// write without backoff.
		if i%2 == 0 {
			msg := "fork failed " + clk.Now().Sub(start).String()
			h.exp.Report(detectionOf(t, health.ReasonForkFailedOutOfPIDs, msg, clk.Now()))
		}
		idle()
		clk.Step(step)
		idle()
	}
	during := patches() - before
	t.Logf("%d status PATCHes during a 60 s outage with a change every 100 ms (bound %d)", during, MaxWritesPerMinute)
	if during > MaxWritesPerMinute {
		t.Errorf("%d status PATCHes during the outage, more than the bound of %d", during, MaxWritesPerMinute)
	}
	if during < 8 {
		t.Errorf("only %d status PATCHes during the outage: the exporter gave up retrying", during)
	}

	latest := "fork failed at the API's return"
	h.exp.Report(detectionOf(t, health.ReasonForkFailedOutOfPIDs, latest, clk.Now()))
	outage.Up()
	back := clk.Now()
	for {
		n, err := client.CoreV1().Nodes().Get(t.Context(), h.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := cond(n, health.KernelReady); c != nil && c.Status == corev1.ConditionFalse && c.Message == latest {
			break
		}
		if clk.Now().Sub(back) > 5*time.Second {
			t.Fatalf("the latest state was not written %v after the API came back: %+v", clk.Now().Sub(back), cond(n, health.KernelReady))
		}
		idle()
		clk.Step(step)
		idle()
	}
	t.Logf("latest state written %v (fake time) after the API came back", clk.Now().Sub(back))
}
