package cli

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"nodemend.dev/nodemend/api/v1alpha1"
)

// captureFollow is what differs between following a log bundle and a
// packet capture.
type captureFollow struct {
	// agentTimeout: how long the node's agent may take to accept.
	agentTimeout, poll time.Duration
	// status picks the capture's status out of the object's.
	status func(*v1alpha1.NodeDiagnosticStatus) *v1alpha1.CaptureStatus
	// failed starts the error of a failed capture.
	failed string
	// running shows a running capture's progress and says what it is doing.
	running func(*v1alpha1.CaptureStatus) string
	// stopped is the error when the context ends after waited, while last.
	stopped func(waited time.Duration, last string) error
}

// followCapture polls obj until its capture is final for the object's
// current generation, returning the final object, or an error that says
// why: the capture failed, no agent accepted in time, or ctx ended.
func followCapture(ctx context.Context, c *Clients, prog *Progress, node string, obj *v1alpha1.NodeDiagnostic, f captureFollow) (*v1alpha1.NodeDiagnostic, error) {
	start := time.Now()
	last := "waiting for the agent"
	for {
		cur, err := c.ND.Get(ctx, obj.Name)
		if err != nil {
			if ctx.Err() != nil {
				return nil, f.stopped(time.Since(start), last)
			}
			return nil, Explain(err, "reading nodediagnostic/"+obj.Name)
		}
		accepted := meta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionAccepted)
		st := f.status(&cur.Status)
		current := st != nil && st.Generation == cur.Generation
		switch {
		case current && st.State == v1alpha1.CaptureCompleted:
			return cur, nil
		case current && st.State == v1alpha1.CaptureFailed:
			return nil, fmt.Errorf("%s: %s", f.failed, st.Message)
		case !accepted && time.Since(start) > f.agentTimeout:
			return nil, fmt.Errorf("no nodemend-agent answered for node %s within %v: is the agent running there? "+
				"(kubectl get pods -A -o wide --field-selector spec.nodeName=%s)", node, f.agentTimeout, node)
		case !accepted:
			prog.Update(node, "validating", "waiting for the node's agent")
		case st != nil && st.State == v1alpha1.CaptureRunning:
			last = f.running(st)
		}
		if err := sleepCtx(ctx, f.poll); err != nil {
			return nil, f.stopped(time.Since(start), last)
		}
	}
}
