package cli

import (
	"context"
	"fmt"
	"time"

	"nodemend.dev/nodemend/api/v1alpha1"
)

// wait follows the request until its log capture is final.
func (o *logsOptions) wait(ctx context.Context, c *Clients, prog *Progress, node string, obj *v1alpha1.NodeDiagnostic) (*v1alpha1.NodeDiagnostic, error) {
	return followCapture(ctx, c, prog, node, obj, captureFollow{
		agentTimeout: o.agentTimeout, poll: o.poll,
		status: func(st *v1alpha1.NodeDiagnosticStatus) *v1alpha1.CaptureStatus { return st.LogCapture },
		failed: "the agent could not collect the bundle",
		stopped: func(_ time.Duration, last string) error {
			return fmt.Errorf("timed out after %v while %s", o.timeout, last)
		},
		running: func(st *v1alpha1.CaptureStatus) string {
			if st.CollectorsTotal > 0 && st.CollectorsDone < st.CollectorsTotal {
				prog.Tick(node, "collecting", "%d/%d collectors", st.CollectorsDone, st.CollectorsTotal)
			} else {
				prog.Update(node, "collecting", "%s", st.Message)
			}
			return "collecting: " + st.Message
		},
	})
}
