package controller

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/repair/metrics"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// fleetView computes the fleet gauges from the cache at scrape time.
type fleetView struct {
	r   *Reconciler
	ctx context.Context
}

func (f fleetView) Unhealthy() []metrics.FleetNode {
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	r := f.r
	set, err := r.policies(ctx, false) // scrapes also run on replicas that do not lead
	if err != nil {
		return nil
	}
	lookup, _ := r.machineLookup(ctx)
	var out []metrics.FleetNode
	_ = r.eachNode(ctx, func(n *corev1.Node) {
		rules := set.For(n.Labels).Rules
		p := ""
		var seen []corev1.NodeConditionType
		for _, c := range n.Status.Conditions {
			for _, rule := range rules {
				if slices.Contains(seen, c.Type) || policy.IsPressure(rule.Type) || !rule.Matches(c) {
					continue
				}
				if p == "" {
					p = r.pools.Of(n, lookup).String()
				}
				seen = append(seen, c.Type)
				out = append(out, metrics.FleetNode{Pool: p, Condition: string(c.Type)})
			}
		}
		if len(seen) == 0 && record.InRepair(n) {
			out = append(out, metrics.FleetNode{Pool: r.pools.Of(n, lookup).String(), Condition: "InRepair"})
		}
	})
	return out
}

func (f fleetView) Blocked() map[string]string {
	r := f.r
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	for _, b := range r.blocked {
		out[b.where] = string(b.gate)
	}
	return out
}

func (f fleetView) Paused() bool {
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	p, _, _ := f.r.paused(ctx)
	return p
}

func (f fleetView) Quarantined() map[string]int {
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	r := f.r
	lookup, _ := r.machineLookup(ctx)
	out := map[string]int{}
	_ = r.eachNode(ctx, func(n *corev1.Node) {
		if record.InRepair(n) && record.PhaseOf(n) == record.PhaseQuarantined {
			out[r.pools.Of(n, lookup).String()]++
		}
	})
	return out
}
