// Command nodemend-controller repairs nodes whose conditions stay unhealthy
// past their toleration: taint, drain, and replace them through the engine
// that owns them (Karpenter, Cluster API, or plain Node deletion), never more
// than a safe share of a pool at once. See docs/repair.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"nodemend.dev/nodemend/internal/kubeconfig"
	"nodemend.dev/nodemend/pkg/repair/backend/backends"
	"nodemend.dev/nodemend/pkg/repair/controller"
	"nodemend.dev/nodemend/pkg/repair/ladder"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "nodemend-controller:", err)
		os.Exit(1)
	}
}

type flags struct {
	kubeconfig         string
	namespace          string
	leaderElect        bool
	leaderElectionID   string
	metricsAddr        string
	healthAddr         string
	pprofAddr          string
	dryRun             bool
	backend            string
	replaceUnowned     bool
	poolLabel          string
	pauseConfigMap     string
	agentConfig        string
	recheckInterval    time.Duration
	drainPollInterval  time.Duration
	terminationTimeout time.Duration
	agentSilence       time.Duration
	concurrency        int
	maxDrains          int
	qps                float32
	burst              int
	debug              bool
	// logOut receives the logs (tests); nil: stderr.
	logOut io.Writer
}

func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "nodemend-system"
}

func newCommand() *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   "nodemend-controller",
		Short: "Repair nodes whose conditions stay unhealthy: taint, drain, replace",
		Long: `nodemend-controller watches Node conditions (the kubelet's Ready and the
nodemend-agent's KernelReady, ContainerRuntimeReady, NetworkingReady,
StorageReady, AcceleratedHardwareReady). A node unhealthy for longer than its
toleration is tainted, drained with the Eviction API, and replaced through
what owns it: its Karpenter NodeClaim, its Cluster API Machine, or (neither)
the Node object itself. No more than maxUnhealthy (default 20%) of a pool or
zone is ever unhealthy while repairs go on. Run two replicas: leader election
is on by default. Every knob is documented in docs/repair.md.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fl.StringVar(&f.namespace, "namespace", defaultNamespace(), "namespace of the leader election Lease, the pause ConfigMap and the agents' ConfigMap ($POD_NAMESPACE when set)")
	fl.BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader so that only one replica repairs; turn off only for a single replica")
	fl.StringVar(&f.leaderElectionID, "leader-election-id", "nodemend-controller", "name of the leader election Lease")
	fl.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint; 0 disables")
	fl.StringVar(&f.healthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz; 0 disables")
	fl.StringVar(&f.pprofAddr, "pprof-bind-address", "0", "address of Go's /debug/pprof/ profiles (for investigating the controller's CPU and memory); 0 disables")
	fl.BoolVar(&f.dryRun, "dry-run", false, "log and emit NodeRepairWouldStart events instead of repairing; write nothing else")
	fl.BoolVar(&f.replaceUnowned, "replace-unowned-nodes", false, "repair nodes no engine owns by deleting the Node object (the behaviour before the ladder) where their policy sets neither action nor ladder, instead of the default ladder Reboot, Quarantine (docs/repair.md)")
	fl.StringVar(&f.backend, "backend", "", fmt.Sprintf("use this backend for every node (%v) instead of choosing by what owns the node", backends.Names()))
	fl.StringVar(&f.poolLabel, "pool-label", "", "node label whose value defines pools for the safety gate, before Karpenter NodePools and Cluster API MachineDeployments")
	fl.StringVar(&f.pauseConfigMap, "pause-configmap", "nodemend-pause", "name of the ConfigMap (in --namespace) whose existence pauses all repairs; its data.reason says why")
	fl.StringVar(&f.agentConfig, "agent-config", "nodemend-agent-config", "name of the agents' ConfigMap (in --namespace; their config file under the key agent.yaml, as the chart deploys it): NodeRepairPolicies are judged against the quiet periods it sets; empty: unknown (agents configured outside the chart), and policies an agent's override could defeat are warned")
	fl.DurationVar(&f.recheckInterval, "recheck-interval", 5*time.Minute, "how often a blocked repair is reconsidered")
	fl.DurationVar(&f.drainPollInterval, "drain-poll-interval", 10*time.Second, "how often a drain pass runs while pods remain")
	fl.DurationVar(&f.terminationTimeout, "termination-timeout", 30*time.Minute, "how long a node may outlive its hand-over to the backend before the repair is reported failed")
	fl.DurationVar(&f.agentSilence, "agent-silence", ladder.DefaultAgentSilence, fmt.Sprintf("how long a node's agent may go without a heartbeat before the ladder skips the rungs only it carries out (Reboot, ResetAccelerator) and a dead node may be tainted out of service; at least %v (one default agent heartbeat and its delays)", ladder.MinAgentSilence))
	fl.IntVar(&f.concurrency, "max-concurrent-reconciles", controller.DefaultMaxConcurrentReconciles, "nodes reconciled in parallel (a storm's decisions go faster with more requests in flight at the API server; drains are bounded by --max-concurrent-drains)")
	fl.IntVar(&f.maxDrains, "max-concurrent-drains", controller.DefaultMaxConcurrentDrains, "repairs that drain at once over the whole fleet (every due node is tainted first; the others wait their turn); a policy's drain.maxConcurrent bounds its nodes as well; -1: unbounded")
	fl.Float32Var(&f.qps, "kube-api-qps", -1, "client-side rate limit on requests to the API server, per resource type; -1: none, the API server's Priority and Fairness queues the controller's requests apart from the kubelets' and leader elections, and the controller's concurrency bounds them (docs/repair.md)")
	fl.IntVar(&f.burst, "kube-api-burst", 300, "client-side burst above --kube-api-qps, when that is positive")
	fl.BoolVar(&f.debug, "debug", false, "log at debug level")
	return cmd
}

func run(ctx context.Context, f flags) error {
	if err := backends.CheckOverride(f.backend); err != nil {
		return fmt.Errorf("--backend: %w", err)
	}
	if f.namespace == "" {
		return errors.New("--namespace is required")
	}
	if f.qps == 0 || (f.qps > 0 && f.burst < 1) {
		// client-go reads a zero as its own default of 5/s, not as "none".
		return fmt.Errorf("--kube-api-qps %v --kube-api-burst %d: the rate must be positive with a burst of at least 1, or -1 for no client-side limit", f.qps, f.burst)
	}
	if f.agentSilence < ladder.MinAgentSilence {
		return fmt.Errorf("--agent-silence %v: below %v a live agent with the default 5-minute heartbeat is taken for gone between two heartbeats and its node's Reboot skipped (docs/repair.md, Dead nodes)", f.agentSilence, ladder.MinAgentSilence)
	}
	level := zapcore.InfoLevel
	if f.debug {
		level = zapcore.DebugLevel
	}
	// JSON logs; controller-runtime adds controller, reconcileID and Node to
	// every reconcile's logger, the controller NodeClaim or Machine when it
	// hands a node over.
	log := newLogger(level, f.logOut)
	ctrl.SetLogger(log)

	cfg, err := kubeconfig.Load(f.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = f.qps, f.burst
	cfg.UserAgent = "nodemend-controller"

	mgr, err := controller.NewManager(cfg, controller.ManagerOptions{
		Logger: log, Namespace: f.namespace, PauseConfigMap: f.pauseConfigMap,
		LeaderElection: f.leaderElect, LeaderElectionID: f.leaderElectionID,
		MetricsAddr: f.metricsAddr, HealthAddr: f.healthAddr, PprofAddr: f.pprofAddr,
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if _, err := controller.Setup(ctx, mgr, controller.Options{
		Clock:                   clock.RealClock{},
		Namespace:               f.namespace,
		PauseConfigMap:          f.pauseConfigMap,
		AgentConfig:             f.agentConfig,
		DryRun:                  f.dryRun,
		PoolLabel:               f.poolLabel,
		Backend:                 f.backend,
		ReplaceUnowned:          f.replaceUnowned,
		RecheckInterval:         f.recheckInterval,
		DrainPollInterval:       f.drainPollInterval,
		TerminationTimeout:      f.terminationTimeout,
		AgentSilence:            f.agentSilence,
		MaxConcurrentReconciles: f.concurrency,
		MaxConcurrentDrains:     f.maxDrains,
		Registerer:              ctrlmetrics.Registry,
	}); err != nil {
		return err
	}
	log.Info("starting", "namespace", f.namespace, "leaderElection", f.leaderElect, "dryRun", f.dryRun, "backend", f.backend, "poolLabel", f.poolLabel)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager stopped")
		return err
	}
	return nil
}
