package drainpass

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

var (
	k8s       client.Client
	clientset kubernetes.Interface
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{}, func(env *testenv.Env) error {
		clientset = env.Client
		var err error
		k8s, err = client.New(env.Config, client.Options{Scheme: repairtest.Scheme()})
		return err
	})
}

// A drain on the real API server: the Eviction API refuses the pod whose
// PodDisruptionBudget allows no disruption, until the deadline; DaemonSet and
// mirror pods stay; everything else is evicted.
func TestDrainHonoursPDBsUntilTheDeadline(t *testing.T) {
	ctx := context.Background()
	ns := "drain-pdb"
	if err := repairtest.Namespace(ctx, k8s, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := repairtest.Node(ctx, k8s, "drain-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := repairtest.DaemonSet(ctx, k8s, ns, "agent"); err != nil {
		t.Fatal(err)
	}
	must := func(_ *corev1.Pod, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(repairtest.Pod(ctx, k8s, ns, "guarded", "drain-1", repairtest.OwnedBy("apps/v1", "ReplicaSet", "db"), repairtest.PodLabels("app", "db")))
	must(repairtest.Pod(ctx, k8s, ns, "free", "drain-1", repairtest.OwnedBy("apps/v1", "ReplicaSet", "web")))
	must(repairtest.Pod(ctx, k8s, ns, "bare", "drain-1"))
	must(repairtest.Pod(ctx, k8s, ns, "agent-x", "drain-1", repairtest.OwnedBy("apps/v1", "DaemonSet", "agent")))
	must(repairtest.Pod(ctx, k8s, ns, "static", "drain-1", repairtest.Mirror()))
	must(repairtest.Pod(ctx, k8s, ns, "elsewhere", "drain-2"))
	pdb, err := repairtest.PDB(ctx, k8s, ns, "db", "db", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := Drainer{Client: clientset}

	res, err := d.Pass(ctx, "drain-1", v1alpha1.DrainEvict, false, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Evicted != 2 || res.Blocked != 1 || res.Done {
		t.Fatalf("first pass %+v", res)
	}
	expectTerminating(t, ns, "free", "bare")
	expectUntouched(t, ns, "guarded", "agent-x", "static", "elsewhere")

	// The evicted pods are terminating (no kubelet confirms it here); the
	// guarded one is still refused.
	res, err = d.Pass(ctx, "drain-1", v1alpha1.DrainEvict, false, true)
	if err != nil || res.Evicted != 0 || res.Blocked != 1 || res.Terminating != 2 || res.Done {
		t.Fatalf("second pass %+v %v", res, err)
	}

	// The budget allows one disruption: the eviction goes through.
	if err := repairtest.SetPDBStatus(ctx, k8s, pdb, 1, 1); err != nil {
		t.Fatal(err)
	}
	res, err = d.Pass(ctx, "drain-1", v1alpha1.DrainEvict, false, true)
	if err != nil || res.Evicted != 1 || res.Blocked != 0 || res.Done {
		t.Fatalf("third pass %+v %v", res, err)
	}
	// Past the deadline the drain stops waiting for graceful terminations.
	res, err = d.Pass(ctx, "drain-1", v1alpha1.DrainEvict, true, true)
	if err != nil || !res.Done || res.Terminating != 3 {
		t.Fatalf("after deadline %+v %v", res, err)
	}
	expectUntouched(t, ns, "agent-x", "static", "elsewhere")
}

func TestDrainDeletesAfterTheDeadline(t *testing.T) {
	ctx := context.Background()
	ns := "drain-deadline"
	if err := repairtest.Namespace(ctx, k8s, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := repairtest.Pod(ctx, k8s, ns, "guarded", "drain-3", repairtest.OwnedBy("apps/v1", "ReplicaSet", "db"), repairtest.PodLabels("app", "db")); err != nil {
		t.Fatal(err)
	}
	if _, err := repairtest.PDB(ctx, k8s, ns, "db", "db", 1, 0); err != nil {
		t.Fatal(err)
	}
	d := Drainer{Client: clientset}
	res, err := d.Pass(ctx, "drain-3", v1alpha1.DrainEvict, false, true)
	if err != nil || res.Blocked != 1 {
		t.Fatalf("before deadline %+v %v", res, err)
	}
	// At the deadline the pod is deleted, and since nothing is waited for
	// after the deadline, the drain is done in the same pass.
	res, err = d.Pass(ctx, "drain-3", v1alpha1.DrainEvict, true, true)
	if err != nil || res.Deleted != 1 || !res.Done {
		t.Fatalf("at deadline %+v %v", res, err)
	}
	expectTerminating(t, ns, "guarded")
	res, err = d.Pass(ctx, "drain-3", v1alpha1.DrainEvict, true, true)
	if err != nil || !res.Done || res.Deleted != 0 {
		t.Fatalf("after deadline %+v %v", res, err)
	}
}

// A node whose kubelet is gone: once every pod was evicted, nothing is
// waited for.
func TestDrainDoneAtOnceWithoutAKubelet(t *testing.T) {
	ctx := context.Background()
	ns := "drain-dead"
	if err := repairtest.Namespace(ctx, k8s, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := repairtest.Pod(ctx, k8s, ns, "web", "drain-4", repairtest.OwnedBy("apps/v1", "ReplicaSet", "web")); err != nil {
		t.Fatal(err)
	}
	res, err := Drainer{Client: clientset}.Pass(ctx, "drain-4", v1alpha1.DrainEvict, false, false)
	if err != nil || res.Evicted != 1 || !res.Done {
		t.Fatalf("pass %+v %v", res, err)
	}
}

func expectTerminating(t *testing.T, ns string, names ...string) {
	t.Helper()
	for _, name := range names {
		p := &corev1.Pod{}
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err == nil && p.DeletionTimestamp == nil {
			t.Errorf("pod %s was not asked to leave", name)
		}
	}
}

func expectUntouched(t *testing.T, ns string, names ...string) {
	t.Helper()
	for _, name := range names {
		p := &corev1.Pod{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			t.Errorf("pod %s: %v", name, err)
		} else if p.DeletionTimestamp != nil {
			t.Errorf("pod %s is terminating", name)
		}
	}
}
