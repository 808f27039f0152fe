package deploytest

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A drain ahead of a cloud's scheduled event believes the node's agent's
// Event (pkg/repair/scheduled). The class, as for the other guards: each
// identity first writes every Event it may, then tries to write one in the
// agent's name. Only the agent on the node, and that node's own kubelet
// (agents run by systemd), may.
func TestOnlyTheAgentRecordsEventsAsTheAgent(t *testing.T) {
	ctx := t.Context()
	a := agentOn(t, uniqueName("se-a"))
	other := uniqueName("se-b")
	// A tenant who may write Events in the default namespace, as many
	// components may.
	ensureBinding(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scheduled-tenant", Namespace: metav1.NamespaceDefault},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: namespaceAdminRole(t)},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "events-tenant"}}})
	tenant := impersonated(t, "a tenant", "events-tenant")
	waitFor(t, "the agent event source policy", func(ctx context.Context) bool {
		_, err := tenant.core.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, scheduledEvent(a.node), metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), "records events as nodemend-agent")
	})
	refused, allowed := verdicts(t)
	const want = "records events as nodemend-agent"

	// The tenant writes what it may: an Event in its own name about the
	// node. Then it tries the agent's name, creating and updating.
	own := scheduledEvent(a.node)
	own.Source.Component, own.ReportingController = "tenant-app", "tenant-app"
	written, err := tenant.core.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, own, metav1.CreateOptions{})
	allowed("a tenant's own event about the node", err)
	if written != nil {
		written.Source.Component, written.ReportingController = "nodemend-agent", "nodemend-agent"
		_, err = tenant.core.CoreV1().Events(metav1.NamespaceDefault).Update(ctx, written, metav1.UpdateOptions{})
		refused("a tenant's event changed to the agent's name", err, want)
		_, err = tenant.core.CoreV1().Events(metav1.NamespaceDefault).Patch(ctx, written.Name, types.MergePatchType,
			[]byte(`{"reportingComponent":"nodemend-agent"}`), metav1.PatchOptions{})
		refused("a tenant's event patched to the agent's reporting controller", err, want)
	}
	_, err = tenant.core.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, scheduledEvent(a.node), metav1.CreateOptions{})
	refused("a tenant's event in the agent's name", err, want)
	onlySource := scheduledEvent(a.node)
	onlySource.ReportingController = ""
	_, err = tenant.core.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, onlySource, metav1.CreateOptions{})
	refused("a tenant's event with the agent as its source only", err, want)

	// The controller records events only as nodemend-repair.
	c := controllerActor(t)
	ev1 := agentEventsV1(a.node)
	ev1.Reason = "ScheduledMaintenance"
	_, err = c.core.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, ev1, metav1.CreateOptions{})
	refused("the controller's event in the agent's name", err, "records events as nodemend-")

	// A kubelet (systemd agents): about its own Node, as that node; not
	// about another.
	k := kubeletOf(t, a.node)
	_, err = k.core.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, scheduledEvent(a.node), metav1.CreateOptions{})
	allowed("the node's kubelet, about its own Node", err)
	_, err = k.core.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, scheduledEvent(other), metav1.CreateOptions{})
	refused("a kubelet, about another Node", err, want)
	asOther := scheduledEvent(a.node)
	asOther.ReportingInstance, asOther.Source.Host = other, other
	_, err = k.core.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, asOther, metav1.CreateOptions{})
	refused("a kubelet, as another node", err, want)

	// The agent itself, on its node.
	_, err = a.core.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, scheduledEvent(a.node), metav1.CreateOptions{})
	allowed("the node's agent", err)
}

// scheduledEvent is the agent's Warning for a cloud's scheduled event.
func scheduledEvent(node string) *corev1.Event {
	e := agentCoreEvent(node)
	e.Reason = "ScheduledMaintenance"
	e.Message = "the cloud scheduled system-reboot (instance-event-1) for this instance from 2026-12-07T03:00:00Z"
	return e
}

// The controller's cordon ahead of a scheduled event: admitted only in the
// request that records the drain, and lifted only with that record when it
// claims the cordon. The controller first writes the record it may, then
// tries a cordon without it, and to lift a person's cordon.
func TestScheduledDrainCordonNeedsItsRecord(t *testing.T) {
	waitForTargetsPolicy(t)
	ctx := t.Context()
	c := controllerActor(t)
	refused, allowed := verdicts(t)
	patch := func(f *fixture, body map[string]any) error {
		_, err := c.core.CoreV1().Nodes().Patch(ctx, f.node, types.MergePatchType, mustJSON(body), metav1.PatchOptions{})
		return err
	}
	record := func(cordoned bool) map[string]any {
		v := `{"reason":"ScheduledMaintenance","since":"2026-12-06T04:00:00Z","cordoned":false}`
		if cordoned {
			v = strings.Replace(v, "false", "true", 1)
		}
		return map[string]any{"nodemend.dev/scheduled-drain": v}
	}

	t.Run("legitimate", func(t *testing.T) {
		f := newFixture(t, "sched-legit", false)
		allowed("cordon with the drain's record", patch(f, map[string]any{"metadata": map[string]any{"annotations": record(true)}, "spec": map[string]any{"unschedulable": true}}))
		allowed("lift it with the record", patch(f, map[string]any{"metadata": map[string]any{"annotations": map[string]any{"nodemend.dev/scheduled-drain": nil}}, "spec": map[string]any{"unschedulable": false}}))
	})
	t.Run("a cordon without recording the drain in the same request", func(t *testing.T) {
		f := newFixture(t, "sched-late", false)
		allowed("the record alone, not claiming a cordon", patch(f, map[string]any{"metadata": map[string]any{"annotations": record(false)}}))
		refused("a cordon afterwards", patch(f, map[string]any{"spec": map[string]any{"unschedulable": true}}), "cordons only a Node it is repairing")
		refused("a cordon claimed afterwards", patch(f, map[string]any{"metadata": map[string]any{"annotations": record(true)}, "spec": map[string]any{"unschedulable": true}}), "cordons only a Node it is repairing")
	})
	t.Run("a person's cordon", func(t *testing.T) {
		f := newFixture(t, "sched-person", true)
		refused("claiming it", patch(f, map[string]any{"metadata": map[string]any{"annotations": record(true)}}), "records a cordon as its own only in the request that cordons")
		allowed("a record not claiming it", patch(f, map[string]any{"metadata": map[string]any{"annotations": record(false)}}))
		refused("lifting it with that record", patch(f, map[string]any{"metadata": map[string]any{"annotations": map[string]any{"nodemend.dev/scheduled-drain": nil}}, "spec": map[string]any{"unschedulable": false}}), "lifts only its own cordon")
	})
}
