package ladder

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/policy"
)

func actions(l []policy.Rung) string {
	var s []string
	for _, r := range l {
		s = append(s, string(r.Action))
	}
	return strings.Join(s, ",")
}

func TestResolveDefaults(t *testing.T) {
	def := policy.Default()
	cases := []struct {
		engine bool
		reason string
		want   string
	}{
		{true, health.ReasonNvidiaXID48Error, "Replace"},
		{true, "KernelDeadlock", "Replace"},
		{false, "KernelDeadlock", "Reboot,Quarantine"},
		{false, health.ReasonNvidiaXID79Error, "Reboot,Quarantine"},
		{false, health.ReasonNvidiaXID48Error, "ResetAccelerator,Reboot,Quarantine"},
		{false, health.ReasonNvidiaDoubleBitError, "ResetAccelerator,Reboot,Quarantine"},
		// Each vendor's remedy (reasons.yaml): a row remap that failed and
		// a Neuron hardware error go to a person at once; DCGM's recovery
		// actions are followed; AMD's uncorrectable errors get the reset the
		// agent can do, a failed driver reset a reboot.
		{false, health.ReasonNvidiaXID64Error, "Quarantine"},
		{true, health.ReasonNvidiaXID64Error, "Replace"},
		{false, health.ReasonNvidiaXID54Error, "Quarantine"},
		{false, health.ReasonDCGMHealthCode125, "ResetAccelerator,Reboot,Quarantine"},
		{false, health.ReasonDCGMHealthCode126, "Reboot,Quarantine"},
		{false, health.ReasonDCGMHealthCode128, "ResetAccelerator,Reboot,Quarantine"},
		{false, health.ReasonDCGMHealthCode80, "Quarantine"},
		{false, health.ReasonNeuronHBMUncorrectableError, "Quarantine"},
		{false, health.ReasonNeuronDeviceCountMismatch, "Reboot,Quarantine"},
		{false, health.ReasonAMDGPUUncorrectableError, "ResetAccelerator,Reboot,Quarantine"},
		{false, health.ReasonAMDGPUHardwareError, "ResetAccelerator,Reboot,Quarantine"},
		{false, health.ReasonAMDGPUResetFailed, "Reboot,Quarantine"},
	}
	for _, c := range cases {
		if got := actions(Resolve(def, c.engine, c.reason)); got != c.want {
			t.Errorf("Resolve(default, engine=%v, %s) = %s, want %s", c.engine, c.reason, got, c.want)
		}
	}
	// A policy's own ladder is used as written, and ends in Quarantine when
	// it ends in no terminal rung.
	own := def
	own.Ladder = []policy.Rung{policy.NewRung(v1alpha1.LadderReboot)}
	if got := actions(Resolve(own, true, "")); got != "Reboot,Quarantine" {
		t.Errorf("own ladder: %s", got)
	}
	own.Ladder = []policy.Rung{policy.NewRung(v1alpha1.LadderReplace)}
	if got := actions(Resolve(own, false, "")); got != "Replace" {
		t.Errorf("action Replace on a node no engine owns: %s", got)
	}
}

func TestNextAndStartAt(t *testing.T) {
	reboot := policy.NewRung(v1alpha1.LadderReboot)
	reboot.Attempts = 2
	l := []policy.Rung{policy.NewRung(v1alpha1.LadderResetAccelerator), reboot, policy.NewRung(v1alpha1.LadderQuarantine)}
	walk := []Position{First}
	for range 4 {
		walk = append(walk, Next(l, walk[len(walk)-1]))
	}
	want := []Position{{Rung: 0, Attempt: 1}, {Rung: 1, Attempt: 1}, {Rung: 1, Attempt: 2}, {Rung: 2, Attempt: 1}, {Rung: 2, Attempt: 1}}
	for i := range want {
		if walk[i] != want[i] {
			t.Fatalf("walk %v, want %v", walk, want)
		}
	}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rec := &Record{RungPosition: Position{Rung: 1, Attempt: 1}, Action: v1alpha1.LadderReboot, Condition: "KernelReady", Returned: metav1.NewTime(t0), Until: metav1.NewTime(t0.Add(time.Hour))}
	if p, ok := StartAt(l, rec, "KernelReady", t0.Add(59*time.Minute)); !ok || p != (Position{Rung: 1, Attempt: 2}) {
		t.Errorf("within the window: %v %v", p, ok)
	}
	if p, ok := StartAt(l, rec, "KernelReady", t0.Add(time.Hour)); ok || p != First {
		t.Errorf("window over: %v %v", p, ok)
	}
	if p, ok := StartAt(l, rec, "StorageReady", t0); ok || p != First {
		t.Errorf("another condition: %v %v", p, ok)
	}
	// A ladder that got shorter since: the last rung.
	if p := Next(l[:1], Position{Rung: 2, Attempt: 1}); p != (Position{Rung: 0, Attempt: 1}) {
		t.Errorf("beyond a shorter ladder: %v", p)
	}
}

func TestJudge(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	reboot := Attempt{RungPosition: First, Action: v1alpha1.LadderReboot, Of: 1, Order: "n1-reboot-x", BootID: "b1", Started: metav1.NewTime(t0), Timeout: metav1.Duration{Duration: 15 * time.Minute}}
	reset := reboot
	reset.Action = v1alpha1.LadderResetAccelerator
	reset.Timeout = metav1.Duration{Duration: 5 * time.Minute}
	order := func(p v1alpha1.RemediationPhase) *v1alpha1.NodeRemediation {
		return &v1alpha1.NodeRemediation{ObjectMeta: metav1.ObjectMeta{Name: "o"}, Status: v1alpha1.NodeRemediationStatus{Phase: p, Message: "m"}}
	}
	verified := reboot
	verified.Verified = metav1.NewTime(t0.Add(3 * time.Minute))
	cases := []struct {
		name string
		a    Attempt
		o    Observation
		want Verdict
	}{
		{"waiting", reboot, Observation{Now: t0.Add(time.Minute), BootID: "b1", Order: order(v1alpha1.RemediationAccepted)}, Wait},
		{"new boot, not healthy yet", reboot, Observation{Now: t0.Add(3 * time.Minute), BootID: "b2", KubeletReady: true}, Rebooted},
		{"new boot seen before, still waiting", verified, Observation{Now: t0.Add(4 * time.Minute), BootID: "b2", KubeletReady: true}, Wait},
		{"new boot and healthy", reboot, Observation{Now: t0.Add(4 * time.Minute), BootID: "b2", TriggerHealthy: true, KubeletReady: true}, Repaired},
		{"new boot, kubelet not ready", reboot, Observation{Now: t0.Add(4 * time.Minute), BootID: "b2", TriggerHealthy: true}, Rebooted},
		{"new boot, unhealthy past the timeout", verified, Observation{Now: t0.Add(15 * time.Minute), BootID: "b2", KubeletReady: true}, Failed},
		{"no new boot within the timeout", reboot, Observation{Now: t0.Add(15 * time.Minute), BootID: "b1", Order: order(v1alpha1.RemediationAccepted), TriggerHealthy: true, KubeletReady: true}, Failed},
		// The agent's word alone never verifies a reboot.
		{"agent says succeeded, boot unchanged", reboot, Observation{Now: t0.Add(time.Minute), BootID: "b1", Order: order(v1alpha1.RemediationSucceeded), TriggerHealthy: true, KubeletReady: true}, Wait},
		{"agent refused", reboot, Observation{Now: t0.Add(time.Minute), BootID: "b1", Order: order(v1alpha1.RemediationRefused)}, Failed},
		{"reboot failed", reboot, Observation{Now: t0.Add(time.Minute), BootID: "b1", Order: order(v1alpha1.RemediationFailed)}, Failed},
		{"reset done and healthy", reset, Observation{Now: t0.Add(time.Minute), BootID: "b1", Order: order(v1alpha1.RemediationSucceeded), TriggerHealthy: true, KubeletReady: true}, Repaired},
		{"reset done, condition not yet healthy", reset, Observation{Now: t0.Add(time.Minute), BootID: "b1", Order: order(v1alpha1.RemediationSucceeded), KubeletReady: true}, Wait},
		{"reset done, condition never healthy", reset, Observation{Now: t0.Add(5 * time.Minute), BootID: "b1", Order: order(v1alpha1.RemediationSucceeded), KubeletReady: true}, Failed},
		{"reset refused: GPU busy", reset, Observation{Now: t0.Add(time.Minute), BootID: "b1", Order: order(v1alpha1.RemediationRefused)}, Failed},
		{"reset healthy condition but no report", reset, Observation{Now: t0.Add(time.Minute), BootID: "b1", TriggerHealthy: true, KubeletReady: true}, Wait},
		{"reset never picked up", reset, Observation{Now: t0.Add(5 * time.Minute), BootID: "b1"}, Failed},
	}
	for _, c := range cases {
		if got := Judge(c.a, c.o); got.Verdict != c.want {
			t.Errorf("%s: %+v, want %s", c.name, got, c.want)
		}
	}
}
