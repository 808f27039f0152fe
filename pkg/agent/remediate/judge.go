// Package remediate carries out, on the node, the NodeRemediations that
// nodemend-controller orders for it: a reboot of the host or a reset of its
// GPUs (docs/repair.md, The ladder). It is the only part of the agent that
// changes the host, so every order is judged before anything is done:
//
//   - at most once: an order is accepted (status Accepted, with the boot ID)
//     by a status write that the API server takes only if the order is
//     unchanged since a fresh read; an order found Accepted is never carried
//     out again, whatever happened since;
//   - never late: the order's deadline is its server-side creation time plus
//     spec.activeDeadlineSeconds, judged on the agent's clock with a stated
//     skew bound; an agent whose clock is further off than that refuses;
//   - never for another boot: spec.bootID must be the host's boot;
//   - never without the API: the fresh read and the accepting write are the
//     confirmation, so an order the agent saw before it lost the API is not
//     acted on until the API server confirms it again;
//   - never with the mechanism off: reboots need a mechanism the operator
//     configured, resets the driver's tool;
//   - never on the controller's word alone: the agent's own Node, read fresh,
//     must carry the repair taint, report the order's boot
//     (status.nodeInfo.bootID, the kubelet's) and show the order's trigger
//     (spec.trigger) unhealthy (the kubelet's or this agent's own report): an
//     order for a node that is not under repair, or is healthy, is refused
//     whoever could create it;
//   - at most one reboot per boot, however many orders arrive: the boots in
//     which a reboot was accepted are kept in the agent's state directory on
//     the host (ledger.go), and a second reboot order for the same boot is
//     refused as a duplicate.
//
// judge.go is the pure part.
package remediate

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/rungs"
)

// RepairTaintKey is the taint nodemend-controller puts on a node under
// repair: an order is carried out only on a node that carries it.
const RepairTaintKey = "nodemend.dev/repair"

// DefaultMaxClockSkew is the skew bound between the agent's clock and the
// API server's that the deadline check allows for; the controller sizes
// order deadlines from the same constant.
const DefaultMaxClockSkew = v1alpha1.DefaultMaxClockSkew

// Verdict is what to do with an order.
type Verdict string

const (
	// Ignore: nothing to do (finished, or not this node's).
	Ignore Verdict = "Ignore"
	// Act: accept the order and carry it out.
	Act Verdict = "Act"
	// Finish: write the final phase (Message says why), do nothing to the host.
	Finish Verdict = "Finish"
)

// Judgement is a Verdict with the phase to write for Finish.
type Judgement struct {
	Verdict Verdict
	Phase   v1alpha1.RemediationPhase
	Message string
}

// Facts are what the agent knows when it judges an order.
type Facts struct {
	NodeName string
	// BootID is the host's current boot ID.
	BootID string
	// Now is the agent's clock.
	Now     time.Time
	MaxSkew time.Duration
	// Enabled says whether the agent may carry out the action at all, and
	// Why not.
	Enabled map[v1alpha1.HostAction]bool
	WhyOff  map[v1alpha1.HostAction]string
	// Node is this agent's Node as the API server has it now; nil: not
	// read (nothing is carried out).
	Node *corev1.Node
	// Rebooted are the boots in which this node accepted a reboot, with
	// the order each time (the ledger).
	Rebooted map[string]string
}

// Judge decides what to do with o.
func Judge(o *v1alpha1.NodeRemediation, f Facts) Judgement {
	if o.Spec.NodeName != f.NodeName || o.DeletionTimestamp != nil {
		return Judgement{Verdict: Ignore}
	}
	st := o.Status
	rung, _ := rungs.ForOrder(o.Spec.Action)
	switch {
	case st.Phase.Finished():
		return Judgement{Verdict: Ignore}
	case st.Phase == v1alpha1.RemediationAccepted:
		return judgeAccepted(o, rung, f)
	case st.Phase != v1alpha1.RemediationPending:
		return finish(v1alpha1.RemediationFailed, "unknown phase %q", st.Phase)
	}
	if f.BootID == "" {
		return finish(v1alpha1.RemediationRefused, "the host's boot ID cannot be read")
	}
	if o.Spec.BootID != f.BootID {
		return finish(v1alpha1.RemediationRefused, "ordered for boot %s, but the host runs boot %s: it has rebooted since", o.Spec.BootID, f.BootID)
	}
	if prev, ok := f.Rebooted[f.BootID]; ok && rung.OncePerBoot {
		return finish(v1alpha1.RemediationRefused, "%s a %s was already accepted during boot %s (order %s): at most one per boot", DuplicatePrefix, rung.Short, f.BootID, prev)
	}
	if j, ok := judgeNode(o, f.Node); !ok {
		return j
	}
	created := o.CreationTimestamp.Time
	if f.Now.Before(created.Add(-f.MaxSkew)) {
		return finish(v1alpha1.RemediationRefused, "the order was created at %s, %s after this node's clock (%s): the clocks differ by more than the skew bound %s",
			created.UTC().Format(time.RFC3339), created.Sub(f.Now).Round(time.Second), f.Now.UTC().Format(time.RFC3339), f.MaxSkew)
	}
	if deadline := o.Deadline(); !f.Now.Add(f.MaxSkew).Before(deadline) {
		return finish(v1alpha1.RemediationRefused, "past its deadline %s (node clock %s, skew bound %s)",
			deadline.UTC().Format(time.RFC3339), f.Now.UTC().Format(time.RFC3339), f.MaxSkew)
	}
	if !f.Enabled[o.Spec.Action] {
		why := f.WhyOff[o.Spec.Action]
		if why == "" {
			why = "not supported by this agent"
		}
		return finish(v1alpha1.RemediationRefused, "%s is off on this node: %s", o.Spec.Action, why)
	}
	return Judgement{Verdict: Act}
}

// judgeAccepted handles an order this node accepted earlier: for a rung
// proved by a new boot (a reboot), a later boot means it happened; for
// another, a later boot means the host went down during it. The same boot
// means the agent stopped between accepting and finishing, and the order is
// not carried out a second time.
func judgeAccepted(o *v1alpha1.NodeRemediation, rung rungs.Rung, f Facts) Judgement {
	rebooted := o.Status.BootID != "" && f.BootID != "" && o.Status.BootID != f.BootID
	switch {
	case rung.Proof == rungs.BootID && rebooted:
		return finish(v1alpha1.RemediationSucceeded, "%s: boot %s, now boot %s", rung.Done, o.Status.BootID, f.BootID)
	case rung.Proof == rungs.BootID:
		return finish(v1alpha1.RemediationFailed, "the agent restarted after accepting the %s, and the host did not reboot; not tried again", rung.Short)
	case rebooted:
		return finish(v1alpha1.RemediationFailed, "the host rebooted during the %s (boot %s, now %s)", rung.Short, o.Status.BootID, f.BootID)
	}
	return finish(v1alpha1.RemediationFailed, "the agent restarted during the %s; not tried again", rung.Short)
}

func finish(p v1alpha1.RemediationPhase, format string, args ...any) Judgement {
	return Judgement{Verdict: Finish, Phase: p, Message: fmt.Sprintf(format, args...)}
}

// DuplicatePrefix starts the message of an order refused because its boot
// had its reboot already.
const DuplicatePrefix = "duplicate:"

// judgeNode checks the order against the evidence on the agent's own Node,
// which nodemend-controller cannot write but for its taint: the kubelet's
// boot ID and the node's conditions (kubelet's and this agent's).
func judgeNode(o *v1alpha1.NodeRemediation, n *corev1.Node) (Judgement, bool) {
	if n == nil {
		return finish(v1alpha1.RemediationRefused, "the agent could not read its Node"), false
	}
	tainted := false
	for _, t := range n.Spec.Taints {
		tainted = tainted || t.Key == RepairTaintKey
	}
	if !tainted {
		return finish(v1alpha1.RemediationRefused, "the Node does not carry the repair taint %s: it is not under repair", RepairTaintKey), false
	}
	if b := n.Status.NodeInfo.BootID; b != o.Spec.BootID {
		return finish(v1alpha1.RemediationRefused, "ordered for boot %s, but the Node's status reports boot %q", o.Spec.BootID, b), false
	}
	typ, status, ok := orderTrigger(o)
	if !ok {
		return finish(v1alpha1.RemediationRefused, "the order names no trigger condition (no spec.trigger; spec.reason %q, want Type=Status/Reason)", o.Spec.Reason), false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == typ {
			if c.Status == status {
				return Judgement{}, true
			}
			return finish(v1alpha1.RemediationRefused, "the order's trigger %s=%s is not what the Node reports (%s=%s): nothing to repair", typ, status, typ, c.Status), false
		}
	}
	return finish(v1alpha1.RemediationRefused, "the order's trigger %s=%s is not on the Node: nothing to repair", typ, status), false
}

// orderTrigger is the condition an order was made for: spec.trigger, or,
// for an order of a controller that did not type it yet, spec.reason.
func orderTrigger(o *v1alpha1.NodeRemediation) (corev1.NodeConditionType, corev1.ConditionStatus, bool) {
	if t := o.Spec.Trigger; t != nil {
		switch t.Status {
		case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
			return t.Type, t.Status, t.Type != ""
		}
		return t.Type, t.Status, false
	}
	return Trigger(o.Spec.Reason)
}

// Trigger reads the condition type and status from an order's reason
// ("Type=Status/Reason", the format the controller wrote before
// spec.trigger).
func Trigger(reason string) (corev1.NodeConditionType, corev1.ConditionStatus, bool) {
	typ, rest, ok := strings.Cut(reason, "=")
	status, _, _ := strings.Cut(rest, "/")
	switch corev1.ConditionStatus(status) {
	case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
	default:
		ok = false
	}
	return corev1.NodeConditionType(typ), corev1.ConditionStatus(status), ok && typ != ""
}
