// Command demo runs nodemend-agent against a local control plane for a
// node whose host is a directory, injects a kernel fault, and shows the
// condition flip and recover with measured latencies. hack/demo.sh starts the
// control plane and calls it. (The full detect → repair → diagnose loop
// replaces this once the local simulation exists.)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

const node = "demo-worker-1"

func main() {
	kubeconfig := flag.String("kubeconfig", "", "admin kubeconfig of the local control plane")
	agentBin := flag.String("agent", "bin/nodemend-agent", "nodemend-agent binary")
	work := flag.String("work", "_output/demo", "work directory (host root, logs)")
	flag.Parse()
	if err := run(*kubeconfig, *agentBin, *work); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

type step struct {
	name string
	at   time.Time
}

func run(kubeconfig, agentBin, work string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	if err := installCRDs(ctx, cfg, "deploy/crds"); err != nil {
		return err
	}
	// A fresh node and host root each run, so the demo can run again.
	_ = os.RemoveAll(work)
	root := filepath.Join(work, "hostroot")
	if err := buildHostRoot(root); err != nil {
		return err
	}
	if err := client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	say("created Node %s; its host is the directory %s", node, root)

	agentCfg := filepath.Join(work, "agent.yaml")
	if err := os.WriteFile(agentCfg, []byte(`# demo: journal from a fixture file, a 20s quiet period so recovery is quick
sources:
  journal: {mode: file, file: /var/log/journal/demo.jsonl}
monitors:
  kernel: {checkInterval: 5s}
  containerRuntime: {enabled: false}
  networking: {enabled: false}
  storage: {enabled: false}
reasons:
  ForkFailedOutOfPIDs: {quietPeriod: 20s}
`), 0o644); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(work, "agent.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	agent := exec.CommandContext(ctx, agentBin, "--kubeconfig", kubeconfig, "--node-name", node,
		"--host-root", root, "--config", agentCfg, "--metrics-bind-address", "127.0.0.1:0", "--kube-api-qps", "50")
	agent.Stdout, agent.Stderr = logFile, logFile
	if err := agent.Start(); err != nil {
		return fmt.Errorf("starting %s (run `make build`): %w", agentBin, err)
	}
	defer func() { _ = agent.Process.Signal(os.Interrupt); _ = agent.Wait() }()
	say("started nodemend-agent (log: %s)", logFile.Name())

	var steps []step
	mark := func(name string) time.Time {
		now := time.Now()
		steps = append(steps, step{name, now})
		return now
	}
	mark("agent started")
	if err := waitCondition(ctx, client, "True", "KernelIsReady"); err != nil {
		return err
	}
	mark("KernelReady=True published")
	say("KernelReady=True: the agent watches the node")

	time.Sleep(time.Second) // let the agent settle, so the figure below is the steady-state latency
	line := "cgroup: fork rejected by pids controller in /system.slice/kubelet.service"
	say("injecting a kernel fault into %s/dev/kmsg: %q", root, line)
	f, err := os.OpenFile(filepath.Join(root, "dev/kmsg"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	injected := mark("fault written to kmsg")
	_, err = fmt.Fprintf(f, "3,1,%d,-;%s\n", time.Now().UnixMicro()%1e9, line)
	f.Close()
	if err != nil {
		return err
	}
	if err := waitCondition(ctx, client, "False", "ForkFailedOutOfPIDs"); err != nil {
		return err
	}
	flipped := mark("KernelReady=False seen at the API server")
	say("KernelReady=False reason=ForkFailedOutOfPIDs, %v after the kmsg write", flipped.Sub(injected).Round(time.Millisecond))
	if ev, err := waitEvent(ctx, client, "ForkFailedOutOfPIDs"); err == nil {
		say("event on the Node: %s %s: %s", ev.Type, ev.Reason, ev.Message)
	}
	say("no new fault for the (demo) quiet period of 20s: the condition must recover by itself")
	if err := waitCondition(ctx, client, "True", "KernelIsReady"); err != nil {
		return err
	}
	recovered := mark("KernelReady=True again")
	say("KernelReady=True again, %v after the fault", recovered.Sub(flipped).Round(time.Second))

	fmt.Println()
	fmt.Println("  phase                                        at        since previous")
	for i, s := range steps {
		d := time.Duration(0)
		if i > 0 {
			d = s.at.Sub(steps[i-1].at)
		}
		fmt.Printf("  %-44s %s  %10v\n", s.name, s.at.Format("15:04:05.000"), d.Round(time.Millisecond))
	}
	fmt.Println()
	_ = client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
	return nil
}

func waitCondition(ctx context.Context, c kubernetes.Interface, status, reason string) error {
	for {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			for _, cond := range n.Status.Conditions {
				if cond.Type == "KernelReady" && string(cond.Status) == status && cond.Reason == reason {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for KernelReady=%s (%s): %w", status, reason, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func waitEvent(ctx context.Context, c kubernetes.Interface, reason string) (*corev1.Event, error) {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", node), fields.OneTermEqualSelector("reason", reason)).String()
	for i := 0; i < 100; i++ {
		evs, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err == nil && len(evs.Items) > 0 {
			return &evs.Items[0], nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("no %s event", reason)
}

// buildHostRoot lays out the files the kernel monitor reads, with values of
// a healthy host.
func buildHostRoot(root string) error {
	files := map[string]string{
		"dev/kmsg":                    "",
		"var/log/journal/demo.jsonl":  "",
		"proc/loadavg":                "0.52 0.58 0.59 3/1234 56789\n",
		"proc/sys/kernel/pid_max":     "4194304\n",
		"proc/sys/kernel/threads-max": "254288\n",
		"proc/sys/fs/file-nr":         "9184\t0\t9223372036854775807\n",
		"proc/uptime":                 "12345.67 23456.78\n",
		"proc/stat":                   fmt.Sprintf("cpu  1 2 3 4 5 6 7 0 0 0\nbtime %d\n", time.Now().Add(-time.Hour).Unix()),
		"proc/1/stat":                 "1 (systemd) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n",
	}
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func say(format string, args ...any) {
	fmt.Printf("[%s] %s\n", time.Now().Format("15:04:05.000"), strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// installCRDs creates or updates nodemend's CRDs, as an install would.
func installCRDs(ctx context.Context, cfg *rest.Config, dir string) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s: %v", dir, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		crds := client.ApiextensionsV1().CustomResourceDefinitions()
		old, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = crds.Create(ctx, &crd, metav1.CreateOptions{})
		case err == nil:
			crd.ResourceVersion = old.ResourceVersion
			_, err = crds.Update(ctx, &crd, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("installing %s: %w", crd.Name, err)
		}
	}
	say("installed nodemend's CRDs from %s", dir)
	return nil
}
