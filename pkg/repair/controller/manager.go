package controller

import (
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"nodemend.dev/nodemend/internal/apigate"
	"nodemend.dev/nodemend/internal/scheme"
	"nodemend.dev/nodemend/pkg/repair/scheduled"
)

// ManagerOptions configure the controller-runtime manager that runs the
// repair controller.
type ManagerOptions struct {
	Logger logr.Logger
	// Namespace holds the leader election Lease and the pause ConfigMap.
	Namespace string
	// PauseConfigMap is the name of the pause switch ConfigMap.
	PauseConfigMap string
	// LeaderElection makes only one replica repair at a time.
	LeaderElection   bool
	LeaderElectionID string
	// Lease timings; zero takes controller-runtime's defaults (15s, 10s, 2s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// MetricsAddr and HealthAddr are listen addresses; "0" disables.
	MetricsAddr, HealthAddr string
	// PprofAddr serves Go's /debug/pprof/ profiles; "" or "0" disables
	// (the default: a profile endpoint is for a person investigating).
	PprofAddr string
	// Gate holds every request of the manager's clients (cache, client,
	// leader election, events, the drain's clientset) while the API
	// server does not answer, one probe at a time (internal/apigate). Nil
	// builds one on the real clock that logs through Logger.
	Gate *apigate.Gate
}

// NewManager returns a manager whose cache holds what the repair controller
// reads: Nodes (without managed fields and image lists, the bulk of a real
// Node), NodeRepairPolicies, and only the pause ConfigMap.
func NewManager(cfg *rest.Config, o ManagerOptions) (manager.Manager, error) {
	if o.Namespace == "" || o.PauseConfigMap == "" {
		return nil, fmt.Errorf("namespace and pause ConfigMap name are required")
	}
	if o.LeaderElectionID == "" {
		o.LeaderElectionID = "nodemend-controller"
	}
	// No gzip: the API server compresses each watch stream for each client
	// that accepts it, every node event again, which in a storm is CPU the
	// server spends on the controller's own writes coming back; node
	// events are a few KiB on a cluster's network. Only the initial lists
	// of the informers grow on the wire.
	gate := o.Gate
	if gate == nil {
		log := o.Logger.WithName("api")
		gate = apigate.New(apigate.Options{OnChange: func(down bool, err error) {
			if down {
				log.Error(err, "the API server is not answering; holding requests, one probe at a time", "maxDelay", apigate.DefaultMax)
				return
			}
			log.Info("the API server answers again; sending what waited")
		}})
	}
	cfg = gate.Config(cfg)
	cfg.DisableCompression = true
	mo := manager.Options{
		Scheme: scheme.New(),
		Logger: o.Logger,
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Node{}: {Transform: stripNode},
				&corev1.ConfigMap{}: {
					Namespaces: map[string]cache.Config{o.Namespace: {}},
					Field:      fields.OneTermEqualSelector("metadata.name", o.PauseConfigMap),
				},
				// The agents' Events about Nodes (core/v1, in the default
				// namespace): the evidence of a cloud's scheduled event
				// (scheduled.go). Only theirs: a cluster's other events
				// are many and none of the controller's business.
				&corev1.Event{}: {
					Namespaces: map[string]cache.Config{metav1.NamespaceDefault: {}},
					Field:      fields.OneTermEqualSelector("source", scheduled.Agent),
				},
				// kube-system's pods, for the control-plane gate's static
				// pods (controlplane.go), cut to what it reads.
				&corev1.Pod{}: {
					Namespaces: map[string]cache.Config{metav1.NamespaceSystem: {}},
					Transform:  stripPod,
				},
			},
		},
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.HealthAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.Namespace,
		LeaderElectionReleaseOnCancel: true,
	}
	if o.LeaseDuration > 0 {
		mo.LeaseDuration = &o.LeaseDuration
	}
	if o.RenewDeadline > 0 {
		mo.RenewDeadline = &o.RenewDeadline
	}
	if o.RetryPeriod > 0 {
		mo.RetryPeriod = &o.RetryPeriod
	}
	mgr, err := manager.New(cfg, mo)
	if err != nil {
		return nil, err
	}
	if o.HealthAddr != "0" && o.HealthAddr != "" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
		if err := mgr.AddReadyzCheck("cache", func(req *http.Request) error {
			if !mgr.GetCache().WaitForCacheSync(req.Context()) {
				return fmt.Errorf("cache not synced")
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// stripPod keeps of a kube-system pod what the control-plane gate reads
// (controlplane.RoleOf, controlplane.MembersOf): its name, labels, the
// mirror annotation, its node and its Ready condition. A large cluster has
// a few such pods per node (its DaemonSets'); each is kept in a few
// hundred bytes.
func stripPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID,
		ResourceVersion: p.ResourceVersion, Labels: p.Labels}, Spec: corev1.PodSpec{NodeName: p.Spec.NodeName}}
	if v, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		out.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: v}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return out, nil
}

// stripNode drops what the controller never reads from cached Nodes: managed
// fields and the image list (together most of a real Node's size).
func stripNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	n.ManagedFields = nil
	n.Status.Images = nil
	return n, nil
}
