package backend_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/repair/backend"
	"nodemend.dev/nodemend/pkg/repair/backend/backends"
	"nodemend.dev/nodemend/pkg/repair/backend/clusterapi"
	"nodemend.dev/nodemend/pkg/repair/backend/karpenter"
	nodebackend "nodemend.dev/nodemend/pkg/repair/backend/node"
)

var k8s client.Client

// The backends run against a real API server with the Karpenter and Cluster
// API CRDs installed from the engines' own module zips.
func TestMain(m *testing.M) {
	env, err := repairtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s, err = client.New(env.Config, client.Options{Scheme: repairtest.Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

var ctx = context.Background()

func TestChoose(t *testing.T) {
	nc := &unstructured.Unstructured{}
	nc.SetName("nc")
	tests := []struct {
		name     string
		opts     []repairtest.NodeOpt
		override string
		want     string
	}{
		{"plain", nil, "", backend.Node},
		{"karpenter owner", []repairtest.NodeOpt{repairtest.InNodePool("np", nc)}, "", backend.Karpenter},
		{"karpenter label only", []repairtest.NodeOpt{repairtest.Labels("karpenter.sh/nodepool", "np")}, "", backend.Karpenter},
		{"cluster api", []repairtest.NodeOpt{repairtest.OfMachine("ns", "m", "ms")}, "", backend.ClusterAPI},
		{"override", []repairtest.NodeOpt{repairtest.OfMachine("ns", "m", "ms")}, backend.Node, backend.Node},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &corev1.Node{}
			for _, o := range tt.opts {
				o(n)
			}
			if got := backends.Table(backends.Deps{}).Choose(n, tt.override).Name(); got != tt.want {
				t.Errorf("Choose = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestKarpenterResolvesTheOwningNodeClaim(t *testing.T) {
	if _, err := repairtest.NodePool(ctx, k8s, "kp"); err != nil {
		t.Fatal(err)
	}
	mine, err := repairtest.NodeClaim(ctx, k8s, "kp-mine", "kp", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repairtest.NodeClaim(ctx, k8s, "kp-other", "kp", false); err != nil {
		t.Fatal(err)
	}
	n, err := repairtest.Node(ctx, k8s, "karp-1", time.Now(), repairtest.InNodePool("kp", mine))
	if err != nil {
		t.Fatal(err)
	}
	b := karpenter.Backend{Reader: k8s}
	target, err := b.Resolve(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if target.Name != "kp-mine" || target.UID != mine.GetUID() || target.Kind != "NodeClaim" || target.APIVersion != "karpenter.sh/v1" {
		t.Fatalf("target %+v", target)
	}
	out, err := backend.DeleteOnce(ctx, k8s, k8s, target)
	if err != nil || out != backend.Deleted {
		t.Fatalf("DeleteOnce = %s, %v", out, err)
	}
	expectGone(t, mine)
	expectExists(t, "karpenter.sh/v1", "NodeClaim", "", "kp-other")
}

func TestKarpenterFindsAnUnregisteredNodesClaimByStatus(t *testing.T) {
	nc, err := repairtest.NodeClaim(ctx, k8s, "kp-unreg", "kp", false)
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(nc.Object, "kwok://unreg", "status", "providerID")
	if err := k8s.Status().Update(ctx, nc); err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "karp-unreg", Labels: map[string]string{"karpenter.sh/nodepool": "kp"}},
		Spec: corev1.NodeSpec{ProviderID: "kwok://unreg"}}
	target, err := karpenter.Backend{Reader: k8s}.Resolve(ctx, n)
	if err != nil || target.Name != "kp-unreg" || target.UID != nc.GetUID() {
		t.Fatalf("Resolve = %+v, %v", target, err)
	}
	if _, err := (karpenter.Backend{Reader: k8s}).Resolve(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}); err == nil {
		t.Error("a node without NodeClaim resolved")
	}
}

func TestClusterAPIResolvesTheNodesMachine(t *testing.T) {
	if err := repairtest.Namespace(ctx, k8s, "capi"); err != nil {
		t.Fatal(err)
	}
	mine, err := repairtest.Machine(ctx, k8s, "capi", "m-mine", "ms-1", "md")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repairtest.Machine(ctx, k8s, "capi", "m-other", "ms-1", "md"); err != nil {
		t.Fatal(err)
	}
	n, err := repairtest.Node(ctx, k8s, "capi-1", time.Now(), repairtest.OfMachine("capi", "m-mine", "ms-1"))
	if err != nil {
		t.Fatal(err)
	}
	b := clusterapi.Backend{Reader: k8s, Mapper: k8s.RESTMapper()}
	target, err := b.Resolve(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if target.Name != "m-mine" || target.Namespace != "capi" || target.UID != mine.GetUID() || target.APIVersion != "cluster.x-k8s.io/v1beta2" {
		t.Fatalf("target %+v", target)
	}
	if out, err := backend.DeleteOnce(ctx, k8s, k8s, target); err != nil || out != backend.Deleted {
		t.Fatalf("DeleteOnce = %s, %v", out, err)
	}
	expectGone(t, mine)
	expectExists(t, "cluster.x-k8s.io/v1beta2", "Machine", "capi", "m-other")

	orphan := n.DeepCopy()
	orphan.Annotations["cluster.x-k8s.io/machine"] = "m-missing"
	if _, err := b.Resolve(ctx, orphan); err == nil {
		t.Error("a node whose Machine is missing resolved")
	}
}

func TestNodeBackendDeletesTheNode(t *testing.T) {
	n, err := repairtest.Node(ctx, k8s, "plain-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	target, _ := nodebackend.Backend{}.Resolve(ctx, n)
	if out, err := backend.DeleteOnce(ctx, k8s, k8s, target); err != nil || out != backend.Deleted {
		t.Fatalf("DeleteOnce = %s, %v", out, err)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Name: "plain-1"}, &corev1.Node{}); !apierrors.IsNotFound(err) {
		t.Fatalf("node still there: %v", err)
	}
}

// DeleteOnce deletes at most once: not an object being finalized, not an
// object recreated under the same name.
func TestDeleteOnce(t *testing.T) {
	nc, err := repairtest.NodeClaim(ctx, k8s, "fin", "kp", true)
	if err != nil {
		t.Fatal(err)
	}
	target := backend.Target{Backend: backend.Karpenter, APIVersion: "karpenter.sh/v1", Kind: "NodeClaim", Name: "fin", UID: nc.GetUID()}
	if out, err := backend.DeleteOnce(ctx, k8s, k8s, target); err != nil || out != backend.Deleted {
		t.Fatalf("first = %s, %v", out, err)
	}
	if out, err := backend.DeleteOnce(ctx, k8s, k8s, target); err != nil || out != backend.AlreadyDeleting {
		t.Fatalf("second = %s, %v", out, err)
	}
	// Karpenter finishes: the finalizer goes and the object with it.
	cur := &unstructured.Unstructured{}
	cur.SetAPIVersion("karpenter.sh/v1")
	cur.SetKind("NodeClaim")
	if err := k8s.Get(ctx, client.ObjectKey{Name: "fin"}, cur); err != nil {
		t.Fatal(err)
	}
	cur.SetFinalizers(nil)
	if err := k8s.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if out, err := backend.DeleteOnce(ctx, k8s, k8s, target); err != nil || out != backend.Gone {
		t.Fatalf("after finalizer = %s, %v", out, err)
	}
	// Someone creates a new NodeClaim with the same name: not ours.
	again, err := repairtest.NodeClaim(ctx, k8s, "fin", "kp", false)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := backend.DeleteOnce(ctx, k8s, k8s, target); err != nil || out != backend.Gone {
		t.Fatalf("recreated = %s, %v", out, err)
	}
	expectExists(t, "karpenter.sh/v1", "NodeClaim", "", again.GetName())
}

func TestTargetString(t *testing.T) {
	tg := backend.Target{Backend: backend.ClusterAPI, APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Namespace: "ns", Name: "m", UID: "u"}
	if tg.String() != "Machine ns/m" {
		t.Errorf("String = %s", tg)
	}
}

func expectGone(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(u.GroupVersionKind())
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(u), cur); !apierrors.IsNotFound(err) {
		t.Errorf("%s %s still exists (%v)", u.GetKind(), u.GetName(), err)
	}
}

func expectExists(t *testing.T, apiVersion, kind, ns, name string) {
	t.Helper()
	cur := &unstructured.Unstructured{}
	cur.SetAPIVersion(apiVersion)
	cur.SetKind(kind)
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cur); err != nil {
		t.Errorf("%s %s/%s: %v", kind, ns, name, err)
	}
}
