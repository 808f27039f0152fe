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
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

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
	engines    string
	engine     string // one of engines, during its run
	nodes      int
	pools      int
	unhealthy  float64
	toleration time.Duration
	timeout    time.Duration
	stormFor   time.Duration
	extra      string
	// ceilingWorkers and ceilingFor shape the write-ceiling measurement.
	ceilingWorkers int
	ceilingFor     time.Duration
	// profileFor, when set, takes a CPU profile of the controller from a
	// second before the tolerations end (the decision phase); with
	// profileAPIServer, of kube-apiserver too, then and over the ceiling.
	profileFor       time.Duration
	profileAPIServer bool
}

// The engines a storm can be repaired by.
const (
	// engineNodemend: nodemend-controller on nodes no engine owns, deleted
	// by the plain node backend; the storm is KernelReady=False.
	engineNodemend = "nodemend"
	// engineKarpenter: Karpenter's own node repair (NodeRepair feature
	// gate) on Karpenter's nodes, nodemend off; the storm is Ready=False
	// with the nodes' kubelets (kwok) stopped.
	engineKarpenter = "karpenter"
	// engineNodemendKarpenter: nodemend-controller on the same storm as
	// engineKarpenter, handing the drained nodes to Karpenter.
	engineNodemendKarpenter = "nodemend-karpenter"
)

var engines = []string{engineNodemend, engineKarpenter, engineNodemendKarpenter}

func main() {
	var c config
	flag.StringVar(&c.work, "work", "_output/bench-fleet", "state directory (logs, results; a subdirectory per engine when there are several)")
	flag.StringVar(&c.engines, "engine", engineNodemend, fmt.Sprintf("what repairs the storm, comma-separated to run several in turn and compare them (%s)", strings.Join(engines, ", ")))
	flag.IntVar(&c.nodes, "nodes", 5000, "kwok nodes")
	flag.IntVar(&c.pools, "pools", 10, "pools the nodes are spread over (the gate counts per pool)")
	flag.Float64Var(&c.unhealthy, "unhealthy", 0.20, "fraction of every pool turned unhealthy")
	flag.DurationVar(&c.toleration, "toleration", 30*time.Second, "the policy's toleration (engine nodemend; the Karpenter storms use Karpenter's kwok provider's 10m)")
	flag.DurationVar(&c.timeout, "timeout", 20*time.Minute, "give up after this long (all engines together)")
	flag.DurationVar(&c.stormFor, "storm-for", 10*time.Minute, "how long after the tolerations end the repairs may take; what is not done by then is reported as not reached")
	flag.StringVar(&c.extra, "controller-args", "", "extra nodemend-controller flags, space-separated (e.g. \"--kube-api-qps 1000\")")
	flag.IntVar(&c.ceilingWorkers, "ceiling-workers", 64, "parallel PATCHes of the write-ceiling measurement")
	flag.DurationVar(&c.ceilingFor, "ceiling-for", 10*time.Second, "how long the write ceiling is measured")
	flag.DurationVar(&c.profileFor, "cpu-profile-for", 0, "take a CPU profile of the controller this long from a second before the tolerations end, to <work>/controller-cpu.pprof (go tool pprof); 0: none")
	flag.BoolVar(&c.profileAPIServer, "profile-apiserver", false, "with -cpu-profile-for: profile kube-apiserver as long over the same span (<work>/apiserver-decisions-cpu.pprof) and from 2 s into the write ceiling (<work>/apiserver-ceiling-cpu.pprof)")
	flag.Parse()
	// envtest logs through controller-runtime's logger; the benchmark says
	// what it does itself.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "bench-fleet failed:", err)
		os.Exit(1)
	}
}

// run runs the storm once per engine and, for several, writes them side
// by side.
func run(ctx context.Context, c config) error {
	if !filepath.IsAbs(c.work) {
		c.work = filepath.Join(testenv.RepoRoot(), c.work)
	}
	list := strings.Split(c.engines, ",")
	for _, e := range list {
		if !slices.Contains(engines, e) {
			return fmt.Errorf("-engine %q: want one or more of %s", e, strings.Join(engines, ", "))
		}
	}
	var outcomes []outcome
	for _, e := range list {
		rc := c
		rc.engine = e
		if len(list) > 1 {
			rc.work = filepath.Join(c.work, e)
		}
		o, err := runOne(ctx, rc)
		if err != nil {
			return fmt.Errorf("engine %s: %w", e, err)
		}
		outcomes = append(outcomes, o)
	}
	if len(outcomes) > 1 {
		return writeSideBySide(c, outcomes)
	}
	return nil
}

// runOne is one engine's storm on a simulation of its own.
func runOne(ctx context.Context, c config) (outcome, error) {
	metricsPort, err := sim.FreePort()
	if err != nil {
		return outcome{}, err
	}
	opts := sim.Options{
		Dir: c.work, Kwok: true, NoKubeComponents: true, Controllers: 1,
		// kwok renews a Lease every quarter of this; nothing here watches
		// Leases, so spare the API server 5,000 renewals every 10 s.
		KwokLeaseSeconds: 600,
		ControllerArgs:   []string{"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", metricsPort)},
		Logf:             say,
	}
	toleration, conditionType := c.toleration, condition
	switch c.engine {
	case engineNodemend:
		opts.ControllerArgs = append(opts.ControllerArgs, "--backend", "node", "--pool-label", poolLabel)
	case engineKarpenter:
		opts.Karpenter, opts.KarpenterNodeRepair, opts.Controllers = true, true, 0
		toleration, conditionType = karpenterTolerationFor, string(corev1.NodeReady)
	case engineNodemendKarpenter:
		// Pools are Karpenter's NodePools, the backend the one owning the
		// node: nodemend's defaults.
		opts.Karpenter = true
		toleration, conditionType = karpenterTolerationFor, string(corev1.NodeReady)
	}
	prof := profiles{d: c.profileFor, dir: c.work}
	if c.profileFor > 0 {
		port, err := sim.FreePort()
		if err != nil {
			return outcome{}, err
		}
		prof.controller = fmt.Sprintf("127.0.0.1:%d", port)
		opts.ControllerArgs = append(opts.ControllerArgs, "--pprof-bind-address", prof.controller)
	}
	opts.ControllerArgs = append(opts.ControllerArgs, strings.Fields(c.extra)...)
	s, err := sim.Start(ctx, opts)
	if err != nil {
		return outcome{}, err
	}
	defer s.Stop()
	// The watches and keepDown end before the simulation does.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if opts.Controllers > 0 {
		if err := s.Apply(ctx, sim.RepairPolicy("bench", benchLabel, "true", conditionType, toleration.String(), "1m", "20%")); err != nil {
			return outcome{}, err
		}
	}

	t0 := time.Now()
	var pools map[string]string // node → pool
	if c.engine == engineNodemend {
		names, err := createNodes(ctx, s.Client, c)
		if err != nil {
			return outcome{}, err
		}
		say("created %d nodes in %d pools in %v (%.0f nodes/s)", len(names), c.pools, time.Since(t0).Round(time.Millisecond), float64(len(names))/time.Since(t0).Seconds())
		if err := waitReady(ctx, s.Client, len(names)); err != nil {
			return outcome{}, err
		}
		pools = map[string]string{}
		for _, n := range names {
			pools[n] = n[len("bench-") : len("bench-")+3]
		}
	} else if pools, err = createKarpenterFleet(ctx, s, c); err != nil {
		return outcome{}, err
	}
	created, allCreated := time.Since(t0), time.Now()
	say("all %d nodes Ready after %v", len(pools), created.Round(time.Millisecond))
	time.Sleep(5 * time.Second) // the controllers' caches settle

	procs := watchedProcesses(s, opts.Controllers > 0, metricsPort)
	names := slices.Sorted(maps.Keys(pools))
	sick := pickUnhealthy(pools, c.unhealthy)
	mach, err := newMachine()
	if err != nil {
		return outcome{}, err
	}
	// The storm's watch runs from before the ceiling, so that the API server
	// serves it through both and the ceiling is measured under the load the
	// decisions meet. It asks for what the controller asks for (protobuf,
	// no gzip), the cheapest watch to serve.
	w := newStormWatch(sick)
	watchClient, err := kubernetes.NewForConfig(cheapWatch(s.RESTConfigFor("bench-watch")))
	if err != nil {
		return outcome{}, err
	}
	if err := w.watchNodes(ctx, watchClient, c.engine != engineKarpenter); err != nil {
		return outcome{}, err
	}
	ceilStart, err := mach.sample()
	if err != nil {
		return outcome{}, err
	}
	if c.profileAPIServer && c.profileFor > 0 {
		prof.apiserver = s.RESTConfigFor("bench-profile")
	}
	ceilProfiled := make(chan error, 1)
	go func() { ceilProfiled <- prof.apiserverAt(ctx, time.Now().Add(2*time.Second), "ceiling") }()
	ceil, err := measureCeiling(ctx, s.RESTConfigFor("bench-ceiling"), healthyOnes(names, sick), c.ceilingWorkers, c.ceilingFor)
	if err != nil {
		return outcome{}, fmt.Errorf("measuring the write ceiling: %w", err)
	}
	ceilEnd, err := mach.sample()
	if err != nil {
		return outcome{}, err
	}
	if err := <-ceilProfiled; err != nil {
		return outcome{}, fmt.Errorf("profiling kube-apiserver: %w", err)
	}
	say("write ceiling: %d node PATCHes in %v from %d workers = %.0f/s; decision p99 goal for %d due nodes: %v",
		ceil.patches, ceil.took.Round(time.Millisecond), ceil.workers, ceil.perSecond(), len(sick), ceil.decisionBound(len(sick)).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // the controllers' caches take in the ceiling's writes
	if c.engine == engineKarpenter {
		if err := w.watchNodeClaimDeletions(ctx, s.Dynamic); err != nil {
			return outcome{}, err
		}
	}
	// The controllers' use is counted from the storm's writes to the last
	// deletion; when the tolerations end minutes after the writes (the
	// Karpenter storms), from a moment before they end, so that minutes of
	// idling do not dilute the figures.
	before, err := sampleAll(procs)
	if err != nil {
		return outcome{}, err
	}
	due, err := storm(ctx, s.Client, c, w, sick, allCreated, toleration, conditionType)
	if err != nil {
		return outcome{}, err
	}
	traceCtx, stopTrace := context.WithCancel(ctx)
	defer stopTrace()
	traced := make(chan []machineCPU, 1)
	go func() { traced <- mach.trace(traceCtx, due.Add(-time.Second), c.stormFor+time.Second) }()
	profiled := make(chan error, 2)
	go func() { profiled <- prof.controllerAt(ctx, due.Add(-time.Second)) }()
	go func() { profiled <- prof.apiserverAt(ctx, due.Add(-time.Second), "decisions") }()
	if wait := time.Until(due); wait > time.Minute {
		say("waiting %v for the tolerations to end", wait.Round(time.Second))
		if err := sleepCtx(ctx, wait-2*time.Second); err != nil {
			return outcome{}, err
		}
		if before, err = sampleAll(procs); err != nil {
			return outcome{}, err
		}
	}
	w.waitAll(ctx, due.Add(c.stormFor))
	after, err := sampleAll(procs)
	if err != nil {
		return outcome{}, err
	}
	if err := errors.Join(<-profiled, <-profiled); err != nil {
		return outcome{}, fmt.Errorf("profiling: %w", err)
	}
	stopTrace()
	trace := <-traced
	if err := s.Healthy(); err != nil {
		return outcome{}, err
	}
	if err := w.failures(); err != nil {
		return outcome{}, err
	}
	o := outcome{engine: c.engine, nodes: len(pools), res: w.results(due), ceil: ceil, before: before, after: after, created: created, toleration: toleration, condition: conditionType,
		ceilingCPU: [2]machineCPU{ceilStart, ceilEnd}, trace: trace, due: due}
	return o, report(c, o)
}

// kwokSettle is how long kwok is given to see that a node's heartbeats
// stopped.
const kwokSettle = 5 * time.Second

// storm turns sick unhealthy so that every toleration ends at the same
// instant (the controllers' worst case) and returns that instant.
// Every node was created before newest, at least a second before the
// storm.
func storm(ctx context.Context, cs kubernetes.Interface, c config, w *stormWatch, sick []string, newest time.Time, toleration time.Duration, conditionType string) (time.Time, error) {
	if c.engine == engineNodemend {
		// Every transition at the same whole second.
		ltt := time.Now().Truncate(time.Second).Add(2 * time.Second)
		time.Sleep(time.Until(ltt))
		if err := markUnhealthy(ctx, cs, sick, ltt); err != nil {
			return time.Time{}, err
		}
		due := ltt.Add(toleration)
		say("%d nodes (%.0f%% of every pool) %s=False at %s; tolerations end at %s", len(sick), 100*c.unhealthy, conditionType, ltt.Format("15:04:05"), due.Format("15:04:05"))
		return due, nil
	}
	// Karpenter measures a toleration from no earlier than the node's
	// creation (a condition cannot predate its node), so the transitions are
	// dated just after the newest node was created and the tolerations end
	// 10 minutes later, all at once. The storm is written at once, so each
	// controller sees it well before.
	if err := stopHeartbeats(ctx, cs, sick); err != nil {
		return time.Time{}, err
	}
	// Kwok's informer takes in the annotation a moment later; a heartbeat
	// due in between would undo Ready=False (keepDown undoes that again).
	if err := sleepCtx(ctx, kwokSettle); err != nil {
		return time.Time{}, err
	}
	ltt := newest.Truncate(time.Second).Add(time.Second)
	due := ltt.Add(toleration)
	if err := markNotReady(ctx, cs, sick, ltt); err != nil {
		return time.Time{}, err
	}
	go w.keepDown(ctx, cs, ltt)
	if time.Now().After(due) {
		return time.Time{}, fmt.Errorf("writing the storm took past the tolerations' end (%s)", due.Format("15:04:05"))
	}
	say("%d nodes (%.0f%% of every pool) Ready=False, kubelets stopped, transition dated %s; tolerations end at %s", len(sick), 100*c.unhealthy, ltt.Format("15:04:05"), due.Format("15:04:05"))
	return due, nil
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

// pickUnhealthy takes the same fraction of every pool (pools: node →
// pool), the first nodes by name.
func pickUnhealthy(pools map[string]string, fraction float64) []string {
	perPool := map[string][]string{}
	for n, p := range pools {
		perPool[p] = append(perPool[p], n)
	}
	var out []string
	for _, members := range perPool {
		slices.Sort(members)
		k := int(float64(len(members)) * fraction)
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

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func say(format string, args ...any) {
	fmt.Printf("[%s] %s\n", time.Now().Format("15:04:05.000"), strings.TrimSpace(fmt.Sprintf(format, args...)))
}
