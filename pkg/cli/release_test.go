package cli

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/record"
)

func TestRelease(t *testing.T) {
	kc := kubeconfig(t, cfg)
	mk := func(name, phase string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
		if phase != "" {
			n.Annotations[record.StateAnnotation] = v1alpha1.RepairRecord{Phase: record.Phase(phase), Started: metav1.Now(),
				Trigger: &v1alpha1.RepairTrigger{Type: "KernelReady", Status: "False"}, Rung: &v1alpha1.RungAttempt{
					RungPosition: v1alpha1.RungPosition{Attempt: 1}, Action: v1alpha1.LadderQuarantine, Started: metav1.Now()}}.Encode()
		}
		if _, err := core.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = core.CoreV1().Nodes().Delete(t.Context(), name, metav1.DeleteOptions{}) })
	}
	mk("rel-q", string(record.PhaseQuarantined))
	mk("rel-d", string(record.PhaseDraining))
	mk("rel-h", "")

	out, err := run(t, "--kubeconfig", kc, "release", "rel-q", "--reason", "GPU reseated")
	if err != nil || !strings.Contains(out, "release requested") {
		t.Fatalf("release: %v\n%s", err, out)
	}
	n, err := core.CoreV1().Nodes().Get(t.Context(), "rel-q", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := n.Annotations[record.ReleaseAnnotation]; !strings.HasPrefix(v, "GPU reseated (") {
		t.Errorf("release annotation %q", v)
	}
	if _, err := run(t, "--kubeconfig", kc, "release", "rel-d"); err == nil || !strings.Contains(err.Error(), "not quarantined (repair phase Draining)") {
		t.Errorf("releasing a draining node: %v", err)
	}
	if _, err := run(t, "--kubeconfig", kc, "release", "rel-h"); err == nil || !strings.Contains(err.Error(), "no repair in progress") {
		t.Errorf("releasing a healthy node: %v", err)
	}
	if _, err := run(t, "--kubeconfig", kc, "release", "rel-none"); err == nil {
		t.Error("releasing a node that does not exist succeeded")
	}
}

// veto sets and lifts nodemend.dev/do-not-repair; repair asks for a repair
// of a node not under repair, and refuses one under repair.
func TestVetoAndRepairNow(t *testing.T) {
	kc := kubeconfig(t, cfg)
	for _, name := range []string{"act-v", "act-r"} {
		if _, err := core.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = core.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	annotation := func(node, key string) (string, bool) {
		n, err := core.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := n.Annotations[key]
		return v, ok
	}
	if out, err := run(t, "--kubeconfig", kc, "veto", "act-v", "--reason", "vendor debugging"); err != nil || !strings.Contains(out, "node/act-v vetoed") {
		t.Fatalf("veto: %v\n%s", err, out)
	}
	if v, _ := annotation("act-v", record.VetoAnnotation); !strings.HasPrefix(v, "vendor debugging (") {
		t.Errorf("veto annotation %q", v)
	}
	if out, err := run(t, "--kubeconfig", kc, "veto", "act-v", "--lift"); err != nil || !strings.Contains(out, "veto lifted") {
		t.Fatalf("veto --lift: %v\n%s", err, out)
	}
	if _, ok := annotation("act-v", record.VetoAnnotation); ok {
		t.Error("the veto is still there after --lift")
	}
	if out, err := run(t, "--kubeconfig", kc, "repair", "act-r", "--reason", "INC-1"); err != nil || !strings.Contains(out, "repair requested") {
		t.Fatalf("repair: %v\n%s", err, out)
	}
	if v, _ := annotation("act-r", "nodemend.dev/repair-now"); !strings.HasPrefix(v, "INC-1 (") {
		t.Errorf("repair-now annotation %q", v)
	}
	if _, err := run(t, "--kubeconfig", kc, "repair", "rel-q2"); err == nil {
		t.Error("repair of a node that does not exist succeeded")
	}
}

// A caller without the act's permission is told which one it lacks, and
// nothing is written.
func TestActsNameTheMissingPermission(t *testing.T) {
	if _, err := core.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "act-denied"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = core.CoreV1().Nodes().Delete(context.Background(), "act-denied", metav1.DeleteOptions{}) })
	// The admin's credentials, impersonating a user with no role.
	kc := kubeconfig(t, cfg)
	loaded, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	loaded.AuthInfos["admin"].Impersonate = "jane"
	if err := clientcmd.WriteToFile(*loaded, kc); err != nil {
		t.Fatal(err)
	}
	for verb, args := range map[string][]string{
		"release": {"release", "act-denied"},
		"veto":    {"veto", "act-denied"},
		"repair":  {"repair", "act-denied"},
	} {
		_, err := run(t, append([]string{"--kubeconfig", kc}, args...)...)
		want := `you may not ` + verb + ` node act-denied: it needs the permission "` + verb + `" on nodes.nodemend.dev/act-denied, which you do not have`
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "nodemend-repair-operator") {
			t.Errorf("%s as jane: %v, want %q", verb, err, want)
		}
	}
	n, err := core.CoreV1().Nodes().Get(t.Context(), "act-denied", metav1.GetOptions{})
	if err != nil || len(n.Annotations) != 0 {
		t.Errorf("node after the refusals: %v %v", n.Annotations, err)
	}
}

// The chart's admission policy says which permission a write lacks; the
// command turns that into the same advice as its own check.
func TestAdmissionDenialNamesThePermission(t *testing.T) {
	denied := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", errors.New(
		"ValidatingAdmissionPolicy 'nodemend-person-acts' with binding 'nodemend-person-acts' denied request: writing nodemend.dev/release on node n1 "+
			"needs the permission release on nodes.nodemend.dev/n1 (ClusterRole nodemend-repair-operator); jane does not have it"))
	if err := explainAct(denied, "n1", "release"); !strings.Contains(err.Error(), `needs the permission "release" on nodes.nodemend.dev/n1`) {
		t.Errorf("explainAct = %v", err)
	}
	other := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("RBAC says no"))
	if err := explainAct(other, "n1", "release"); !strings.Contains(err.Error(), "RBAC") {
		t.Errorf("explainAct = %v", err)
	}
}
