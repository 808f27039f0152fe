package explain

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/cli/eventlog"
	"nodemend.dev/nodemend/pkg/cli/fleet"
	"nodemend.dev/nodemend/pkg/repair/history"
)

// NodePoolInput is what explain reads for a Karpenter NodePool.
type NodePoolInput struct {
	Pool NodePool
	// Events regard the NodePool.
	Events     []eventlog.Event
	NodeClaims []NodeClaim
	// Gate is the pool's count in nodemend's safety gate; Nodes are its
	// nodes' status rows.
	Gate  fleet.Group
	Nodes []fleet.Node
}

// NodePoolReport explains a NodePool that does not launch, is blocked from
// disrupting, or whose repairs are held by the gate.
func NodePoolReport(in NodePoolInput) Report {
	p := in.Pool
	r := Report{Object: "nodepool/" + p.Name, Summary: fmt.Sprintf("%d node(s), %d NodeClaim(s); nodemend gate: %d unhealthy of %d, %d allowed", in.Gate.Size, len(in.NodeClaims), in.Gate.Unhealthy, in.Gate.Size, in.Gate.Allowed)}
	var fs []Finding
	for _, c := range p.Conditions {
		if c.Status == "False" {
			fs = append(fs, Finding{Cause: fmt.Sprintf("NodePool condition %s=False (%s)", c.Type, c.Reason), Evidence: []string{c.Message},
				Fix: "Karpenter does not launch from a NodePool that is not Ready: fix what the message names (usually its NodeClass)", Source: eventlog.Karpenter, Blocking: true})
		}
	}
	var names []string
	for n := range p.Limits {
		names = append(names, string(n))
	}
	sort.Strings(names)
	for _, n := range names {
		limit, used := p.Limits[corev1.ResourceName(n)], p.Usage[corev1.ResourceName(n)]
		if used.Cmp(limit) >= 0 {
			fs = append(fs, Finding{Cause: fmt.Sprintf("the NodePool reached its %s limit (%s of %s)", n, used.String(), limit.String()),
				Fix: "raise spec.limits." + n + ", or free capacity: Karpenter launches nothing more from this NodePool", Source: eventlog.Karpenter, Blocking: true})
		}
	}
	for _, b := range p.BudgetNodes {
		if b == "0" || b == "0%" {
			fs = append(fs, Finding{Cause: "a disruption budget allows 0 nodes: Karpenter disrupts nothing while it is active", Evidence: []string{"spec.disruption.budgets[].nodes: " + b},
				Fix: "check the budget's schedule and reasons; widen it when disruption is wanted", Source: eventlog.Karpenter})
			break
		}
	}
	if e, ok := eventlog.Latest(in.Events, eventlog.Karpenter, "DisruptionBlocked"); ok {
		fs = append(fs, Finding{Cause: "Karpenter: " + e.Message, Evidence: []string{fmt.Sprintf("DisruptionBlocked x%d", e.Count)}, Fix: "widen spec.disruption.budgets if disruption should proceed", Source: eventlog.Karpenter})
	}
	fs = append(fs, launchFindings(in.NodeClaims)...)
	if in.Gate.Blocked {
		f := Finding{Cause: fmt.Sprintf("nodemend's safety gate is closed for this pool: %d of %d nodes unhealthy, %d allowed (maxUnhealthy %s); no node of it is repaired",
			in.Gate.Unhealthy, in.Gate.Size, in.Gate.Allowed, in.Gate.MaxUnhealthy),
			Fix:    "a pool-wide fault (bad AMI, driver, network) is likely: find the common cause (`kubectl mend status -l karpenter.sh/nodepool=" + p.Name + "`); raise maxUnhealthy only if repairing that many at once is safe",
			Source: eventlog.Controller, Blocking: true}
		if e, ok := eventlog.Latest(in.Events, "", history.Blocked); ok {
			f.Evidence = append(f.Evidence, e.Message)
		}
		fs = append(fs, f)
	}
	counts := map[fleet.State]int{}
	for _, n := range in.Nodes {
		counts[n.State]++
	}
	if len(in.Nodes) > counts[fleet.Healthy] {
		var ev []string
		for st, n := range counts {
			ev = append(ev, fmt.Sprintf("%d %s", n, st))
		}
		sort.Strings(ev)
		fs = append(fs, Finding{Cause: fmt.Sprintf("%d of %d node(s) are not healthy", len(in.Nodes)-counts[fleet.Healthy], len(in.Nodes)), Evidence: ev,
			Fix: "see `kubectl mend status -l karpenter.sh/nodepool=" + p.Name + "`", Source: eventlog.Controller})
	}
	if len(fs) == 0 {
		fs = append(fs, Finding{Cause: "nothing wrong found", Fix: "none needed", Source: eventlog.Karpenter})
	}
	r.Findings = sortFindings(fs)
	return r
}
