package controllerrun

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"nodemend.dev/nodemend/deploy/deploytest"
	"nodemend.dev/nodemend/pkg/repair/controller"
	"nodemend.dev/nodemend/pkg/repair/history"
)

// The real controller, leader-elected, with nothing but its ServiceAccount's
// token under the chart's RBAC: it repairs a node that has been unhealthy
// for an hour (taint, drain with an eviction and a DaemonSet pod left alone,
// delete), records its events, and the API server refuses none of its
// requests.
func poll(t *testing.T, what string, cond func(context.Context) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return cond(ctx), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func TestControllerRepairsWithOnlyItsServiceAccount(t *testing.T) {
	ctx := t.Context()
	ctrllog.SetLogger(logr.Discard()) // controller-runtime's global logger
	// The manager logs into a buffer, shown on failure: it may still log
	// while it stops, after the test has returned (testr would panic).
	var logs syncBuffer
	logger := funcr.New(func(prefix, args string) { logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{})
	defer func() {
		if t.Failed() {
			t.Logf("controller logs:\n%s", logs.String())
		}
	}()
	const pool, poolLabel = "run", "deploytest.nodemend.dev/pool"
	hourAgo := metav1.NewTime(time.Now().Add(-time.Hour))
	for i := range 5 {
		n := deploytest.Must[*corev1.Node](t)(admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("repair-%d", i), Labels: map[string]string{poolLabel: pool}}}, metav1.CreateOptions{}))
		status := corev1.ConditionTrue
		if i == 0 {
			status = corev1.ConditionFalse
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: "KernelReady", Status: status, Reason: "KernelDeadlock",
			LastTransitionTime: hourAgo, LastHeartbeatTime: hourAgo}}
		deploytest.Must[*corev1.Node](t)(admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}))
	}
	podsOnBrokenNode(t, "repair-0")

	var denied deploytest.ForbiddenLog
	cfg := denied.Wrap(controllerConfig(t))
	mgr, err := controller.NewManager(cfg, controller.ManagerOptions{
		Logger: logger, Namespace: deploytest.Namespace, PauseConfigMap: "nodemend-pause",
		LeaderElection: true, LeaderElectionID: "nodemend-controller", MetricsAddr: "0", HealthAddr: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := controller.Setup(runCtx, mgr, controller.Options{
		Clock: clock.RealClock{}, Namespace: deploytest.Namespace, PauseConfigMap: "nodemend-pause", PoolLabel: poolLabel,
		// The agents' ConfigMap the chart deploys, as the chart's
		// Deployment names it: listed and watched by name under the
		// chart's RBAC.
		AgentConfig:       "nodemend-agent-config",
		DrainPollInterval: 200 * time.Millisecond, Registerer: prometheus.NewRegistry(), SkipNameValidation: true,
		// The whole path through the node lane, deletion included: the
		// default ladder of an unowned node (Reboot, Quarantine) stops
		// short of it.
		ReplaceUnowned: true,
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
		if d := denied.List(); len(d) > 0 {
			t.Errorf("the API server refused the controller %d requests:\n%v", len(d), d)
		}
	}()

	poll(t, "repair-0 deleted", func(ctx context.Context) bool {
		_, err := admin.CoreV1().Nodes().Get(ctx, "repair-0", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	for _, reason := range []string{history.Started, history.Succeeded} {
		poll(t, reason+" event", func(ctx context.Context) bool {
			evs, err := admin.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false
			}
			for _, e := range evs.Items {
				if e.Reason == reason && e.Regarding.Name == "repair-0" {
					return true
				}
			}
			return false
		})
	}
	poll(t, "the leader election event on the Lease", func(ctx context.Context) bool {
		evs, err := admin.CoreV1().Events(deploytest.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Lease" && e.Reason == "LeaderElection" {
				return true
			}
		}
		return false
	})
	if !strings.Contains(logs.String(), `"msg"="read the agents' quiet periods" "from"="ConfigMap `+deploytest.Namespace+`/nodemend-agent-config"`) {
		t.Errorf("the controller did not read the chart's agent ConfigMap")
	}
	for i := 1; i < 5; i++ {
		if _, err := admin.CoreV1().Nodes().Get(ctx, fmt.Sprintf("repair-%d", i), metav1.GetOptions{}); err != nil {
			t.Errorf("repair-%d: %v", i, err)
		}
	}
}

// podsOnBrokenNode puts a workload pod (to be evicted) and a DaemonSet's
// pod (which the drain reads its DaemonSet for, and leaves) on node.
func podsOnBrokenNode(t *testing.T, node string) {
	t.Helper()
	ctx := t.Context()
	ns := "team-a"
	deploytest.Must[*corev1.Namespace](t)(admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	labels := map[string]string{"app": "ds"}
	ds := deploytest.Must[*appsv1.DaemonSet](t)(admin.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "ds"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		}},
	}, metav1.CreateOptions{}))
	pods := []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "workload"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ds-pod", Labels: labels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}}}},
	}
	for _, p := range pods {
		p.Spec = corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x"}}}
		deploytest.Must[*corev1.Pod](t)(admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}))
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) WriteString(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(v)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
