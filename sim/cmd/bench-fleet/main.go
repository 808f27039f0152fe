// Command bench-fleet is `make bench-fleet`: nodemend-controller against a
// fleet of kwok nodes on the local simulation. It creates -nodes nodes in
// -pools pools, turns -unhealthy of each pool's nodes unhealthy at the same
// instant (the worst case: every toleration ends together), and measures
//
//   - first, the write ceiling of this API server: node PATCHes/s from a
//     plain client on the same machine with the fleet's heartbeats running,
//     and from it the goal for the storm's decision p99;
//   - decision latency: from the end of a node's toleration to its repair
//     taint, seen through a watch (p50/p90/p99/max);
//   - completion latency: from the end of the toleration to the node's
//     deletion (the drains take turns: --max-concurrent-drains);
//   - the time until every unhealthy node was repaired (deleted: the
//     benchmark's nodes belong to no engine, so the plain node backend
//     deletes them);
//   - the controller's CPU time, RSS and peak RSS, and its API requests by
//     verb (its own client metrics).
//
// Results go to <work>/results.md and histograms with p50/p99 marked to
// <work>/decision.svg and <work>/completion.svg.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/sim"
)

const (
	poolLabel  = "sim.nodemend.dev/pool"
	benchLabel = "sim.nodemend.dev/bench"
	condition  = "KernelReady"
	reason     = "ForkFailedOutOfPIDs"
	taintKey   = "nodemend.dev/repair"
)

type config struct {
	work       string
	nodes      int
	pools      int
	unhealthy  float64
	toleration time.Duration
	timeout    time.Duration
	extra      string
	// ceilingWorkers and ceilingFor shape the write-ceiling measurement.
	ceilingWorkers int
	ceilingFor     time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.work, "work", "_output/bench-fleet", "state directory (logs, results)")
	flag.IntVar(&c.nodes, "nodes", 5000, "kwok nodes")
	flag.IntVar(&c.pools, "pools", 10, "pools the nodes are spread over (the gate counts per pool)")
	flag.Float64Var(&c.unhealthy, "unhealthy", 0.20, "fraction of every pool turned unhealthy")
	flag.DurationVar(&c.toleration, "toleration", 30*time.Second, "the policy's toleration")
	flag.DurationVar(&c.timeout, "timeout", 20*time.Minute, "give up after this long")
	flag.StringVar(&c.extra, "controller-args", "", "extra nodemend-controller flags, space-separated (e.g. \"--kube-api-qps 1000\")")
	flag.IntVar(&c.ceilingWorkers, "ceiling-workers", 64, "parallel PATCHes of the write-ceiling measurement")
	flag.DurationVar(&c.ceilingFor, "ceiling-for", 10*time.Second, "how long the write ceiling is measured")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "bench-fleet failed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	if !filepath.IsAbs(c.work) {
		c.work = filepath.Join(testenv.RepoRoot(), c.work)
	}
	metricsPort, err := sim.FreePort()
	if err != nil {
		return err
	}
	s, err := sim.Start(ctx, sim.Options{
		Dir: c.work, Kwok: true, NoKubeComponents: true, Controllers: 1,
		// kwok renews a Lease every quarter of this; nothing here watches
		// Leases, so spare the API server 5,000 renewals every 10 s.
		KwokLeaseSeconds: 600,
		ControllerArgs: append([]string{"--backend", "node", "--pool-label", poolLabel,
			"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", metricsPort)}, strings.Fields(c.extra)...),
		Logf: say,
	})
	if err != nil {
		return err
	}
	defer s.Stop()
	tol := c.toleration.String()
	if err := s.Apply(ctx, sim.RepairPolicy("bench", benchLabel, "true", condition, tol, "1m", "20%")); err != nil {
		return err
	}

	t0 := time.Now()
	names, err := createNodes(ctx, s.Client, c)
	if err != nil {
		return err
	}
	created := time.Since(t0)
	say("created %d nodes in %d pools in %v (%.0f nodes/s)", len(names), c.pools, created.Round(time.Millisecond), float64(len(names))/created.Seconds())
	if err := waitReady(ctx, s.Client, len(names)); err != nil {
		return err
	}
	say("all %d nodes Ready (kwok) after %v", len(names), time.Since(t0).Round(time.Millisecond))
	time.Sleep(5 * time.Second) // the controller's caches settle

	ctrl := s.Controller(0)
	before, err := sample(ctrl.Pid(), metricsPort)
	if err != nil {
		return err
	}
	sick := pickUnhealthy(names, c)
	ceil, err := measureCeiling(ctx, s.RESTConfigFor("bench-ceiling"), healthyOnes(names, sick), c.ceilingWorkers, c.ceilingFor)
	if err != nil {
		return fmt.Errorf("measuring the write ceiling: %w", err)
	}
	say("write ceiling: %d node PATCHes in %v from %d workers = %.0f/s; decision p99 goal for %d due nodes: %v",
		ceil.patches, ceil.took.Round(time.Millisecond), ceil.workers, ceil.perSecond(), len(sick), ceil.decisionBound(len(sick)).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // the controller's cache takes in the ceiling's writes
	before, err = sample(ctrl.Pid(), metricsPort)
	if err != nil {
		return err
	}
	w, err := watchTaints(ctx, s.Client, sick)
	if err != nil {
		return err
	}
	// Every transition at the same whole second, so that every toleration
	// ends at the same instant: the controller's worst case.
	ltt := time.Now().Truncate(time.Second).Add(2 * time.Second)
	time.Sleep(time.Until(ltt))
	if err := markUnhealthy(ctx, s.Client, sick, ltt); err != nil {
		return err
	}
	due := ltt.Add(c.toleration)
	say("%d nodes (%.0f%% of every pool) %s=False at %s; tolerations end at %s", len(sick), 100*c.unhealthy, condition, ltt.Format("15:04:05"), due.Format("15:04:05"))

	if err := w.waitAll(ctx, due.Add(10*time.Minute)); err != nil {
		return err
	}
	after, err := sample(ctrl.Pid(), metricsPort)
	if err != nil {
		return err
	}
	res := w.results(due)
	if err := s.Healthy(); err != nil {
		return err
	}
	return report(c, res, ceil, before, after, created)
}

// healthyOnes are the nodes the storm leaves alone.
func healthyOnes(names, sick []string) []string {
	var out []string
	for _, n := range names {
		if _, found := slices.BinarySearch(sick, n); !found {
			out = append(out, n)
		}
	}
	return out
}

// createNodes creates the fleet with a few parallel writers.
func createNodes(ctx context.Context, cs kubernetes.Interface, c config) ([]string, error) {
	names := make([]string, c.nodes)
	for i := range names {
		names[i] = fmt.Sprintf("bench-p%02d-%05d", i%c.pools, i)
	}
	return names, parallel(ctx, 16, names, func(ctx context.Context, i int, name string) error {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{sim.KwokAnnotation: "fake"},
			Labels: map[string]string{poolLabel: fmt.Sprintf("p%02d", i%c.pools), benchLabel: "true",
				"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": fmt.Sprintf("zone-%c", 'a'+i%3)},
		}}
		_, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		return err
	})
}

// pickUnhealthy takes the same fraction of every pool.
func pickUnhealthy(names []string, c config) []string {
	perPool := map[string][]string{}
	for _, n := range names {
		p := n[len("bench-") : len("bench-")+3]
		perPool[p] = append(perPool[p], n)
	}
	var out []string
	for _, members := range perPool {
		k := int(float64(len(members)) * c.unhealthy)
		out = append(out, members[:k]...)
	}
	slices.Sort(out)
	return out
}

// markUnhealthy writes the condition as an agent would.
func markUnhealthy(ctx context.Context, cs kubernetes.Interface, nodes []string, ltt time.Time) error {
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: condition, Status: corev1.ConditionFalse, Reason: reason,
		Message:            "cgroup: fork rejected by pids controller in /system.slice/kubelet.service",
		LastTransitionTime: metav1.NewTime(ltt), LastHeartbeatTime: metav1.NewTime(ltt),
	}}}})
	return parallel(ctx, 16, nodes, func(ctx context.Context, _ int, name string) error {
		_, err := cs.CoreV1().Nodes().PatchStatus(ctx, name, patch)
		return err
	})
}

func waitReady(ctx context.Context, cs kubernetes.Interface, want int) error {
	return wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: benchLabel + "=true", ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		ready := 0
		for i := range list.Items {
			for _, c := range list.Items[i].Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= want, nil
	})
}

// taintWatch records when each unhealthy node was first seen tainted
// and when it was deleted.
type taintWatch struct {
	mu      sync.Mutex
	sick    map[string]bool
	tainted map[string]time.Time
	deleted map[string]time.Time
}

func watchTaints(ctx context.Context, cs kubernetes.Interface, sick []string) (*taintWatch, error) {
	w := &taintWatch{sick: map[string]bool{}, tainted: map[string]time.Time{}, deleted: map[string]time.Time{}}
	for _, n := range sick {
		w.sick[n] = true
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = benchLabel + "=true"
	}))
	inf := f.Core().V1().Nodes().Informer()
	seen := func(o any) {
		n, ok := o.(*corev1.Node)
		if !ok || !w.sick[n.Name] {
			return
		}
		for _, t := range n.Spec.Taints {
			if t.Key == taintKey {
				w.mu.Lock()
				if _, ok := w.tainted[n.Name]; !ok {
					w.tainted[n.Name] = time.Now()
				}
				w.mu.Unlock()
			}
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, o any) { seen(o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if n, ok := o.(*corev1.Node); ok && w.sick[n.Name] {
				w.mu.Lock()
				w.deleted[n.Name] = time.Now()
				w.mu.Unlock()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, ctx.Err()
	}
	return w, nil
}

func (w *taintWatch) waitAll(ctx context.Context, deadline time.Time) error {
	last := -1
	return wait.PollUntilContextCancel(ctx, time.Second, false, func(context.Context) (bool, error) {
		w.mu.Lock()
		tainted, deleted := len(w.tainted), len(w.deleted)
		w.mu.Unlock()
		if deleted != last && tainted > 0 {
			say("  %d/%d tainted, %d/%d repaired", tainted, len(w.sick), deleted, len(w.sick))
			last = deleted
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("only %d of %d unhealthy nodes repaired by %s", deleted, len(w.sick), deadline.Format(time.TimeOnly))
		}
		return deleted == len(w.sick), nil
	})
}

type results struct {
	latencies []time.Duration // toleration end → taint seen
	completed []time.Duration // toleration end → node deleted
	allDone   time.Duration   // toleration end → last node deleted
	untainted int             // deleted without a taint ever seen
}

func (w *taintWatch) results(due time.Time) results {
	w.mu.Lock()
	defer w.mu.Unlock()
	var r results
	for n := range w.sick {
		if t, ok := w.tainted[n]; ok {
			r.latencies = append(r.latencies, t.Sub(due))
		} else {
			r.untainted++
		}
		d := w.deleted[n].Sub(due)
		r.completed = append(r.completed, d)
		r.allDone = max(r.allDone, d)
	}
	slices.Sort(r.latencies)
	slices.Sort(r.completed)
	return r
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

// usage is the controller's resource use and API requests at one moment.
type usage struct {
	cpu      time.Duration
	rss, hwm int64 // bytes
	requests map[string]float64
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

// requestCounts sums client-go's rest_client_requests_total by method.
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
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
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

func report(c config, r results, ceil ceiling, before, after usage, created time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# nodemend fleet benchmark\n\n")
	args := "default flags"
	if c.extra != "" {
		args = c.extra
	}
	fmt.Fprintf(&b, "%d kwok nodes in %d pools, %.0f%% of every pool unhealthy at the same instant (%d nodes), toleration %v, gate 20%%, plain node backend; one nodemend-controller (%s); %s.\n\n",
		c.nodes, c.pools, 100*c.unhealthy, len(r.latencies)+r.untainted, c.toleration, args, time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&b, "| figure | value |\n|---|---|\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	due := len(r.latencies) + r.untainted
	bound := ceil.decisionBound(due)
	verdict := "within"
	if pct(r.latencies, 0.99) > bound {
		verdict = "OVER"
	}
	row("write ceiling (node PATCHes/s, plain client, heartbeats running)", fmt.Sprintf("%.0f/s (%d in %v, %d workers)", ceil.perSecond(), ceil.patches, ceil.took.Round(time.Millisecond), ceil.workers))
	row("decision p99 goal: 1.2 × due ÷ ceiling + 100 ms", fmt.Sprintf("%s (%s)", ms(bound), verdict))
	row("decision latency p50 (toleration end → taint seen)", ms(pct(r.latencies, 0.50)))
	row("decision latency p90", ms(pct(r.latencies, 0.90)))
	row("decision latency p99", ms(pct(r.latencies, 0.99)))
	row("decision latency max", ms(pct(r.latencies, 1)))
	row("completion latency p50 / p99 (toleration end → node deleted)", ms(pct(r.completed, 0.50))+" / "+ms(pct(r.completed, 0.99)))
	row("all unhealthy nodes repaired (deleted) after", ms(r.allDone))
	row("controller CPU during the storm", fmt.Sprintf("%.2f s", (after.cpu-before.cpu).Seconds()))
	row("controller RSS before / after / peak", fmt.Sprintf("%d / %d / %d MiB", before.rss>>20, after.rss>>20, after.hwm>>20))
	var total float64
	var verbs []string
	for m, v := range after.requests {
		d := v - before.requests[m]
		total += d
		if d > 0 {
			verbs = append(verbs, fmt.Sprintf("%s %.0f", m, d))
		}
	}
	slices.Sort(verbs)
	row("controller API requests during the storm", fmt.Sprintf("%.0f (%s)", total, strings.Join(verbs, ", ")))
	row("API requests per repaired node", fmt.Sprintf("%.1f", total/float64(max(1, len(r.latencies)+r.untainted))))
	row("fleet creation", fmt.Sprintf("%s (%.0f nodes/s)", ms(created), float64(c.nodes)/created.Seconds()))
	if r.untainted > 0 {
		row("nodes deleted without a taint seen", r.untainted)
	}
	fmt.Print("\n" + b.String() + "\n")
	if err := os.WriteFile(filepath.Join(c.work, "results.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	plots := map[string]string{
		"decision.svg":   histogramSVG(fmt.Sprintf("Decision latency, %d nodes due at once (toleration end → repair taint)", due), r.latencies, bound),
		"completion.svg": histogramSVG(fmt.Sprintf("Completion latency, %d nodes (toleration end → node deleted)", due), r.completed, 0),
	}
	for name, svg := range plots {
		if err := os.WriteFile(filepath.Join(c.work, name), []byte(svg), 0o644); err != nil {
			return err
		}
	}
	say("results: %s, plots: decision.svg, completion.svg", filepath.Join(c.work, "results.md"))
	return nil
}

func parallel(ctx context.Context, workers int, items []string, f func(context.Context, int, string) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i, items[i]); err != nil {
					select {
					case errs <- fmt.Errorf("%s: %w", items[i], err):
					default:
					}
				}
			}
		}()
	}
	for i := range items {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			return err
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

func say(format string, args ...any) {
	fmt.Printf("[%s] %s\n", time.Now().Format("15:04:05.000"), strings.TrimSpace(fmt.Sprintf(format, args...)))
}
