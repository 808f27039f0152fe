// Command real-node starts, stops and reports one real Kubernetes node on
// this machine with nodemend installed from its chart and locally built
// images (internal/realnode). Run it through hack/real-node.sh, which
// installs and builds what it needs first.
//
//	real-node start --kube-bin DIR --helm PATH [--images DIR] [--values FILE]... [--no-chart]
//	real-node stop
//	real-node status
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"nodemend.dev/nodemend/realnode"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	repo, err := repoRoot()
	if err != nil {
		fail(err)
	}
	l, err := realnode.DefaultLayout(repo)
	if err != nil {
		fail(err)
	}
	switch os.Args[1] {
	case "start":
		fs := flag.NewFlagSet("start", flag.ExitOnError)
		var o realnode.StartOptions
		var values multi
		fs.StringVar(&o.Tools.KubeBin, "kube-bin", "", "directory of etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy (hack/kube-binaries.sh)")
		fs.StringVar(&o.Tools.Helm, "helm", "", "the helm CLI (hack/helm.sh)")
		fs.StringVar(&o.Tools.Images, "images", filepath.Join(repo, "_output", "images"), "directory of the image tarballs (make images)")
		fs.StringVar(&o.Tools.MetadataMock, "metadata-mock", "", "AWS's EC2 metadata mock (hack/metadata-mock.sh), the agent's cloud metadata service on loopback")
		fs.Var(&values, "values", "extra values file for helm install (repeatable)")
		fs.BoolVar(&o.NoChart, "no-chart", false, "start the node without installing nodemend")
		_ = fs.Parse(os.Args[2:])
		if o.Tools.KubeBin == "" || (o.Tools.Helm == "" && !o.NoChart) {
			fail(fmt.Errorf("start needs --kube-bin and --helm (hack/real-node.sh passes them)"))
		}
		o.Values = values
		o.Logf = func(f string, a ...any) { fmt.Fprintf(os.Stderr, "real-node: "+f+"\n", a...) }
		ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer cancel()
		t0 := time.Now()
		phases, err := l.Start(ctx, o)
		if err != nil {
			fail(err)
		}
		for _, p := range phases {
			fmt.Fprintf(os.Stderr, "real-node: %-50s %6.1fs\n", p.Name, p.Duration.Seconds())
		}
		fmt.Fprintf(os.Stderr, "real-node: node %s is Ready (%.1fs); logs in %s; stop with hack/real-node.sh stop\n",
			l.NodeName, time.Since(t0).Seconds(), l.LogDir())
		fmt.Println(l.Admin())
	case "stop":
		if err := l.Stop(); err != nil {
			fail(fmt.Errorf("stop left something behind:\n%w", err))
		}
		fmt.Fprintf(os.Stderr, "real-node: stopped; the machine is as start found it (logs kept in %s)\n", l.LogDir())
	case "status":
		lines, running := l.Status()
		fmt.Println(strings.Join(lines, "\n"))
		if !running {
			os.Exit(3)
		}
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: hack/real-node.sh start|stop|status")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "real-node: %v\n", err)
	os.Exit(1)
}

// repoRoot is the directory holding go.mod above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "deploy", "helm", "nodemend")); err == nil {
			return d, nil
		}
		if d == filepath.Dir(d) {
			return "", fmt.Errorf("run from the nodemend repository (no deploy/helm/nodemend above %s)", dir)
		}
	}
}
