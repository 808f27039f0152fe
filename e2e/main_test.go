//go:build e2e

// Package e2e asserts nodemend's whole loop on the local simulation
// (sim/): real kube-apiserver, scheduler, controller-manager,
// Karpenter with its kwok provider, two nodemend-controller replicas and a
// nodemend-agent per node. Run with `make e2e` (needs root: the simulated
// nodes' kubelet endpoints live in a network namespace).
//
// Each test has its own NodePool, policy and workload, so they run in
// parallel; the leader-kill test runs alone first because it pauses every
// repair while the Lease changes hands. Each test's nodes are in a zone and
// a pool of their own too (zones, plainPool): the controller's zone gate
// counts every pool's nodes of a zone, and its pool gate every node of no
// pool together, so tests sharing them would change each other's counts.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/sim"
)

var cluster *sim.Sim

// zones are the zones Karpenter offers its instance types in: one per
// scenario, named as its pool (scenario.setUp refuses a pool without one).
var zones = []string{"e2e-gpu", "e2e-storm", "e2e-flap", "e2e-pdb", "e2e-leader", "e2e-bundle", "e2e-identity"}

// plainPool is the label whose value is the pool of a node no engine owns
// (the controller's --pool-label); Karpenter's nodes do not carry it and
// keep their NodePool as their pool.
const plainPool = "e2e.nodemend.dev/pool"

// agentConfig is the simulation's default (which ends in its reasons:
// section) with a short quiet period for the reason the flapping-fault
// test injects.
const agentConfig = sim.DefaultAgentConfig + `  ForkFailedOutOfPIDs: {quietPeriod: 1m}
`

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	s, err := sim.Start(ctx, sim.Options{
		Dir: testenv.RepoRoot() + "/_output/e2e", Karpenter: true, Controllers: 2, Agents: true, LeastPrivilege: true,
		AgentConfig:    agentConfig,
		Zones:          zones,
		ControllerArgs: []string{"--drain-poll-interval", "1s", "--recheck-interval", "5s", "--pool-label", plainPool},
		Logf:           func(f string, a ...any) { fmt.Printf("sim: "+f+"\n", a...) },
	})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the simulation:", err)
		os.Exit(1)
	}
	cluster = s
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "logs of every component: %s\n", s.LogDir())
	}
	s.Stop()
	os.Exit(code)
}
