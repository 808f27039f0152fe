// Command nodemend-agent watches one node's kernel, journal, /proc, /sys and
// container runtime, and publishes nodemend's node conditions and events.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"

	"nodemend.dev/nodemend/internal/cloudmeta"
	"nodemend.dev/nodemend/internal/kubeconfig"
	"nodemend.dev/nodemend/internal/selfpages"
	"nodemend.dev/nodemend/pkg/agent"
	"nodemend.dev/nodemend/pkg/agent/remediate"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "nodemend-agent:", err)
		os.Exit(1)
	}
}

type flags struct {
	kubeconfig  string
	nodeName    string
	hostRoot    string
	configPath  string
	metricsAddr string
	qps         float32
	// diagnostics flags (pkg/diagnostics)
	diagnostics      bool
	diagAllowUploads []string
	// remediation flags (pkg/agent/remediate)
	remediation      bool
	rebootMechanism  string
	rebootCommand    []string
	acceleratorReset bool
	maxClockSkew     time.Duration
	// cloud metadata (internal/cloudmeta)
	cloudMetadata         string
	cloudMetadataEndpoint string
	// pageOutAfter: when to page out the executable's start-up pages
	// (internal/selfpages); 0: never.
	pageOutAfter time.Duration
}

func newCommand() *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   "nodemend-agent",
		Short: "Detect node faults and publish them as node conditions and events",
		Long: `nodemend-agent runs on every node (DaemonSet or systemd service). It reads the
kernel log, the journal, /proc, /sys, netlink, the container runtime and GPU
telemetry under --host-root and keeps its node's KernelReady,
ContainerRuntimeReady, NetworkingReady, StorageReady and AcceleratedHardwareReady
conditions true to the nodemend contract (docs/reasons.md).

Without --kubeconfig it uses the in-cluster config; without --node-name it uses
$NODE_NAME.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fl.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default: $NODE_NAME)")
	fl.StringVar(&f.hostRoot, "host-root", "/", "directory the host's filesystem is mounted at; every host path is read under it")
	fl.StringVar(&f.configPath, "config", "", "agent config file (YAML, see docs/agent-config.md); reloaded on change")
	fl.StringVar(&f.metricsAddr, "metrics-bind-address", "127.0.0.1:8088", "address for /metrics, /healthz and /readyz; empty disables")
	fl.Float32Var(&f.qps, "kube-api-qps", 5, "client-side rate limit on requests to the API server, for the node's conditions and for everything else (Events, pod reads, diagnostics) each: a flood of Events never delays a condition")
	fl.BoolVar(&f.diagnostics, "diagnostics", true, "serve NodeDiagnostics for this node (docs/diagnostics.md)")
	fl.StringSliceVar(&f.diagAllowUploads, "diagnostics-allow-upload-cidrs", nil, "private/loopback/link-local CIDRs that NodeDiagnostic upload URLs may reach (refused by default)")
	fl.BoolVar(&f.remediation, "remediation", true, "serve NodeRemediations (reboot and accelerator-reset orders) for this node (docs/repair.md)")
	fl.StringVar(&f.rebootMechanism, "reboot-mechanism", remediate.MechanismNone, "how an ordered reboot is done: none (refuse), systemd (the host's systemd starts reboot.target; needs systemd as the host's PID 1), command (--reboot-command), sysrq (the kernel's SysRq s-u-b: no clean shutdown)")
	fl.StringSliceVar(&f.rebootCommand, "reboot-command", nil, "argv of the reboot command for --reboot-mechanism=command, comma-separated, run without a shell")
	fl.BoolVar(&f.acceleratorReset, "accelerator-reset", true, "carry out ResetAccelerator orders with the GPU driver's tool when it is installed (nvidia-smi --gpu-reset, amd-smi reset --gpureset)")
	fl.DurationVar(&f.maxClockSkew, "max-clock-skew", remediate.DefaultMaxClockSkew, "bound on the difference between this node's clock and the API server's, allowed for when judging an order's deadline")
	fl.StringVar(&f.cloudMetadata, "cloud-metadata", cloudmeta.Auto, "whose instance metadata service to read for scheduled events (ScheduledMaintenance, SpotInterruption) and bundles: auto (the cloud the Node's providerID names: aws://, gce://, azure://), aws, gce, azure, or none")
	fl.StringVar(&f.cloudMetadataEndpoint, "cloud-metadata-endpoint", "", "the metadata service's address, http://IP[:port] with a link-local or loopback IP (default: the cloud's own, http://169.254.169.254); tests and the simulation point it at AWS's metadata mock")
	fl.DurationVar(&f.pageOutAfter, "page-out-startup-after", time.Minute, "this long after start, hand the kernel back the pages of the agent's own binary that start-up alone touched (madvise MADV_PAGEOUT; they come back when used); 0 keeps them resident")
	return cmd
}

func run(ctx context.Context, f flags) error {
	if f.nodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	if st, err := os.Stat(f.hostRoot); err != nil || !st.IsDir() {
		return fmt.Errorf("--host-root %q is not a directory", f.hostRoot)
	}
	// Problems the agent reports are expected conditions of a host, not
	// programming errors: no stack traces below DPanic.
	zl, err := zap.NewProduction(zap.AddStacktrace(zapcore.DPanicLevel))
	if err != nil {
		return err
	}
	defer func() { _ = zl.Sync() }()
	log := zapr.NewLogger(zl).WithValues("node", f.nodeName)

	cfg, err := kubeconfig.Load(f.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = f.qps, int(2*f.qps)
	cfg.UserAgent = "nodemend-agent"
	clients, err := agent.Connect(cfg, nil, log.WithName("api"))
	if err != nil {
		return err
	}
	client, status, cfg := clients.Client, clients.Status, clients.Config
	diag, err := diagnosticsOptions(f, cfg)
	if err != nil {
		return err
	}
	var rem agent.RemediationOptions
	if f.remediation {
		rem = agent.RemediationOptions{Config: cfg, ResetAccelerators: f.acceleratorReset, MaxClockSkew: f.maxClockSkew,
			Reboot: remediate.RebootConfig{Mechanism: f.rebootMechanism, Command: f.rebootCommand}}
	}
	cloud, err := cloudmeta.Select(cloudmeta.Config{Cloud: f.cloudMetadata, Endpoint: f.cloudMetadataEndpoint},
		func(ctx context.Context) (string, error) {
			n, err := client.GetNode(ctx, f.nodeName)
			if err != nil {
				return "", err
			}
			return n.Spec.ProviderID, nil
		})
	if err != nil {
		return fmt.Errorf("--cloud-metadata: %w", err)
	}
	a, err := agent.New(agent.Options{
		Client: client, StatusClient: status, NodeName: f.nodeName, HostRoot: f.hostRoot, ConfigPath: f.configPath,
		MetricsAddr: f.metricsAddr, Log: log, Diagnostics: diag, Remediation: rem, Cloud: cloud,
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if f.pageOutAfter > 0 {
		go pageOutStartup(ctx, log, f.pageOutAfter)
	}
	return runLogged(ctx, a, log)
}

// pageOutStartup pages out the agent's executable once start-up is over:
// by then every monitor has run its first check, so the resident code is
// what the agent keeps running (internal/selfpages; docs/agent.md,
// footprint).
func pageOutStartup(ctx context.Context, log logr.Logger, after time.Duration) {
	t := time.NewTimer(after)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	n, err := selfpages.ReleaseExecutable()
	if err != nil {
		log.Info("the binary's start-up pages stay resident", "reason", err.Error())
		return
	}
	log.Info("paged out the binary's start-up pages; the kernel reads back what is used", "mappedBytes", n)
}

func runLogged(ctx context.Context, a *agent.Agent, log logr.Logger) error {
	err := a.Run(ctx)
	if err != nil {
		log.Error(err, "agent stopped")
	}
	return err
}

// diagnosticsOptions turns the diagnostics flags into agent options.
func diagnosticsOptions(f flags, cfg *rest.Config) (agent.DiagnosticsOptions, error) {
	if !f.diagnostics {
		return agent.DiagnosticsOptions{}, nil
	}
	d := agent.DiagnosticsOptions{Config: cfg}
	for _, c := range f.diagAllowUploads {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return d, fmt.Errorf("--diagnostics-allow-upload-cidrs: %w", err)
		}
		d.AllowUploadPrefixes = append(d.AllowUploadPrefixes, p)
	}
	return d, nil
}
