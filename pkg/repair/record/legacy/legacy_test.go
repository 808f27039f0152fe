package legacy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
)

// Fixture reads testdata/NAME.json: a Node as the previous release's
// controller left it in one phase (written by that release's
// pkg/repair/record functions, in the order its controller called them).
func Fixture(t testing.TB, name string) *corev1.Node {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{}
	if err := json.Unmarshal(b, n); err != nil {
		t.Fatal(err)
	}
	return n
}

// at is a time as the record keeps it: whole seconds.
func at(s string) metav1.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return metav1.NewTime(t.Truncate(time.Second))
}

// Each phase the previous release wrote converts to the record that says
// the same, field by field.
func TestConvertEveryPhase(t *testing.T) {
	kernel := &v1alpha1.RepairTrigger{Type: "KernelReady", Status: "False", Reason: "KernelDeadlock"}
	gpu := &v1alpha1.RepairTrigger{Type: "AcceleratedHardwareReady", Status: "False", Reason: "NvidiaXIDError"}
	kSince := map[corev1.NodeConditionType]metav1.Time{"KernelReady": at("2026-03-01T12:00:00Z")}
	gSince := map[corev1.NodeConditionType]metav1.Time{"AcceleratedHardwareReady": at("2026-03-01T12:00:00Z")}
	started := at("2026-03-01T12:30:00Z")
	replace := &v1alpha1.RungAttempt{RungPosition: v1alpha1.RungPosition{Rung: 0, Attempt: 1}, Action: v1alpha1.LadderReplace, Of: 1,
		Started: at("2026-03-01T12:30:00.123456789Z")}
	reboot := &v1alpha1.RungAttempt{RungPosition: v1alpha1.RungPosition{Rung: 1, Attempt: 1}, Action: v1alpha1.LadderReboot, Of: 2,
		Order: "remediating-reboot-f8b8b29b9e", BootID: "7f3e2d1c-boot-1", Started: at("2026-03-01T12:39:01.11111111Z"),
		Timeout: metav1.Duration{Duration: 10 * time.Minute}}
	verified := *reboot
	verified.Verified = at("2026-03-01T12:42:01.111111115Z")
	quarantine := &v1alpha1.RungAttempt{RungPosition: v1alpha1.RungPosition{Rung: 2, Attempt: 1}, Action: v1alpha1.LadderQuarantine, Of: 1,
		Started: at("2026-03-01T13:01:00.123456789Z")}
	target := &v1alpha1.RepairTarget{Backend: "karpenter", APIVersion: "karpenter.sh/v1", Kind: "NodeClaim", Name: "default-x7k2p",
		UID: "0b8a4c2e-1f3d-4e5a-9b6c-7d8e9f0a1b2c"}
	draining := v1alpha1.RepairRecord{Phase: v1alpha1.RepairPhaseDraining, UnhealthySince: kSince, Trigger: kernel, Policy: "default", Started: started, Rung: replace}
	terminating := draining
	terminating.Phase, terminating.Drained, terminating.Target = v1alpha1.RepairPhaseTerminating, at("2026-03-01T12:34:00Z"), target
	failed := terminating
	failed.Failed = at("2026-03-01T12:50:00Z")
	remediating := v1alpha1.RepairRecord{Phase: v1alpha1.RepairPhaseRemediating, UnhealthySince: gSince, Trigger: gpu, Policy: "gpu", Started: started, Rung: reboot}
	decided := remediating
	decided.Rung = &v1alpha1.RungAttempt{RungPosition: v1alpha1.RungPosition{Rung: 1, Attempt: 2}, Action: v1alpha1.LadderReboot, Of: 2,
		Started: at("2026-03-01T12:50:00.123456789Z"), Timeout: metav1.Duration{Duration: 10 * time.Minute}}
	ver := remediating
	ver.Rung = &verified
	quarantined := v1alpha1.RepairRecord{Phase: v1alpha1.RepairPhaseQuarantined, UnhealthySince: kSince, Trigger: kernel, Policy: "default",
		Started: started, Rung: quarantine, Quarantined: at("2026-03-01T13:01:00Z"), Cordoned: true}
	healthy := quarantined
	healthy.HealthySince = at("2026-03-01T13:20:00Z")
	personCordon := quarantined
	personCordon.Cordoned = false
	preladder := draining
	preladder.Rung = nil
	want := map[string]v1alpha1.RepairRecord{
		"unhealthy":                 {UnhealthySince: kSince},
		"draining":                  draining,
		"draining-vetoed":           draining,
		"draining-preladder":        preladder,
		"terminating":               terminating,
		"terminating-failed":        failed,
		"remediating":               remediating,
		"remediating-decided":       decided,
		"remediating-verified":      ver,
		"quarantined":               healthy,
		"quarantined-person-cordon": personCordon,
		"quarantined-released":      quarantined,
		"returned-ladder": {Ladder: &v1alpha1.LadderRecord{RungPosition: v1alpha1.RungPosition{Rung: 1, Attempt: 1}, Action: v1alpha1.LadderReboot,
			Condition: "AcceleratedHardwareReady", Returned: at("2026-03-01T12:44:00.123456831Z"), Until: at("2026-03-01T13:44:00.123456831Z")}},
	}
	files, _ := filepath.Glob("testdata/*.json")
	if len(files) != len(want) {
		t.Fatalf("%d fixtures, %d expectations", len(files), len(want))
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			n := Fixture(t, name)
			if !Present(n.Annotations) {
				t.Fatal("not recognised as the previous release's")
			}
			got, err := Convert(n)
			if err != nil {
				t.Fatal(err)
			}
			w.Version = v1alpha1.RepairRecordVersion
			if !equality.Semantic.DeepEqual(got, w) {
				t.Errorf("converted\n%+v\nwant\n%+v", got, w)
			}
			if InRepair(n.Annotations) != got.InRepair() {
				t.Errorf("InRepair %v, record %v", InRepair(n.Annotations), got.InRepair())
			}
		})
	}
}

// A value the previous release could not read is not guessed at now.
func TestConvertRefusesWhatDoesNotParse(t *testing.T) {
	for name, edit := range map[string]func(map[string]string){
		"bad time":  func(a map[string]string) { a[Started] = "noon" },
		"bad since": func(a map[string]string) { a[UnhealthySince] = "{" },
		"bad rung timeout": func(a map[string]string) {
			a[Rung] = strings.Replace(a[Rung], `"started"`, `"timeout":"soon","started"`, 1)
		},
		"bad target":          func(a map[string]string) { a[Target] = `{"kind":"NodeClaim"}` },
		"unknown phase":       func(a map[string]string) { a[Phase] = "Rebooting" },
		"phase without start": func(a map[string]string) { delete(a, Started) },
	} {
		t.Run(name, func(t *testing.T) {
			n := Fixture(t, "terminating")
			edit(n.Annotations)
			if r, err := Convert(n); err == nil {
				t.Errorf("accepted: %+v", r)
			}
		})
	}
}

// The trigger's type survives a missing reason: the taint names it.
func TestConvertTakesTheConditionFromTheTaint(t *testing.T) {
	n := Fixture(t, "draining")
	delete(n.Annotations, Reason)
	r, err := Convert(n)
	if err != nil || r.Trigger == nil || r.Trigger.Type != "KernelReady" {
		t.Fatalf("%+v %v", r.Trigger, err)
	}
}
