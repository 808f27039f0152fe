package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/internal/cloudmeta"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/imdsmock"
	"nodemend.dev/nodemend/pkg/health"
)

// cloudAgent runs an agent on an EC2 node (its providerID says aws://)
// whose metadata service is AWS's metadata mock started with args, the
// cloud chosen from the providerID as --cloud-metadata=auto does.
func cloudAgent(t *testing.T, args ...string) (*running, *imdsmock.Mock) {
	t.Helper()
	mock, err := imdsmock.Start(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mock.Stop)
	root := hostroot.New(t).WithProc()
	var node string
	r := startAgentWith(t, root, fileJournal+"monitors:\n  kernel:\n    checkInterval: 1s\n",
		corev1.NodeSpec{ProviderID: "aws:///us-east-1a/i-1234567890abcdef0"},
		func(o *Options) {
			node = o.NodeName
			cloud, err := cloudmeta.Select(cloudmeta.Config{Cloud: cloudmeta.Auto, Endpoint: mock.Endpoint}, func(ctx context.Context) (string, error) {
				n, err := o.Client.GetNode(ctx, node)
				if err != nil {
					return "", err
				}
				return n.Spec.ProviderID, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			o.Cloud = cloud
		})
	return r, mock
}

// TestScheduledEventsBecomeWarnings: the metadata mock's scheduled
// retirement and spot interruption notice become Warning Events with the
// registry's reasons, and KernelReady stays True.
func TestScheduledEventsBecomeWarnings(t *testing.T) {
	t.Run("retirement", func(t *testing.T) {
		r, _ := cloudAgent(t, "events", "--code", "instance-retirement", "--state", "active",
			"--not-before", time.Now().Add(48*time.Hour).UTC().Format(time.RFC3339))
		ev := r.waitEvent(health.ReasonScheduledMaintenance)
		if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "instance-retirement") || !strings.Contains(ev.Message, "instance-event-") {
			t.Errorf("event %s %q", ev.Type, ev.Message)
		}
		r.waitNode("KernelReady True", is(health.KernelReady, corev1.ConditionTrue, "KernelIsReady"))
	})
	t.Run("spot", func(t *testing.T) {
		r, _ := cloudAgent(t, "spot", "--action", "terminate")
		ev := r.waitEvent(health.ReasonSpotInterruption)
		if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "terminated at") {
			t.Errorf("event %s %q", ev.Type, ev.Message)
		}
		r.waitNode("KernelReady True", is(health.KernelReady, corev1.ConditionTrue, "KernelIsReady"))
	})
}

// TestNoEventsNoWarnings: before the mock's trigger time there is no
// event, and no Warning.
func TestNoEventsNoWarnings(t *testing.T) {
	r, mock := cloudAgent(t, "--mock-delay-sec", "3600")
	r.waitNode("KernelReady True", is(health.KernelReady, corev1.ConditionTrue, "KernelIsReady"))
	// Three checks of both notices, counted at the mock: an absence of
	// events means something only once the agent has looked.
	deadline := time.Now().Add(15 * time.Second)
	for mock.Requests("latest/meta-data/events/maintenance/scheduled") < 3 || mock.Requests("latest/meta-data/spot/instance-action") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not check the metadata service three times in 15s:\n%s", mock.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, reason := range []string{health.ReasonScheduledMaintenance, health.ReasonSpotInterruption} {
		evs, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + r.node + ",reason=" + reason})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) > 0 {
			t.Errorf("%s: %q", reason, evs.Items[0].Message)
		}
	}
}
