// Package rungs lists every remediation rung in one table: its API name,
// who carries it out, how it is verified, the order it becomes for a node's
// agent, and its defaults. The policy's validation, the ladder, the
// controller, the agent and docs/repair.md read this table; none of them
// lists rungs itself. Adding a rung is one line here, its name in
// api/v1alpha1, and the function of whoever carries it out
// (docs/architecture.md, Adding a rung).
//
// It is part of the contract layer because both halves read it: the
// controller orders an agent rung and judges it, the node's agent carries
// it out, and both must agree on what the order is and what proves it done.
package rungs

import (
	"fmt"
	"strings"
	"time"

	"nodemend.dev/nodemend/api/v1alpha1"
)

// By is who carries a rung out.
type By string

const (
	// Agent: the node's own agent, on a NodeRemediation order confined to
	// its node (docs/security.md); a node whose agent is silent skips
	// these rungs.
	Agent By = "agent"
	// Controller: nodemend-controller itself, on the Node object.
	Controller By = "controller"
	// Engine: the node's engine (its backend, pkg/repair/backend) replaces
	// the node once the controller deletes the backend's target.
	Engine By = "engine"
)

// who says By in docs.
func (b By) who() string {
	switch b {
	case Agent:
		return "the node's agent"
	case Controller:
		return "the controller"
	case Engine:
		return "the node's engine"
	}
	return string(b)
}

// Proof is how an attempt of a rung is verified before the node returns
// to service (its triggering condition healthy and its kubelet Ready come
// on top of it).
type Proof string

const (
	// BootID: the Node's status.nodeInfo.bootID, which the kubelet writes,
	// changes. The agent's report only ends an attempt early (refused,
	// failed); it never proves one.
	BootID Proof = "BootID"
	// AgentReport: the agent's order status Succeeded.
	AgentReport Proof = "AgentReport"
	// Ends: nothing to verify; the rung ends the ladder (the node is
	// replaced, or held for a person).
	Ends Proof = "Ends"
)

// Rung is one rung of the ladder.
type Rung struct {
	// Action is the rung's name in a NodeRepairPolicy's ladder and in the
	// repair record.
	Action v1alpha1.LadderAction
	// By is who carries it out.
	By By
	// Order is the NodeRemediation action an agent rung becomes; empty
	// for the rungs no agent carries out.
	Order v1alpha1.HostAction
	// Short names the rung in its orders' names ("<node>-<short>-<hash>")
	// and in its messages ("the agent reports the <short> Failed").
	Short string
	// Proof is how an attempt is verified.
	Proof Proof
	// Done says, in an event, what a verified attempt did ("accelerators
	// reset and healthy").
	Done string
	// VerifiedBy says, in the order's event, what proves the attempt.
	VerifiedBy string
	// Timeout is an attempt's default bound, from the order to verified
	// and healthy; 0 for a rung that ends the ladder.
	Timeout time.Duration
	// OncePerBoot: the agent carries out at most one such order per boot
	// (it records each in its ledger first), so that a stale or repeated
	// order cannot make a node reboot again and again.
	OncePerBoot bool
	// Does and Proved say, for docs/repair.md, what the rung does and
	// what verifies it.
	Does, Proved string
}

// Terminal reports whether the rung ends a ladder: after Replace the node
// is gone, after Quarantine a person decides. Such a rung is done once.
func (r Rung) Terminal() bool { return r.Proof == Ends }

// Table is every rung, in the order docs/repair.md lists them. It is a
// function so that no caller can change the table another reads.
func Table() []Rung {
	return []Rung{
		{Action: v1alpha1.LadderResetAccelerator, By: Agent, Order: v1alpha1.HostResetAccelerator, Short: "reset",
			Proof: AgentReport, Done: "accelerators reset", VerifiedBy: "the agent's report and the condition healthy",
			Timeout: 5 * time.Minute,
			Does:    "the node's agent resets the faulty GPUs with the driver's tool, when no process holds them",
			Proved:  "the agent's report (the GPUs answer healthy) and the triggering condition healthy"},
		{Action: v1alpha1.LadderReboot, By: Agent, Order: v1alpha1.HostReboot, Short: "reboot",
			Proof: BootID, Done: "rebooted", VerifiedBy: "a new boot ID and the condition healthy",
			Timeout: 15 * time.Minute, OncePerBoot: true,
			Does:   "the node's agent reboots its host through the mechanism its operator configured",
			Proved: "the Node's `status.nodeInfo.bootID` (written by the kubelet) changing, then the triggering condition healthy"},
		{Action: v1alpha1.LadderReplace, By: Engine, Short: "replace", Proof: Ends,
			Does:   "the node's engine replaces it ([the workflow](#the-workflow))",
			Proved: "the node gone"},
		{Action: v1alpha1.LadderQuarantine, By: Controller, Short: "quarantine", Proof: Ends,
			Does:   "cordon + taint, an event and a metric, for a person",
			Proved: "a person releases it, or it stays healthy for `quarantine.healthyFor`"},
	}
}

// Lookup is the rung called action.
func Lookup(action v1alpha1.LadderAction) (Rung, bool) {
	for _, r := range Table() {
		if r.Action == action {
			return r, true
		}
	}
	return Rung{}, false
}

// ForOrder is the agent rung whose orders carry action.
func ForOrder(action v1alpha1.HostAction) (Rung, bool) {
	for _, r := range Table() {
		if r.By == Agent && r.Order == action {
			return r, true
		}
	}
	return Rung{}, false
}

// Names lists the rungs' API names, in the table's order.
func Names() []string {
	t := Table()
	out := make([]string, len(t))
	for i, r := range t {
		out[i] = string(r.Action)
	}
	return out
}

// DocTable is the table as docs/repair.md shows it (a test compares them).
func DocTable() string {
	var b strings.Builder
	b.WriteString("| rung | carried out by | what happens | verified by | default timeout |\n|---|---|---|---|---|\n")
	for _, r := range Table() {
		timeout := "—"
		if r.Timeout > 0 {
			timeout = strings.TrimSuffix(r.Timeout.String(), "0s")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", r.Action, r.By.who(), r.Does, r.Proved, timeout)
	}
	return b.String()
}
