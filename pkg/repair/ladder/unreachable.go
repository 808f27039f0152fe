package ladder

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/rungs"
)

// DefaultAgentSilence is how long a node's agent may go without a
// heartbeat before the ladder takes it for gone (--agent-silence). The
// agent rewrites every condition it owns at least once per
// exporter.heartbeat (5 minutes by default, docs/agent-config.md), and
// sooner on any change; through an API outage its writes are held and
// land within 5 seconds of the server's return (its outage gate,
// internal/apigate, and the exporter's retries). Two missed heartbeats can
// be an outage or a restart; a third (15 minutes) is an agent — or a host
// — that is not coming back soon, and waiting out a Reboot rung's
// 15-minute timeout on it only delays the repair by that much again.
const DefaultAgentSilence = 15 * time.Minute

// MinAgentSilence is the shortest bound the controller accepts: one of the
// agent's default heartbeats (v1alpha1.DefaultAgentHeartbeat, 5 minutes), plus the clock skew allowed
// between a node and the control plane (v1alpha1.DefaultMaxClockSkew, 30
// seconds: the agent stamps lastHeartbeatTime with its own clock), plus 30
// seconds for the write itself to land (the exporter's retries reach the
// server within 5 seconds of its return; the rest is headroom for a slow
// API server). Below it a live agent with the default heartbeat is taken
// for gone between two of its heartbeats, every time, and its node's
// Reboot is skipped for a Quarantine or a Replace — a bigger act than the
// fault asked for. An agent configured with a longer exporter.heartbeat
// needs a bound of about three of its heartbeats (docs/repair.md).
const MinAgentSilence = v1alpha1.DefaultAgentHeartbeat + v1alpha1.DefaultMaxClockSkew + 30*time.Second

// AgentExecuted reports a rung that the node's own agent carries out
// (pkg/rungs).
func AgentExecuted(a v1alpha1.LadderAction) bool {
	r, ok := rungs.Lookup(a)
	return ok && r.By == rungs.Agent
}

// AgentHeartbeat is the latest heartbeat of the node's agent: the newest
// LastHeartbeatTime of the conditions only the agent writes (zero: it never
// wrote one).
func AgentHeartbeat(n *corev1.Node) time.Time {
	var last time.Time
	for _, c := range n.Status.Conditions {
		if health.IsOwned(string(c.Type)) && c.LastHeartbeatTime.After(last) {
			last = c.LastHeartbeatTime.Time
		}
	}
	return last
}

// AgentSilent reports whether the node's agent has not heartbeated within
// bound at now, and says so. A node whose agent never wrote a condition
// has no agent to carry out a rung either.
func AgentSilent(n *corev1.Node, now time.Time, bound time.Duration) (bool, string) {
	hb := AgentHeartbeat(n)
	if hb.IsZero() {
		return true, "its agent has written no condition"
	}
	if silent := now.Sub(hb); silent > bound {
		return true, fmt.Sprintf("its agent's last heartbeat was %s ago (at %s), more than the %s bound", silent.Round(time.Second), hb.UTC().Format(time.RFC3339), bound)
	}
	return false, ""
}

// SkipUnreachable moves p past the agent-executed rungs of l when the
// node's agent is silent: an order to a node nobody carries out would only
// wait for its timeout. It returns the new position and the rungs skipped
// (none when the agent is alive or p is on a rung the controller does
// itself). A Resolve'd ladder ends in Replace or Quarantine, so there is
// always a rung to land on.
func SkipUnreachable(l []policy.Rung, p Position, agentSilent bool) (Position, []v1alpha1.LadderAction) {
	if !agentSilent {
		return p, nil
	}
	var skipped []v1alpha1.LadderAction
	for p.Rung < len(l)-1 && AgentExecuted(At(l, p).Action) {
		skipped = append(skipped, At(l, p).Action)
		p = Position{Rung: p.Rung + 1, Attempt: 1}
	}
	return p, skipped
}

// SkippedMessage is the note an event gives for rungs skipped.
func SkippedMessage(skipped []v1alpha1.LadderAction, why string, to v1alpha1.LadderAction) string {
	names := make([]string, len(skipped))
	for i, a := range skipped {
		names[i] = string(a)
	}
	return fmt.Sprintf("%s skipped: the node's agent carries them out and %s; going on with %s", strings.Join(names, ", "), why, to)
}
