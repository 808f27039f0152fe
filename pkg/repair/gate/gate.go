// Package gate decides whether an unhealthy node whose toleration has passed
// may be repaired now. It is pure: the caller counts the nodes.
//
// The gates, in the order they are checked:
//
//   - Veto: the node carries the veto annotation.
//   - Pause: the cluster-wide pause switch is on.
//   - Pool: more nodes of the node's pool are unhealthy than the policy's
//     maxUnhealthy allows.
//   - Zone: the same rule within the node's topology zone.
//
// "Unhealthy" counts every node that any rule of its own policy flags, whether
// or not its toleration has passed, and every node under repair. A
// percentage is rounded up, as PodDisruptionBudget percentages are: with
// 20%, a pool of 3 to 5 nodes may have 1 unhealthy node, of 10 nodes 2.
package gate

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// Gate names the check that blocked a repair.
type Gate string

const (
	None  Gate = ""
	Veto  Gate = "Veto"
	Pause Gate = "Pause"
	Pool  Gate = "Pool"
	Zone  Gate = "Zone"
	// ControlPlane: a control-plane node that its policy does not opt in,
	// or may not be repaired now (pkg/repair/controlplane; the controller
	// checks it after the pause, before the pool and zone).
	ControlPlane Gate = "ControlPlane"
)

// Group is a counted set of nodes: a pool or a zone.
type Group struct {
	// Name is the pool key or the zone name.
	Name string
	// Size is how many nodes are in it, healthy or not.
	Size int
	// Unhealthy is how many of them are unhealthy or under repair,
	// including the node being decided on.
	Unhealthy int
}

// Input is everything the decision depends on.
type Input struct {
	// Veto is the value of the node's veto annotation; Vetoed says whether it
	// is present.
	Vetoed bool
	Veto   string
	// Paused is the pause switch, with the operator's reason.
	Paused      bool
	PauseReason string
	// MaxUnhealthy is the node's policy's limit, a count or a percentage.
	MaxUnhealthy intstr.IntOrString
	Pool         Group
	// Zone is nil when the node has no zone label.
	Zone *Group
}

// Decision is the outcome.
type Decision struct {
	Allowed bool
	// Gate is the check that blocked, None when allowed.
	Gate Gate
	// Message explains the decision for events and logs.
	Message string
}

// MaxAllowed is how many of size nodes may be unhealthy: a count as given, a
// percentage of size rounded up.
func MaxAllowed(limit intstr.IntOrString, size int) (int, error) {
	n, err := intstr.GetScaledValueFromIntOrPercent(&limit, size, true)
	if err != nil {
		return 0, err
	}
	return max(n, 0), nil
}

// Decide runs the gates in order; the first that blocks decides.
func Decide(in Input) Decision {
	if in.Vetoed {
		msg := "repair vetoed by the node's annotation"
		if in.Veto != "" && in.Veto != "true" {
			msg += ": " + in.Veto
		}
		return Decision{Gate: Veto, Message: msg}
	}
	if in.Paused {
		msg := "repairs are paused cluster-wide"
		if in.PauseReason != "" {
			msg += ": " + in.PauseReason
		}
		return Decision{Gate: Pause, Message: msg}
	}
	if d, ok := checkGroup(Pool, "pool", in.Pool, in.MaxUnhealthy); !ok {
		return d
	}
	if in.Zone != nil {
		if d, ok := checkGroup(Zone, "zone", *in.Zone, in.MaxUnhealthy); !ok {
			return d
		}
	}
	return Decision{Allowed: true, Message: fmt.Sprintf("pool %s: %d of %d nodes unhealthy", in.Pool.Name, in.Pool.Unhealthy, in.Pool.Size)}
}

func checkGroup(g Gate, what string, grp Group, limit intstr.IntOrString) (Decision, bool) {
	allowed, err := MaxAllowed(limit, grp.Size)
	if err != nil {
		// An invalid limit blocks: a safety gate fails closed.
		return Decision{Gate: g, Message: fmt.Sprintf("%s %s: invalid maxUnhealthy %q: %v", what, grp.Name, limit.String(), err)}, false
	}
	if grp.Unhealthy <= allowed {
		return Decision{}, true
	}
	return Decision{Gate: g, Message: fmt.Sprintf("%s %s: %d of %d nodes unhealthy, more than the %d that maxUnhealthy %s allows; nothing there is repaired until that changes",
		what, grp.Name, grp.Unhealthy, grp.Size, allowed, limit.String())}, false
}

// Add counts one node into g.
func (g *Group) Add(unhealthy bool) {
	g.Size++
	if unhealthy {
		g.Unhealthy++
	}
}
