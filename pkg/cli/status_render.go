package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"nodemend.dev/nodemend/pkg/cli/fleet"
	"nodemend.dev/nodemend/pkg/cli/termsafe"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/gate"
)

// statusView renders a fleet report in one output format.
type statusView struct {
	output        string
	palette       Palette
	selector      labels.Selector
	unhealthyOnly bool
	// nodeLabels finds a node's labels for the selector; nil selects all.
	nodeLabels func(name string) labels.Set
}

// conditionLetters are the compact column headers, in health.ConditionTypes order.
var conditionLetters = []string{"K", "R", "N", "S", "A"}

// filter keeps the rows the user asked for, and the pools and zones they
// are in.
func (v statusView) filter(r fleet.Report) fleet.Report {
	if (v.selector == nil || v.selector.Empty() || v.nodeLabels == nil) && !v.unhealthyOnly {
		return r
	}
	out := r
	out.Nodes = out.Nodes[:0:0]
	pools, zones := map[string]bool{}, map[string]bool{}
	for _, n := range r.Nodes {
		if v.unhealthyOnly && n.State == fleet.Healthy {
			continue
		}
		if v.selector != nil && !v.selector.Empty() && v.nodeLabels != nil && !v.selector.Matches(v.nodeLabels(n.Name)) {
			continue
		}
		out.Nodes = append(out.Nodes, n)
		pools[n.Pool], zones[n.Zone] = true, true
	}
	out.Pools, out.Zones = nil, nil
	for _, p := range r.Pools {
		if pools[p.Name] {
			out.Pools = append(out.Pools, p)
		}
	}
	for _, z := range r.Zones {
		if zones[z.Name] {
			out.Zones = append(out.Zones, z)
		}
	}
	return out
}

func (v statusView) render(w io.Writer, r fleet.Report) error {
	r = v.filter(r)
	if v.output == OutputJSON || v.output == OutputYAML {
		return printStructured(w, v.output, r)
	}
	p := v.palette
	if r.Paused {
		fmt.Fprintln(w, p.Paint(Yellow, "Repairs are PAUSED cluster-wide: "+termsafe.String(r.PauseReason)))
	}
	wide := v.output == OutputWide
	header := []string{"NODE", "POOL", "ZONE", "READY"}
	header = append(header, conditionLetters...)
	header = append(header, "REASON", "REPAIR")
	if wide {
		header = append(header, "POLICY", "INSTANCE-TYPE", "UNHEALTHY-FOR", "DETAIL")
	}
	t := NewTable(header...)
	groups := indexGroups(r)
	for i := range r.Nodes {
		n := &r.Nodes[i]
		row := []Cell{{Text: n.Name}, {Text: n.Pool}, {Text: dash(n.Zone)}, readyCell(n.Ready)}
		for _, ct := range health.ConditionTypes() {
			row = append(row, conditionCell(n.Conditions[string(ct)]))
		}
		reason := Cell{Text: dash(n.Reason)}
		if n.Reason != "" {
			reason.Style = Red
		}
		row = append(row, reason, repairCell(n, groups))
		if wide {
			since := "-"
			if !n.UnhealthySince.IsZero() {
				since = fleet.Short(r.Time.Sub(n.UnhealthySince))
			}
			row = append(row, Cell{Text: n.Policy}, Cell{Text: dash(n.InstanceType)}, Cell{Text: since}, Cell{Text: n.Detail, Style: Dim})
		}
		t.Row(row...)
	}
	if t.Len() == 0 {
		fmt.Fprintln(w, "No nodes to show.")
	} else if err := t.Write(w, p); err != nil {
		return err
	}
	fmt.Fprintln(w, p.Paint(Dim, "K KernelReady  R ContainerRuntimeReady  N NetworkingReady  S StorageReady  A AcceleratedHardwareReady   ✓ True  ✗ False  ? Unknown  · not reported"))
	fmt.Fprintln(w)
	writeGroups(w, p, "POOL", r.Pools)
	if (wide && len(r.Zones) > 0) || anyBlocked(r.Zones) {
		fmt.Fprintln(w)
		writeGroups(w, p, "ZONE", r.Zones)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, termsafe.String(summaryLine(r)))
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func readyCell(s string) Cell {
	switch s {
	case "True":
		return Cell{Text: "Ready", Style: Green}
	case "False":
		return Cell{Text: "NotReady", Style: Red}
	case "Unknown":
		return Cell{Text: "Unknown", Style: Yellow}
	}
	return Cell{Text: "-", Style: Dim}
}

func conditionCell(s string) Cell {
	switch s {
	case "True":
		return Cell{Text: "✓", Style: Green}
	case "False":
		return Cell{Text: "✗", Style: Red}
	case "Unknown":
		return Cell{Text: "?", Style: Yellow}
	}
	return Cell{Text: "·", Style: Dim}
}

type groupIndex struct{ pools, zones map[string]fleet.Group }

func indexGroups(r fleet.Report) groupIndex {
	gi := groupIndex{pools: map[string]fleet.Group{}, zones: map[string]fleet.Group{}}
	for _, g := range r.Pools {
		gi.pools[g.Name] = g
	}
	for _, g := range r.Zones {
		gi.zones[g.Name] = g
	}
	return gi
}

// repairCell is the compact repair state; -o wide adds the full detail.
func repairCell(n *fleet.Node, groups groupIndex) Cell {
	halted := ""
	if n.Gate == gate.Veto || n.Gate == gate.Pause {
		halted = ", halted (" + strings.ToLower(string(n.Gate)) + ")"
	}
	switch n.State {
	case fleet.Healthy:
		return Cell{Text: "healthy", Style: Green}
	case fleet.Tolerating:
		left, _, _ := strings.Cut(n.Detail, " of ")
		return Cell{Text: "tolerating, " + left, Style: Yellow}
	case fleet.Due:
		return Cell{Text: "due: repair starts at the next reconcile", Style: Magenta}
	case fleet.NotRepaired:
		return Cell{Text: "unhealthy, not repaired (action None)", Style: Yellow}
	case fleet.Blocked:
		switch n.Gate {
		case gate.Pool:
			g := groups.pools[n.Pool]
			return Cell{Text: fmt.Sprintf("blocked by pool gate: %d/%d unhealthy, %s allowed", g.Unhealthy, g.Size, allowed(g)), Style: Red}
		case gate.Zone:
			g := groups.zones[n.Zone]
			return Cell{Text: fmt.Sprintf("blocked by zone gate: %d/%d unhealthy, %s allowed", g.Unhealthy, g.Size, allowed(g)), Style: Red}
		case gate.Veto:
			return Cell{Text: "blocked: vetoed (nodemend.dev/do-not-repair)", Style: Red}
		case gate.Pause:
			return Cell{Text: "blocked: repairs paused", Style: Red}
		}
		return Cell{Text: "blocked", Style: Red}
	case fleet.Draining:
		d, _, _ := strings.Cut(n.Detail, "; halted")
		return Cell{Text: "draining " + d + halted, Style: Blue}
	case fleet.Terminating:
		return Cell{Text: "terminating: " + n.Target + " deleted" + halted, Style: Blue}
	case fleet.Remediating:
		d, _, _ := strings.Cut(n.Detail, ", fails at")
		return Cell{Text: "remediating (" + n.Rung + "): " + d + halted, Style: Blue}
	case fleet.Quarantined:
		return Cell{Text: "quarantined: " + n.Detail, Style: Red}
	case fleet.Failed:
		return Cell{Text: "failed: node outlived " + n.Target + halted, Style: Red}
	case fleet.Deleting:
		return Cell{Text: "deleting", Style: Dim}
	case fleet.Invalid:
		return Cell{Text: "invalid repair annotations (left alone)", Style: Red}
	}
	return Cell{Text: string(n.State)}
}

func allowed(g fleet.Group) string {
	if g.Allowed < 0 {
		return "none (invalid maxUnhealthy " + g.MaxUnhealthy + ")"
	}
	return strconv.Itoa(g.Allowed)
}

func writeGroups(w io.Writer, p Palette, kind string, groups []fleet.Group) {
	if len(groups) == 0 {
		return
	}
	t := NewTable(kind, "NODES", "UNHEALTHY", "ALLOWED", "MAX-UNHEALTHY", "GATE")
	for _, g := range groups {
		st := Cell{Text: "open", Style: Green}
		switch {
		case g.Blocked:
			st = Cell{Text: "BLOCKED: nothing here is repaired", Style: Red}
		case g.Unhealthy > 0 && g.Unhealthy == g.Allowed:
			st = Cell{Text: "at limit", Style: Yellow}
		}
		limit := g.MaxUnhealthy
		if g.MixedPolicies {
			limit += " (mixed policies)"
		}
		t.Row(Cell{Text: g.Name}, Cell{Text: strconv.Itoa(g.Size)}, Cell{Text: strconv.Itoa(g.Unhealthy)}, Cell{Text: allowed(g)}, Cell{Text: limit}, st)
	}
	_ = t.Write(w, p)
}

func anyBlocked(gs []fleet.Group) bool {
	for _, g := range gs {
		if g.Blocked {
			return true
		}
	}
	return false
}

func summaryLine(r fleet.Report) string {
	counts := map[fleet.State]int{}
	for _, n := range r.Nodes {
		counts[n.State]++
	}
	parts := []string{fmt.Sprintf("%d nodes", len(r.Nodes))}
	for _, st := range []fleet.State{fleet.Healthy, fleet.Tolerating, fleet.Due, fleet.Blocked, fleet.NotRepaired, fleet.Draining, fleet.Terminating, fleet.Remediating, fleet.Quarantined, fleet.Failed, fleet.Deleting, fleet.Invalid} {
		if counts[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[st], st))
		}
	}
	return strings.Join(parts, ", ")
}
