// Command demo is `make demo`: the whole nodemend loop on the local
// simulation (sim/). A Karpenter NodePool of GPU nodes runs a
// Deployment with a PodDisruptionBudget; one node's GPU falls off the bus
// (an NVIDIA XID 79 line in its kernel log); nodemend-agent turns it into
// AcceleratedHardwareReady=False, nodemend-controller waits out the demo
// policy's toleration, taints and drains the node through the Eviction API
// and hands it to Karpenter, which launches a replacement. Meanwhile
// `kubectl mend logs` fetches the sick node's diagnostic bundle. The run
// ends with a table of every phase's duration.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/sim"
)

const (
	pool       = "gpu"
	namespace  = "demo"
	app        = "trainer"
	replicas   = 3
	toleration = "15s"
	condition  = corev1.NodeConditionType("AcceleratedHardwareReady")
	xid79      = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=trainer, GPU has fallen off the bus."
)

func main() {
	work := flag.String("work", "_output/demo", "state directory (logs, simulated hosts, bundles)")
	timeout := flag.Duration("timeout", 8*time.Minute, "give up after this long")
	bin := flag.String("bin", "bin", "nodemend's binaries (nodemend-agent, nodemend-controller, kubectl-mend, sim/fake-nvidia-smi), relative to the repository")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := run(ctx, *work, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "\ndemo failed:", err)
		fmt.Fprintf(os.Stderr, "logs of every component: %s\n", filepath.Join(*work, "logs"))
		os.Exit(1)
	}
}

func run(ctx context.Context, work, binDir string) error {
	root := testenv.RepoRoot()
	bin := sim.BinDir(root, binDir)
	if !filepath.IsAbs(work) {
		work = filepath.Join(root, work)
	}
	say("starting the local simulation: etcd, kube-apiserver, kube-scheduler, kube-controller-manager,")
	say("kwok (fake kubelets), Karpenter (kwok provider), 2 nodemend-controller replicas, an agent per node")
	s, err := sim.Start(ctx, sim.Options{
		Dir: work, Karpenter: true, Controllers: 2, Agents: true, LeastPrivilege: true,
		ControllerArgs: []string{"--drain-poll-interval", "1s", "--recheck-interval", "10s"},
		Logf:           say, BinDir: bin,
	})
	if err != nil {
		return err
	}
	defer func() {
		say("stopping the simulation")
		s.Stop()
	}()

	say("NodePool %q (kwok GPU nodes), NodeRepairPolicy: AcceleratedHardwareReady=False tolerated %s, gate 20%%", pool, toleration)
	manifests := strings.Join([]string{
		sim.NodePool(pool, "c-4x-amd64-linux", map[string]string{sim.GPULabel: "1", "nodemend.dev/expected-gpu-count": "1"}),
		sim.RepairPolicy("demo-gpu", "karpenter.sh/nodepool", pool, string(condition), toleration, "2m", "20%"),
		sim.Workload(namespace, app, pool, replicas, "2", 1),
	}, "---\n")
	if err := s.Apply(ctx, manifests); err != nil {
		return err
	}
	say("Deployment %s/%s: %d replicas, one per node, PodDisruptionBudget maxUnavailable 1 — Karpenter launches nodes for them", namespace, app, replicas)
	t0 := time.Now()
	placed, err := s.WaitWorkload(ctx, namespace, "app="+app, replicas)
	if err != nil {
		return err
	}
	nodes := sim.Nodes(placed)
	say("%d pods Running on %d Karpenter nodes after %v", len(placed), len(nodes), since(t0))
	for _, n := range nodes {
		if _, err := s.WaitCondition(ctx, n, condition, corev1.ConditionTrue); err != nil {
			return err
		}
	}
	say("every node's agent publishes %s=True", condition)

	sick := nodes[0]
	host, err := s.Host(ctx, sick)
	if err != nil {
		return err
	}
	j, err := s.WatchRepair(ctx, sick, condition, namespace, "app="+app, replicas)
	if err != nil {
		return err
	}
	j.OnMilestone(func(m sim.Milestone, t time.Time) {
		fault, _ := j.At(sim.FaultWritten)
		say("  +%-8v %s", t.Sub(fault).Round(time.Millisecond), m)
	})

	fmt.Println()
	say("injecting the fault into %s's kernel log: %q", sick, xid79)
	written, err := host.Kmsg(xid79)
	if err != nil {
		return err
	}
	j.Mark(sim.FaultWritten, written)

	// Fetch the bundle while the node still exists: it is deleted once
	// drained.
	var bundle bundleResult
	var wg sync.WaitGroup
	if _, err := j.Wait(ctx, sim.ConditionFalse); err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		bundle = fetchBundle(ctx, root, bin, s.Kubeconfig, sick, filepath.Join(work, "bundles"))
	}()
	for _, m := range sim.RepairMilestones {
		if _, err := j.Wait(ctx, m); err != nil {
			return fmt.Errorf("%w (controller logs: %s)", err, s.LogDir())
		}
	}
	wg.Wait()
	fmt.Println()
	if bundle.err != nil {
		return fmt.Errorf("kubectl mend logs %s: %w", sick, bundle.err)
	}
	say("kubectl mend logs %s: %s in %v", sick, bundle.summary, bundle.took.Round(time.Millisecond))
	say("replacement node %s is Ready and runs the evicted pod; %s is gone", j.Replacement(), sick)
	printSummary(j, bundle)
	say("the same story, as an operator gets it afterwards from the API (the node is gone; events remain):")
	fmt.Println()
	if err := mend(ctx, bin, s.Kubeconfig, "timeline", sick); err != nil {
		return err
	}
	fmt.Println()
	return mend(ctx, bin, s.Kubeconfig, "status")
}

// mend runs a kubectl mend command, its output on ours.
func mend(ctx context.Context, bin, kubeconfig string, args ...string) error {
	fmt.Printf("$ kubectl mend %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "kubectl-mend"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubectl mend %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

type bundleResult struct {
	took    time.Duration
	summary string
	err     error
}

// fetchBundle runs `kubectl mend logs NODE` as a user would.
func fetchBundle(ctx context.Context, root, bin, kubeconfig, node, dir string) bundleResult {
	start := time.Now()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return bundleResult{err: err}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "kubectl-mend"), "--kubeconfig", kubeconfig, "logs", node, "-o", dir)
	out, err := cmd.CombinedOutput()
	r := bundleResult{took: time.Since(start)}
	if err != nil {
		r.err = fmt.Errorf("%w: %s", err, out)
		return r
	}
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(path, node) && strings.HasSuffix(path, ".tar.gz") {
			if st, err := d.Info(); err == nil {
				rel, _ := filepath.Rel(root, path)
				r.summary = fmt.Sprintf("%s (%.1f KiB)", rel, float64(st.Size())/1024)
			}
		}
		return nil
	})
	if r.summary == "" {
		r.err = fmt.Errorf("no bundle in %s; output: %s", dir, out)
	}
	return r
}

func printSummary(j *sim.Journey, b bundleResult) {
	fmt.Println()
	fmt.Println("Summary — one GPU node repaired without a human:")
	const row = "  %-52s %10s %16s\n"
	fmt.Printf(row, "PHASE", "TOOK", "SINCE THE FAULT")
	for _, st := range j.Durations() {
		fmt.Printf(row, st.Milestone, st.SincePrevious.Round(time.Millisecond), st.SinceFault.Round(time.Millisecond))
	}
	fmt.Printf(row, "diagnostic bundle fetched (kubectl mend logs)", b.took.Round(time.Millisecond), "")
	fmt.Println()
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

func say(format string, args ...any) {
	fmt.Printf("[%s] %s\n", time.Now().Format("15:04:05.000"), strings.TrimSpace(fmt.Sprintf(format, args...)))
}
