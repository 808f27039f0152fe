// Command bench-agent is `make bench-agent`: nodemend-agent built from this
// tree, beside the one built from a base commit (-base, default the
// merge-base with the latest release tag, else HEAD~1), both on their own
// fake host root against one real API server, in one run. It measures
//
//   - idle CPU (% of one core) over -idle on a healthy host;
//   - CPU seconds per 1,000 kernel log lines under a flood of -rate
//     lines/s for -flood;
//   - RSS after the idle phase, anonymous and file-backed (/proc), and
//     the peak;
//   - the stripped binary, and this tree's binary by package, next to the
//     floor: a program that only imports the libraries the agent imports;
//   - fault → condition latency (p50/max): a Fatal kernel line appended to
//     the host's kmsg until the Node's KernelReady changes, seen through a
//     watch;
//
// and writes them, with the ratios (and the EKS Node Monitoring Agent's
// figures from the side-by-side run of issue 23), to <out>/results.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

type config struct {
	out    string
	base   string
	idle   time.Duration
	flood  time.Duration
	rate   int
	faults int
	tags   string
}

func main() {
	var c config
	flag.StringVar(&c.out, "out", "_output/bench-agent", "directory for binaries, logs and results.md")
	flag.StringVar(&c.base, "base", os.Getenv("BASE"), "git ref of the agent to compare with (default: merge-base with the latest release tag, else HEAD~1)")
	flag.DurationVar(&c.idle, "idle", 5*time.Minute, "idle phase: CPU is measured over it, RSS at its end")
	flag.DurationVar(&c.flood, "flood", time.Minute, "flood phase: kernel lines at -rate lines/s")
	flag.IntVar(&c.rate, "rate", 1000, "kernel lines per second in the flood phase")
	flag.IntVar(&c.faults, "faults", 30, "fatal kernel lines written one by one for the latency phase")
	flag.StringVar(&c.tags, "tags", "", "build tags of both agents (make bench-agent passes the Makefile's AGENT_TAGS)")
	sizeOf := flag.String("breakdown", "", "only print the size by package of this unstripped Go binary")
	flag.Parse()
	if *sizeOf != "" {
		sizes, err := breakdown(*sizeOf)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-agent:", err)
			os.Exit(1)
		}
		for _, s := range sizes {
			fmt.Printf("%10d %s\n", s.bytes, s.group)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "bench-agent:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	if c.idle <= 0 || c.flood <= 0 || c.rate <= 0 || c.faults < 2 {
		return errors.New("-idle and -flood must be positive, -rate positive, -faults at least 2")
	}
	out, err := filepath.Abs(c.out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	base, err := resolveBase(c.base)
	if err != nil {
		return err
	}
	head, err := describe("HEAD")
	if err != nil {
		return err
	}
	dirty := ""
	if st, _ := git("status", "--porcelain", "--untracked-files=no"); st != "" {
		dirty = " + uncommitted changes"
	}
	progress("this tree: %s%s; base: %s", head, dirty, base.label)

	progress("building both agents (stripped, as make build does) and the library floor")
	cur := &agent{name: "this tree", label: head + dirty}
	if err := buildAgent(ctx, ".", filepath.Join(out, "bin", "current"), c.tags, cur); err != nil {
		return fmt.Errorf("building this tree: %w", err)
	}
	src := filepath.Join(out, "base-src")
	if err := exportTree(base.commit, src); err != nil {
		return err
	}
	old := &agent{name: "base", label: base.label}
	if err := buildAgent(ctx, src, filepath.Join(out, "bin", "base"), c.tags, old); err != nil {
		return fmt.Errorf("building the base %s: %w", base.commit, err)
	}
	sizes, err := breakdown(cur.unstripped)
	if err != nil {
		return fmt.Errorf("size breakdown: %w", err)
	}
	floor, floorLibs, floorSizes, err := buildFloor(ctx, out, c.tags)
	if err != nil {
		return fmt.Errorf("library floor: %w", err)
	}

	progress("starting etcd and kube-apiserver")
	// envtest logs through controller-runtime; nothing of it matters here.
	ctrllog.SetLogger(logr.Discard())
	env, err := testenv.Start(testenv.Options{CRDDirectoryPaths: []string{testenv.NodemendCRDs()}})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	kubeconfig := filepath.Join(out, "kubeconfig")
	if err := writeKubeconfig(env, kubeconfig); err != nil {
		return err
	}
	agents := []*agent{cur, old}
	for i, a := range agents {
		a.node = fmt.Sprintf("bench-agent-%d", i)
		if err := a.start(ctx, env, out, kubeconfig); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		defer a.stop()
	}
	for _, a := range agents {
		if err := a.waitReady(ctx, env); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
	}
	// Past start-up: the config applied, the first checks run, caches filled.
	if err := sleep(ctx, 15*time.Second); err != nil {
		return err
	}

	progress("idle phase: %v", c.idle)
	if err := measureIdle(ctx, agents, c.idle); err != nil {
		return err
	}
	progress("flood phase: %d kernel lines/s for %v", c.rate, c.flood)
	if err := measureFlood(ctx, agents, c.rate, c.flood); err != nil {
		return err
	}
	progress("latency phase: %d fatal kernel lines each", c.faults)
	if err := measureLatency(ctx, env, agents, c.faults); err != nil {
		return err
	}
	for _, a := range agents {
		if err := a.alive(); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		a.peak = memKiB(a.pid(), "VmHWM:")
	}
	path := filepath.Join(out, "results.md")
	md := report(c, cur, old, sizes, floor, floorLibs, floorSizes)
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Print(md)
	progress("results: %s", path)
	return nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench-agent: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// baseRef is the commit the agent is compared with.
type baseRef struct{ commit, label string }

// resolveBase: ref if given; else the merge-base of HEAD with the latest
// release tag reachable from HEAD~1 (HEAD itself may be the tag); else
// HEAD~1.
func resolveBase(ref string) (baseRef, error) {
	how := ref
	if ref == "" {
		if tag, err := git("describe", "--tags", "--abbrev=0", "HEAD~1"); err == nil && tag != "" {
			mb, err := git("merge-base", "HEAD", tag)
			if err != nil {
				return baseRef{}, err
			}
			ref, how = mb, "merge-base with "+tag
		} else {
			ref, how = "HEAD~1", "HEAD~1"
		}
	}
	commit, err := git("rev-parse", "--verify", ref+"^{commit}")
	if err != nil {
		return baseRef{}, fmt.Errorf("base %q: %w", ref, err)
	}
	label, err := describe(commit)
	if err != nil {
		return baseRef{}, err
	}
	if how != ref || how == "HEAD~1" {
		label += " (" + how + ")"
	}
	return baseRef{commit: commit, label: label}, nil
}

func describe(ref string) (string, error) {
	return git("log", "-1", "--format=%h %s", ref)
}

func git(args ...string) (string, error) {
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", err
	}
	s := strings.TrimSpace(string(out))
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s, nil
}

// exportTree writes commit's files to dir (git archive: no worktree
// bookkeeping left behind).
func exportTree(commit, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cmd := exec.Command("bash", "-c", `git archive --format=tar "$1" | tar -x -C "$2"`, "bash", commit, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("exporting %s: %v: %s", commit, err, out)
	}
	return nil
}
