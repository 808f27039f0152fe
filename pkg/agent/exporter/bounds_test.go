package exporter

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/pkg/health"
)

// Whatever a finding's message holds (1 MiB, invalid UTF-8), what the
// exporter writes fits the bounds the admission policy enforces: the
// condition's and the event's message at most health.MaxMessageLength
// bytes of valid UTF-8, the reason a valid reason.
func TestWritesFitTheAdmissionBounds(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	rec := &fakeRecorder{events: make(chan string, 10)}
	node := newNode(t)
	e := New(Options{Client: exporterClient, NodeName: node, Clock: clk, Log: testr.New(t), Recorder: rec})
	m, _ := health.LookupMonitor("kernel")
	e.SetMonitors([]health.Monitor{m})
	ctx, cancel := context.WithCancel(context.Background())
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	h := &harness{t: t, node: node, clock: clk, exp: e, stop: func() { cancel(); <-done }}
	t.Cleanup(h.stop)

	huge := "fork failed \xff\xfe " + strings.Repeat("日本", 1<<18)
	e.Report(detectionOf(t, health.ReasonForkFailedOutOfPIDs, huge, clk.Now()))
	n := h.eventually("KernelReady False", hasStatus(health.KernelReady, corev1.ConditionFalse, health.ReasonForkFailedOutOfPIDs))
	c := cond(n, health.KernelReady)
	if len(c.Message) > health.MaxMessageLength || !utf8.ValidString(c.Message) || !health.ValidReason(c.Reason) {
		t.Errorf("condition: reason %q, message of %d bytes (valid UTF-8: %v)", c.Reason, len(c.Message), utf8.ValidString(c.Message))
	}
	ev := <-rec.events // "Warning ForkFailedOutOfPIDs <message>"
	msg := strings.SplitN(ev, " ", 3)[2]
	if len(msg) > health.MaxMessageLength || !utf8.ValidString(msg) {
		t.Errorf("event message of %d bytes (valid UTF-8: %v)", len(msg), utf8.ValidString(msg))
	}
}

// fakeRecorder keeps "TYPE REASON MESSAGE" of each event.
type fakeRecorder struct{ events chan string }

func (f *fakeRecorder) Event(_ *corev1.ObjectReference, eventType, reason, message string) {
	f.events <- eventType + " " + reason + " " + message
}
