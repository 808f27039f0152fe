package cli

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/pkg/cli/fleet"
	"nodemend.dev/nodemend/pkg/repair/ladder"
	"nodemend.dev/nodemend/pkg/repair/record"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
)

// TestStatusShowsTheLadder: a node waiting for its second reboot and a
// quarantined one, annotated as the controller writes them
// (record.Start, Remediate, Quarantine), show their rung and
// attempt in `kubectl mend status`, as JSON and in the table.
func TestStatusShowsTheLadder(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	fault := condition("KernelReady", corev1.ConditionFalse, "KernelBug", "BUG: unable to handle page fault", now.Add(-30*time.Minute))
	base := &corev1.Node{}
	since := unhealthy.Since{}
	reboot := ladder.Attempt{RungPosition: ladder.Position{Rung: 0, Attempt: 2}, Action: "Reboot", Of: 2,
		Order: "sl-reboot-x-2", BootID: "boot-1", Started: metav1.NewTime(now.Add(-3 * time.Minute)), Timeout: metav1.Duration{Duration: 15 * time.Minute}}
	rem := record.Remediate(record.Start(record.Record{}, since, fault, "gpu-fleet", reboot, now.Add(-20*time.Minute), nil), reboot)
	remediating := record.Apply(base, record.Record{}, rem)
	quarantine := ladder.Attempt{RungPosition: ladder.Position{Rung: 1, Attempt: 1}, Action: "Quarantine", Of: 1, Started: metav1.NewTime(now.Add(-time.Minute))}
	q := record.Quarantine(record.Start(record.Record{}, since, fault, "gpu-fleet", quarantine, now.Add(-40*time.Minute), nil), quarantine, true, now.Add(-time.Minute))
	quarantined := record.Apply(base, record.Record{}, q)
	labels := map[string]string{"sl": "yes"}
	ready := readyCondition(corev1.ConditionTrue, now.Add(-time.Hour))
	createNode(t, testNode{name: "sl-reboot", labels: labels, annotations: remediating.Annotations, taints: remediating.Spec.Taints,
		conditions: []corev1.NodeCondition{ready, fault}})
	createNode(t, testNode{name: "sl-quarantined", labels: labels, annotations: quarantined.Annotations, taints: quarantined.Spec.Taints,
		conditions: []corev1.NodeCondition{ready, fault}})

	_, rows := statusJSON(t, "sl=yes")
	if n := rows["sl-reboot"]; n.State != fleet.Remediating || n.Rung != "Reboot 2/2" || !strings.Contains(n.Detail, "NodeRemediation sl-reboot-x-2") {
		t.Errorf("sl-reboot: %+v, want Remediating, rung Reboot 2/2, its order", n)
	}
	if n := rows["sl-quarantined"]; n.State != fleet.Quarantined || n.Rung != "Quarantine 1/1" || !strings.Contains(n.Detail, "kubectl mend release sl-quarantined") {
		t.Errorf("sl-quarantined: %+v, want Quarantined, rung Quarantine 1/1, how to release", n)
	}

	out, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "status", "-l", "sl=yes")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"remediating (Reboot 2/2): Reboot ordered", "quarantined: quarantined"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
