package ladder

import (
	"fmt"
	"time"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/rungs"
)

// Observation is what the controller sees of an attempt in progress.
type Observation struct {
	Now time.Time
	// BootID is the Node's status.nodeInfo.bootID, as its kubelet wrote it.
	BootID string
	// Order is the attempt's NodeRemediation; nil while it is not (or no
	// longer) there.
	Order *v1alpha1.NodeRemediation
	// TriggerHealthy: no rule of the node's policy matches its condition of
	// the triggering type any more.
	TriggerHealthy bool
	// KubeletReady: the node's Ready condition is True.
	KubeletReady bool
}

// Verdict is what an attempt has come to.
type Verdict string

const (
	// Wait: nothing decided yet; look again at the latest at Outcome.Wake.
	Wait Verdict = "Wait"
	// Rebooted: the node has a new boot ID, seen for the first time; the
	// condition is not healthy yet.
	Rebooted Verdict = "Rebooted"
	// Repaired: verified and the triggering condition healthy: the node
	// returns to service.
	Repaired Verdict = "Repaired"
	// Failed: the attempt did not work; the ladder goes on.
	Failed Verdict = "Failed"
)

// Outcome is a Verdict, why, and when to look again.
type Outcome struct {
	Verdict Verdict
	Message string
	Wake    time.Time
}

// Judge decides an attempt of a rung the node's agent carries out, by the
// proof the rung table (pkg/rungs) names for it. A boot-ID rung (Reboot) is
// verified by the Node's boot ID, which the kubelet writes: the agent's own
// report is only used to give up early (it refused, or its reboot failed).
// A report rung (ResetAccelerator) is verified by the agent's report that
// it worked (the GPUs answer healthy). Either way the node returns to
// service only with its triggering condition healthy and its kubelet
// Ready, and only before the attempt's deadline.
func Judge(a Attempt, o Observation) Outcome {
	deadline := a.Deadline()
	late := !o.Now.Before(deadline)
	var order v1alpha1.RemediationPhase
	msg := ""
	if o.Order != nil {
		order, msg = o.Order.Status.Phase, o.Order.Status.Message
	}
	rung, _ := rungs.Lookup(a.Action)
	if rung.By != rungs.Agent {
		return Outcome{Verdict: Failed, Message: fmt.Sprintf("%s is not a rung with an order", a.Action)}
	}
	switch rung.Proof {
	case rungs.BootID:
		rebooted := o.BootID != "" && a.BootID != "" && o.BootID != a.BootID
		switch {
		case rebooted && o.TriggerHealthy && o.KubeletReady:
			return Outcome{Verdict: Repaired, Message: fmt.Sprintf("%s (boot %s → %s) and healthy", rung.Done, a.BootID, o.BootID)}
		case rebooted && late:
			return Outcome{Verdict: Failed, Message: fmt.Sprintf("%s (boot %s → %s), but %s", rung.Done, a.BootID, o.BootID, unhealthyAfter(o, a))}
		case rebooted && a.Verified.IsZero():
			return Outcome{Verdict: Rebooted, Message: fmt.Sprintf("new boot %s (was %s); waiting for the node to be healthy", o.BootID, a.BootID), Wake: deadline}
		case rebooted:
			return Outcome{Verdict: Wait, Wake: deadline}
		case order == v1alpha1.RemediationRefused || order == v1alpha1.RemediationFailed:
			return Outcome{Verdict: Failed, Message: fmt.Sprintf("the agent reports the %s %s: %s", rung.Short, order, msg)}
		case late:
			return Outcome{Verdict: Failed, Message: fmt.Sprintf("no new boot ID within %s (still %s; order %s)", a.Timeout.Duration, a.BootID, orderState(order))}
		}
		return Outcome{Verdict: Wait, Wake: deadline}
	case rungs.AgentReport:
		switch {
		case order == v1alpha1.RemediationSucceeded && o.TriggerHealthy && o.KubeletReady:
			return Outcome{Verdict: Repaired, Message: rung.Done + " and healthy: " + msg}
		case order == v1alpha1.RemediationRefused || order == v1alpha1.RemediationFailed:
			return Outcome{Verdict: Failed, Message: fmt.Sprintf("the agent reports the %s %s: %s", rung.Short, order, msg)}
		case late && order == v1alpha1.RemediationSucceeded:
			return Outcome{Verdict: Failed, Message: rung.Short + ", but " + unhealthyAfter(o, a)}
		case late:
			return Outcome{Verdict: Failed, Message: fmt.Sprintf("no %s reported within %s (order %s)", rung.Short, a.Timeout.Duration, orderState(order))}
		}
		return Outcome{Verdict: Wait, Wake: deadline}
	}
	return Outcome{Verdict: Failed, Message: fmt.Sprintf("%s has no proof the controller can judge (%q)", a.Action, rung.Proof)}
}

func unhealthyAfter(o Observation, a Attempt) string {
	if !o.KubeletReady {
		return "the kubelet is not Ready " + a.Timeout.Duration.String() + " after the order"
	}
	return "the triggering condition is still unhealthy " + a.Timeout.Duration.String() + " after the order"
}

func orderState(p v1alpha1.RemediationPhase) string {
	if p == "" {
		return "not picked up by the agent"
	}
	return string(p)
}
