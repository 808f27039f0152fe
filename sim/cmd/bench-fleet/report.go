package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"nodemend.dev/nodemend/sim"
)

// watched is a controller whose resource use and API requests a run
// measures.
type watched struct {
	name        string
	pid         int
	metricsPort int // client-go's rest_client_requests_total on 127.0.0.1
}

// watchedProcesses are the controllers at work in s: nodemend-controller
// when it runs, Karpenter when it runs.
func watchedProcesses(s *sim.Sim, nodemend bool, metricsPort int) []watched {
	var out []watched
	if nodemend {
		out = append(out, watched{"nodemend-controller", s.Controller(0).Pid(), metricsPort})
	}
	if k, port := s.Karpenter(); k != nil {
		out = append(out, watched{"Karpenter", k.Pid(), port})
	}
	return out
}

// usage is a controller's resource use and API requests at one moment.
type usage struct {
	name     string
	cpu      time.Duration
	rss, hwm int64 // bytes
	requests map[string]float64
}

func sampleAll(procs []watched) ([]usage, error) {
	out := make([]usage, len(procs))
	for i, p := range procs {
		u, err := sample(p.pid, p.metricsPort)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		u.name = p.name
		out[i] = u
	}
	return out, nil
}

func sample(pid, metricsPort int) (usage, error) {
	var u usage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	u.cpu = time.Duration(utime+stime) * (time.Second / 100) // USER_HZ
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "VmRSS:" || f[0] == "VmHWM:") {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			if f[0] == "VmRSS:" {
				u.rss = kb * 1024
			} else {
				u.hwm = kb * 1024
			}
		}
	}
	u.requests, err = requestCounts(metricsPort)
	return u, err
}

// requestCounts sums client-go's request counter by method: named
// rest_client_requests_total by controller-runtime (nodemend) and
// client_go_request_total by Karpenter.
func requestCounts(port int) (map[string]float64, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "rest_client_requests_total{") && !strings.HasPrefix(line, "client_go_request_total{") {
			continue
		}
		method := between(line, `method="`, `"`)
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			out[method] += v
		}
	}
	return out, sc.Err()
}

func between(s, start, end string) string {
	i := strings.Index(s, start)
	if i < 0 {
		return ""
	}
	s = s[i+len(start):]
	if j := strings.Index(s, end); j >= 0 {
		return s[:j]
	}
	return s
}

// outcome is one engine's run.
type outcome struct {
	engine        string
	nodes         int
	condition     string
	toleration    time.Duration
	res           results
	ceil          ceiling
	before, after []usage
	created       time.Duration
	// ceilingCPU brackets the ceiling's measurement; trace samples the
	// machine from a second before the tolerations end.
	ceilingCPU [2]machineCPU
	trace      []machineCPU
	due        time.Time // when the tolerations ended
}

// decisionMeans says what an engine's decision is.
func decisionMeans(engine string) string {
	if engine == engineKarpenter {
		return "NodeClaim marked for deletion"
	}
	return "repair taint"
}

// requests is the API requests of u during the run, by verb, and in all.
func requests(before, after usage) (total float64, verbs string) {
	var list []string
	for m, v := range after.requests {
		d := v - before.requests[m]
		total += d
		if d > 0 {
			list = append(list, fmt.Sprintf("%s %.0f", m, d))
		}
	}
	slices.Sort(list)
	return total, strings.Join(list, ", ")
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// quantile formats the p-quantile of a result, or says it was not reached
// by the storm's deadline.
func quantile(sorted []time.Duration, total int, p float64) string {
	d, ok := pct(sorted, total, p)
	if !ok {
		return fmt.Sprintf("not reached (%d of %d)", len(sorted), total)
	}
	return ms(d)
}

func report(c config, o outcome) error {
	r := o.res
	var b strings.Builder
	fmt.Fprintf(&b, "# nodemend fleet benchmark: %s\n\n", o.engine)
	args := "default flags"
	if c.extra != "" {
		args = c.extra
	}
	owner := "nodes no engine owns, plain node backend"
	if o.engine != engineNodemend {
		owner = "Karpenter's nodes (kwok provider), kubelets stopped"
	}
	fmt.Fprintf(&b, "%d kwok nodes in %d pools, %.0f%% of every pool %s=False at the same instant (%d nodes), toleration %v, gate 20%%, %s; repaired by %s (nodemend flags: %s); %s.\n\n",
		o.nodes, c.pools, 100*c.unhealthy, o.condition, r.due, o.toleration, owner, o.engine, args, time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&b, "| figure | value |\n|---|---|\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	bound := o.ceil.decisionBound(r.due)
	verdict := "within"
	if d, ok := pct(r.latencies, r.due, 0.99); !ok || d > bound {
		verdict = "OVER"
	}
	decision := decisionMeans(o.engine)
	row("write ceiling (node PATCHes/s, plain client, heartbeats running)", fmt.Sprintf("%.0f/s (%d in %v, %d workers)", o.ceil.perSecond(), o.ceil.patches, o.ceil.took.Round(time.Millisecond), o.ceil.workers))
	row("decision p99 goal: 1.2 × due ÷ ceiling + 100 ms", fmt.Sprintf("%s (%s)", ms(bound), verdict))
	row("decision latency p50 (toleration end → "+decision+" seen)", quantile(r.latencies, r.due, 0.50))
	row("decision latency p90", quantile(r.latencies, r.due, 0.90))
	row("decision latency p99", quantile(r.latencies, r.due, 0.99))
	row("decision latency max", quantile(r.latencies, r.due, 1))
	row("completion latency p50 / p99 (toleration end → node deleted)", quantile(r.completed, r.due, 0.50)+" / "+quantile(r.completed, r.due, 0.99))
	if len(r.completed) == r.due {
		row("all unhealthy nodes repaired (deleted) after", ms(r.allDone))
	} else {
		row("unhealthy nodes repaired (deleted) within "+c.stormFor.String(), fmt.Sprintf("%d of %d", len(r.completed), r.due))
	}
	var total float64
	for i := range o.after {
		before, after := o.before[i], o.after[i]
		row(after.name+" CPU during the storm", fmt.Sprintf("%.2f s", (after.cpu-before.cpu).Seconds()))
		row(after.name+" RSS before / after / peak", fmt.Sprintf("%d / %d / %d MiB", before.rss>>20, after.rss>>20, after.hwm>>20))
		n, verbs := requests(before, after)
		total += n
		row(after.name+" API requests during the storm", fmt.Sprintf("%.0f (%s)", n, verbs))
	}
	row("API requests per repaired node (all controllers)", fmt.Sprintf("%.1f", total/float64(max(1, len(r.completed)))))
	row("fleet creation", fmt.Sprintf("%s (%.0f nodes/s)", ms(o.created), float64(o.nodes)/o.created.Seconds()))
	if r.undecided > 0 {
		row("nodes deleted without a decision seen", r.undecided)
	}
	if r.remarked > 0 {
		row("sick nodes kwok turned Ready again, marked Ready=False again", r.remarked)
	}
	writeShares(&b, o)
	fmt.Print("\n" + b.String() + "\n")
	if err := os.WriteFile(filepath.Join(c.work, "results.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	plots := map[string]string{
		"decision.svg":   histogramSVG(fmt.Sprintf("Decision latency, %d nodes due at once (toleration end → %s)", r.due, decision), r.latencies, bound),
		"completion.svg": histogramSVG(fmt.Sprintf("Completion latency, %d nodes (toleration end → node deleted)", r.due), r.completed, 0),
	}
	for name, svg := range plots {
		if err := os.WriteFile(filepath.Join(c.work, name), []byte(svg), 0o644); err != nil {
			return err
		}
	}
	say("results: %s, plots: decision.svg, completion.svg", filepath.Join(c.work, "results.md"))
	return nil
}

// writeSideBySide is one table of several engines' runs of the same storm.
func writeSideBySide(c config, outs []outcome) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# The same storm, repaired by each engine\n\n")
	fmt.Fprintf(&b, "%d kwok nodes in %d pools, %.0f%% of every pool unhealthy at one instant; %s.\n\n", outs[0].nodes, c.pools, 100*c.unhealthy, time.Now().UTC().Format("2006-01-02"))
	b.WriteString("| figure |")
	for _, o := range outs {
		fmt.Fprintf(&b, " %s |", o.engine)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(outs)) + "\n")
	row := func(k string, f func(o outcome) string) {
		fmt.Fprintf(&b, "| %s |", k)
		for _, o := range outs {
			fmt.Fprintf(&b, " %s |", f(o))
		}
		b.WriteString("\n")
	}
	row("unhealthy condition, toleration", func(o outcome) string { return fmt.Sprintf("%s=False, %v", o.condition, o.toleration) })
	row("nodes due at once", func(o outcome) string { return strconv.Itoa(o.res.due) })
	row("write ceiling", func(o outcome) string { return fmt.Sprintf("%.0f PATCH/s", o.ceil.perSecond()) })
	row("decision is", func(o outcome) string { return decisionMeans(o.engine) })
	row("decision p50 / p99", func(o outcome) string {
		return quantile(o.res.latencies, o.res.due, 0.5) + " / " + quantile(o.res.latencies, o.res.due, 0.99)
	})
	row("completion p50 / p99 (→ node deleted)", func(o outcome) string {
		return quantile(o.res.completed, o.res.due, 0.5) + " / " + quantile(o.res.completed, o.res.due, 0.99)
	})
	row("repaired", func(o outcome) string {
		if len(o.res.completed) == o.res.due {
			return "all after " + ms(o.res.allDone)
		}
		return fmt.Sprintf("%d of %d within %v", len(o.res.completed), o.res.due, c.stormFor)
	})
	for _, name := range []string{"nodemend-controller", "Karpenter"} {
		find := func(o outcome) int {
			return slices.IndexFunc(o.after, func(u usage) bool { return u.name == name })
		}
		row(name+" API requests", func(o outcome) string {
			if i := find(o); i >= 0 {
				n, _ := requests(o.before[i], o.after[i])
				return fmt.Sprintf("%.0f", n)
			}
			return "not running"
		})
		row(name+" CPU / peak RSS", func(o outcome) string {
			if i := find(o); i >= 0 {
				return fmt.Sprintf("%.2f s / %d MiB", (o.after[i].cpu - o.before[i].cpu).Seconds(), o.after[i].hwm>>20)
			}
			return "–"
		})
	}
	row("API requests per repaired node (both)", func(o outcome) string {
		var total float64
		for i := range o.after {
			n, _ := requests(o.before[i], o.after[i])
			total += n
		}
		return fmt.Sprintf("%.1f", total/float64(max(1, len(o.res.completed))))
	})
	b.WriteString("\nKarpenter deletes the NodeClaim at once, without draining first (its termination controller drains afterwards); nodemend taints, drains (honouring PodDisruptionBudgets) and then hands the node to Karpenter. The fleet here runs no pods, so drains are empty.\n")
	fmt.Print("\n" + b.String())
	path := filepath.Join(c.work, "side-by-side.md")
	say("side by side: %s", path)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// writeShares is the table of who used the machine's CPUs while the
// ceiling was measured and while the storm was decided (toleration end →
// last decision seen): what the plain client had and what the decisions
// had.
func writeShares(b *strings.Builder, o outcome) {
	if len(o.trace) < 2 || len(o.res.latencies) == 0 {
		return
	}
	last := o.res.latencies[len(o.res.latencies)-1]
	fmt.Fprintf(b, "\nCPU in cores (CPU seconds per second) of the processes sharing the machine:\n\n| window | %s | machine |\n|---|%s---|\n",
		strings.Join(sharers, " | "), strings.Repeat("---|", len(sharers)))
	byName, busy := cores(o.ceilingCPU[0], o.ceilingCPU[1])
	fmt.Fprintf(b, "| write ceiling (%s) | %s |\n", ms(o.ceilingCPU[1].at.Sub(o.ceilingCPU[0].at)), sharesRow(byName, busy))
	byName, busy = cores(nearest(o.trace, o.due), nearest(o.trace, o.due.Add(last)))
	fmt.Fprintf(b, "| decisions (toleration end → last decision, %s) | %s |\n", ms(last), sharesRow(byName, busy))
}
