package deploytest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// agentCoreEvent is a core/v1 Event as nodemend-agent's recorder writes it
// on node: about the Node, source and reporting nodemend-agent on node.
func agentCoreEvent(node string) *corev1.Event {
	now := metav1.Now()
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: uniqueName(node)},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)},
		Reason:         "SoftLockup", Message: "watchdog: BUG: soft lockup - CPU#3 stuck for 23s!", Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "nodemend-agent", Host: node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "nodemend-agent", ReportingInstance: node,
	}
}

// agentEventsV1 is the same event through events.k8s.io/v1 (which refuses
// a deprecatedSource on create).
func agentEventsV1(node string) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: uniqueName(node)},
		Regarding:  corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node},
		Reason:     "SoftLockup", Note: "watchdog: BUG: soft lockup", Type: corev1.EventTypeWarning, Action: "Detect",
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: "nodemend-agent", ReportingInstance: node,
	}
}

// The event lane, with tokens bound to agent pods on two nodes: node A's
// agent creates and updates (the correlator's count PATCH) its own events
// about node A, through either events API; every event about another
// object, in another component's name or another node's, and every update
// of an event that is not its own, is refused.
func TestAgentEventsAreAboutItsOwnNodeInItsOwnName(t *testing.T) {
	ctx := t.Context()
	a, b := agentOn(t, "ev-a"), agentOn(t, "ev-b")
	waitForEventPolicy(t, a)

	refused, allowed := verdicts(t)
	create := func(id agentIdentity, mut func(*corev1.Event)) (*corev1.Event, error) {
		e := agentCoreEvent(id.node)
		if mut != nil {
			mut(e)
		}
		return id.core.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, e, metav1.CreateOptions{})
	}
	createV1 := func(id agentIdentity, mut func(*eventsv1.Event)) error {
		e := agentEventsV1(id.node)
		if mut != nil {
			mut(e)
		}
		_, err := id.core.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, e, metav1.CreateOptions{})
		return err
	}

	own, err := create(a, nil)
	allowed("A records an event about A", err)
	// The agent's RBAC has no events.k8s.io (its recorder is core/v1's);
	// granted here, the policy still holds it to the lane.
	refusedByRBAC := createV1(a, nil)
	if refusedByRBAC == nil || !apierrors.IsForbidden(refusedByRBAC) || !strings.Contains(refusedByRBAC.Error(), "cannot create resource") {
		t.Errorf("events.k8s.io without RBAC: %v, want refused by RBAC", refusedByRBAC)
	}
	grantEventsV1(t, "nodemend-agent")
	var last error
	waitFor(t, "the events.k8s.io grant", func(context.Context) bool {
		last = createV1(a, nil)
		if last != nil {
			t.Logf("events.k8s.io create: %v", last)
		}
		return last == nil
	})

	refused("A records an event about B", errOf(create(a, func(e *corev1.Event) { e.InvolvedObject.Name = "ev-b" })),
		"may only record events about its own Node, not Node ev-b")
	refused("A records an event about a Pod", errOf(create(a, func(e *corev1.Event) {
		e.InvolvedObject = corev1.ObjectReference{Kind: "Pod", Namespace: metav1.NamespaceDefault, Name: "coredns"}
	})), "not Pod coredns")
	refused("A records an event as the kubelet", errOf(create(a, func(e *corev1.Event) { e.Source.Component = "kubelet" })),
		"must record events as nodemend-agent on ev-a")
	refused("A records an event reported as the kubelet", errOf(create(a, func(e *corev1.Event) { e.ReportingController = "kubelet" })),
		"must record events as nodemend-agent on ev-a")
	refused("A records an event as B's agent", errOf(create(a, func(e *corev1.Event) { e.Source.Host, e.ReportingInstance = "ev-b", "ev-b" })),
		"must record events as nodemend-agent on ev-a")
	refused("A records an event about a namespaced Node", errOf(create(a, func(e *corev1.Event) { e.InvolvedObject.Namespace = "default" })),
		"may only record events about its own Node")
	refused("A relates its event to a Secret", errOf(create(a, func(e *corev1.Event) {
		e.Related = &corev1.ObjectReference{Kind: "Secret", Namespace: "kube-system", Name: "x"}
	})), "may not relate its events")
	refused("A records an events.k8s.io event about B", createV1(a, func(e *eventsv1.Event) { e.Regarding.Name = "ev-b" }), "not Node ev-b")
	refused("A records an events.k8s.io event as Karpenter", createV1(a, func(e *eventsv1.Event) { e.ReportingController = "karpenter" }),
		"must record events as nodemend-agent")
	refused("A records an events.k8s.io event as B's agent", createV1(a, func(e *eventsv1.Event) { e.ReportingInstance = "ev-b" }),
		"must record events as nodemend-agent on ev-a")

	// The correlator's count update of its own event, as client-go's
	// EventSinkImpl sends it (a strategic merge patch of count, message
	// and lastTimestamp).
	countPatch := fmt.Sprintf(`{"count":2,"message":"again","lastTimestamp":%q}`, time.Now().UTC().Format(time.RFC3339))
	_, err = a.core.CoreV1().Events(metav1.NamespaceDefault).Patch(ctx, own.Name, types.StrategicMergePatchType, []byte(countPatch), metav1.PatchOptions{})
	allowed("A counts a repeat of its own event", err)
	_, err = b.core.CoreV1().Events(metav1.NamespaceDefault).Patch(ctx, own.Name, types.StrategicMergePatchType, []byte(countPatch), metav1.PatchOptions{})
	refused("B counts A's event", err, "nodemend-agent on node ev-b may")
	_, err = a.core.CoreV1().Events(metav1.NamespaceDefault).Patch(ctx, own.Name, types.StrategicMergePatchType,
		[]byte(`{"involvedObject":{"name":"ev-b"}}`), metav1.PatchOptions{})
	refused("A moves its event to B", err, "not Node ev-b")

	// Someone else's event about node A (the kubelet's): not A's to rewrite.
	kubelet := agentCoreEvent("ev-a")
	kubelet.Source, kubelet.ReportingController, kubelet.ReportingInstance = corev1.EventSource{Component: "kubelet", Host: "ev-a"}, "kubelet", "ev-a"
	kubelet = Must[*corev1.Event](t)(admin.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, kubelet, metav1.CreateOptions{}))
	_, err = a.core.CoreV1().Events(metav1.NamespaceDefault).Patch(ctx, kubelet.Name, types.StrategicMergePatchType, []byte(countPatch), metav1.PatchOptions{})
	refused("A counts the kubelet's event on A", err, "nodemend-agent on node ev-a")
	_, err = a.core.CoreV1().Events(metav1.NamespaceDefault).Patch(ctx, kubelet.Name, types.StrategicMergePatchType,
		[]byte(`{"source":{"component":"nodemend-agent"},"reportingComponent":"nodemend-agent"}`), metav1.PatchOptions{})
	refused("A takes over the kubelet's event", err, "may only update its own events")

	got := Must[*corev1.Event](t)(admin.CoreV1().Events(metav1.NamespaceDefault).Get(ctx, own.Name, metav1.GetOptions{}))
	if got.Count != 2 || got.InvolvedObject.Name != "ev-a" {
		t.Errorf("A's event after the writes: count %d, about %s", got.Count, got.InvolvedObject.Name)
	}
}

// The controller's events are its own and about what it repairs.
func TestControllerEventsAreItsOwn(t *testing.T) {
	ctx := t.Context()
	c := controllerClient(t)
	ev := func(mut func(*eventsv1.Event)) error {
		e := &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: uniqueName("ctl")},
			Regarding:  corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "n1"},
			Reason:     "NodeRepairStarted", Note: "tainted", Type: corev1.EventTypeNormal, Action: "Taint",
			EventTime:           metav1.NewMicroTime(time.Now()),
			ReportingController: "nodemend-repair", ReportingInstance: "nodemend-repair-nodemend-controller-7d9f-x2",
		}
		if mut != nil {
			mut(e)
		}
		_, err := c.EventsV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
		return err
	}
	waitFor(t, "the controller events policy", func(ctx context.Context) bool {
		err := ev(func(e *eventsv1.Event) { e.ReportingController = "kubelet" })
		return err != nil && strings.Contains(err.Error(), "nodemend-controller records events as nodemend-repair")
	})
	for name, mut := range map[string]func(*eventsv1.Event){
		"on a Node":             nil,
		"on a NodeRepairPolicy": func(e *eventsv1.Event) { e.Regarding = corev1.ObjectReference{Kind: "NodeRepairPolicy", Name: "gpu"} },
		"on a NodePool":         func(e *eventsv1.Event) { e.Regarding = corev1.ObjectReference{Kind: "NodePool", Name: "default"} },
		"on a MachineDeployment": func(e *eventsv1.Event) {
			e.Namespace, e.Regarding = "kube-system", corev1.ObjectReference{Kind: "MachineDeployment", Namespace: "kube-system", Name: "md"}
		},
		// Hand-over and deletion relate the node to the backend's target.
		"related to its NodeClaim": func(e *eventsv1.Event) {
			e.Related = &corev1.ObjectReference{APIVersion: "karpenter.sh/v1", Kind: "NodeClaim", Name: "default-x2"}
		},
		"related to the NodeRemediation of a ladder rung": func(e *eventsv1.Event) {
			e.Related = &corev1.ObjectReference{APIVersion: "nodemend.dev/v1alpha1", Kind: "NodeRemediation", Name: "rb-0-reboot-1"}
		},
		"related to its Machine": func(e *eventsv1.Event) {
			e.Related = &corev1.ObjectReference{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Namespace: "capi", Name: "md-0-x2"}
		},
	} {
		if err := ev(mut); err != nil {
			t.Errorf("the controller's event %s: refused: %v", name, err)
		}
	}
	for name, mut := range map[string]func(*eventsv1.Event){
		"as the kubelet":        func(e *eventsv1.Event) { e.ReportingController = "kubelet" },
		"as nodemend-agent":     func(e *eventsv1.Event) { e.ReportingController, e.ReportingInstance = "nodemend-agent", "n1" },
		"with another instance": func(e *eventsv1.Event) { e.ReportingInstance = "kubelet-n1" },
		"about a Pod": func(e *eventsv1.Event) {
			e.Regarding = corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web"}
		},
		"related to a Secret": func(e *eventsv1.Event) {
			e.Related = &corev1.ObjectReference{Kind: "Secret", Namespace: "default", Name: "s"}
		},
		"related to a Pod": func(e *eventsv1.Event) {
			e.Related = &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web"}
		},
	} {
		if err := ev(mut); err == nil || !apierrors.IsForbidden(err) {
			t.Errorf("the controller's event %s: %v, want refused", name, err)
		}
	}
	// Leader election's core event on its Lease, named after the replica.
	le := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: Namespace, Name: uniqueName("nodemend-controller")},
		InvolvedObject: corev1.ObjectReference{Kind: "Lease", APIVersion: "coordination.k8s.io/v1", Namespace: Namespace, Name: "nodemend-controller"},
		Reason:         "LeaderElection", Message: "ctl-0_5f1c became leader", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "ctl-0_5f1c"}, ReportingController: "ctl-0_5f1c",
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}
	if _, err := c.CoreV1().Events(Namespace).Create(ctx, le, metav1.CreateOptions{}); err != nil {
		t.Errorf("leader election's event: refused: %v", err)
	}
	le.Name, le.Reason = uniqueName("nodemend-controller"), "Killing"
	if _, err := c.CoreV1().Events(Namespace).Create(ctx, le, metav1.CreateOptions{}); err == nil || !apierrors.IsForbidden(err) {
		t.Errorf("another core event on the Lease: %v, want refused", err)
	}
}

func errOf[T any](_ T, err error) error { return err }

func waitFor(t *testing.T, what string, cond func(context.Context) bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return cond(ctx), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitForEventPolicy waits until the API server enforces the agent's event
// policy: until a's event about another node is refused.
func waitForEventPolicy(t *testing.T, a agentIdentity) {
	t.Helper()
	waitFor(t, "the agent events policy", func(ctx context.Context) bool {
		e := agentCoreEvent(a.node)
		e.InvolvedObject.Name = "elsewhere"
		_, err := a.core.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, e, metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), "may only record events about its own Node")
	})
}

// grantEventsV1 lets the ServiceAccount sa create and patch
// events.k8s.io Events in default until the test ends.
func grantEventsV1(t *testing.T, sa string) {
	t.Helper()
	ctx := t.Context()
	name := "test-eventsv1-" + sa
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}}}}
	Must[*rbacv1.Role](t)(admin.RbacV1().Roles(role.Namespace).Create(ctx, role, metav1.CreateOptions{}))
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: Namespace, Name: sa}}}
	Must[*rbacv1.RoleBinding](t)(admin.RbacV1().RoleBindings(rb.Namespace).Create(ctx, rb, metav1.CreateOptions{}))
	t.Cleanup(func() {
		_ = admin.RbacV1().RoleBindings(rb.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = admin.RbacV1().Roles(role.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}
