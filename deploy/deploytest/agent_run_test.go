package deploytest

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/pkg/agent"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/monitors"
	"nodemend.dev/nodemend/pkg/monitors/kernel"
)

type syncedClock struct{}

func (syncedClock) ReadTimex() (kernel.Timex, error) { return kernel.Timex{MaxErrorMicros: 1000}, nil }

// The real agent, with nothing but the token bound to its pod, under the
// chart's RBAC and admission policies: it publishes a fatal kernel fault on
// its node, records the event, and serves a NodeDiagnostic, and the API
// server refuses none of its requests.
func TestAgentRunsWithOnlyItsBoundToken(t *testing.T) {
	ctx := t.Context()
	id := agentOn(t, "run-a")
	tokenCfg := configFor(bearerToken(t, id))
	var denied ForbiddenLog
	cfg := denied.Wrap(tokenCfg)
	client := Must[*coreclient.Client](t)(coreclient.New(cfg))

	root := hostroot.New(t).WithProc()
	root.AppendKmsg()
	root.AppendJournal()
	root.WriteFile("etc/nodemend/agent.yaml", "sources:\n  journal:\n    mode: file\n    file: /"+hostroot.JournalFixture+"\n")
	a, err := agent.New(agent.Options{
		Client: client, NodeName: "run-a", HostRoot: root.Path(""), ConfigPath: root.Path("etc/nodemend/agent.yaml"),
		ConfigPoll: 100 * time.Millisecond, Log: testr.New(t), Hosts: monitors.Hosts{Timex: syncedClock{}},
		Diagnostics: agent.DiagnosticsOptions{Config: cfg},
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() {
		if t.Failed() {
			t.Logf("requests the API server refused: %v", denied.List())
			if c := kernelReady(context.Background(), "run-a"); c != nil {
				t.Logf("KernelReady: %+v", *c)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()

	// The kmsg reader tails its (regular) file from the end once it has
	// opened it: a record written before that is old news. Write the fault
	// again until it is seen.
	seq := uint64(0)
	poll(t, "KernelReady=False ForkFailedOutOfPIDs on run-a", func(ctx context.Context) bool {
		c := kernelReady(ctx, "run-a")
		if c != nil && c.Status == corev1.ConditionFalse && c.Reason == health.ReasonForkFailedOutOfPIDs {
			return true
		}
		if seq++; seq%10 == 1 {
			root.AppendKmsg(hostroot.KmsgRecord(3, seq, seq*1000, "cgroup: fork rejected by pids controller in /system.slice/containerd.service"))
		}
		return false
	})
	poll(t, "the ForkFailedOutOfPIDs event on run-a", func(ctx context.Context) bool {
		evs, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "run-a").String()})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == health.ReasonForkFailedOutOfPIDs {
				return true
			}
		}
		return false
	})

	// base reads the Node, nodemend lists its events: both through RBAC.
	newDiagnostic(t, "run-a-logs", "run-a", "base", "nodemend")
	var status map[string]any
	poll(t, "the NodeDiagnostic of run-a completed", func(ctx context.Context) bool {
		u, err := admin.CoreV1().RESTClient().Get().AbsPath("/apis/nodemend.dev/v1alpha1/nodediagnostics/run-a-logs").DoRaw(ctx)
		if err != nil {
			return false
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(u); err != nil {
			return false
		}
		status, _, _ = unstructured.NestedMap(obj.Object, "status", "logCapture")
		return status["state"] == "Completed" || status["state"] == "Failed"
	})
	if status["state"] != "Completed" || status["errors"] != nil {
		t.Errorf("bundle: %v", status)
	}
	if d := denied.List(); len(d) > 0 {
		t.Errorf("the API server refused the agent %d requests:\n%v", len(d), d)
	}
}

func poll(t *testing.T, what string, cond func(context.Context) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return cond(ctx), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func kernelReady(ctx context.Context, node string) *corev1.NodeCondition {
	n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeConditionType(health.KernelReady) {
			return &c
		}
	}
	return nil
}
