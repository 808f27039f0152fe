package controller_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/repair/controller"
	"nodemend.dev/nodemend/pkg/repair/record"
	"nodemend.dev/nodemend/pkg/repair/record/legacy"
)

// The previous release kept a repair in thirteen annotations. A controller
// of this release, started on nodes as that release left them in every
// phase (pkg/repair/record/legacy/testdata, written by that release's
// code), converts each to the record in its first write, removes the old
// keys in that write, and carries the repair on from where it stood.

// epoch is when the fixtures were written: their times are on 1 March
// 2026 between 12:00 and 13:44.
func epoch(hhmm string) time.Time {
	t, err := time.Parse(time.RFC3339, "2026-03-01T"+hhmm+":00Z")
	if err != nil {
		panic(err)
	}
	return t
}

// upgrade prepares a controller that has not started, with its clock at
// now (the fixture's time).
func upgrade(t *testing.T, now time.Time, mutate ...func(*controller.Options)) *harness {
	t.Helper()
	h := newHarness(t, mutate...)
	h.clock.SetTime(now)
	h.t0 = now
	return h
}

// run starts the controller.
func (h *harness) run() {
	m := h.manager(managerSpec{cfg: restCfg, log: testr.NewWithOptions(h.t, testr.Options{Verbosity: 0})})
	h.reg, h.stop = m.reg, m.stop
}

// legacyNode creates the fixture's node — its annotations, taints and
// cordon as the previous release wrote them — with the given boot ID and
// conditions (Ready True besides).
func (h *harness) legacyNode(fixture, bootID string, conds ...corev1.NodeCondition) *corev1.Node {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "record", "legacy", "testdata", fixture+".json"))
	if err != nil {
		h.t.Fatal(err)
	}
	f := &corev1.Node{}
	if err := json.Unmarshal(b, f); err != nil {
		h.t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.Name, Annotations: f.Annotations, Labels: map[string]string{"upgrade": "yes"}},
		Spec: corev1.NodeSpec{Taints: f.Spec.Taints, Unschedulable: f.Spec.Unschedulable}}
	if err := k8s.Create(h.ctx, n); err != nil {
		h.t.Fatal(err)
	}
	n.Status.NodeInfo.BootID = bootID
	n.Status.Conditions = append([]corev1.NodeCondition{repairtest.Condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", h.clock.Now().Add(-time.Hour))}, conds...)
	if err := k8s.Status().Update(h.ctx, n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// targetSelf points a fixture's recorded target at the node itself (in the
// previous release's format), so that its deletion can be watched.
func (h *harness) targetSelf(n *corev1.Node) {
	h.t.Helper()
	v := fmt.Sprintf(`{"backend":"node","apiVersion":"v1","kind":"Node","name":%q,"uid":%q}`, n.Name, n.UID)
	h.annotate(n.Name, legacy.Target, &v)
}

// migrated: the node carries the record and none of the old keys.
func (h *harness) migrated(name string) bool {
	n := h.get(name)
	if n == nil {
		return false
	}
	for _, k := range legacy.Keys() {
		if _, ok := n.Annotations[k]; ok {
			return false
		}
	}
	_, ok := n.Annotations[record.StateAnnotation]
	return ok
}

// healthy adds four healthy nodes, so that the gate lets one repair start.
func (h *harness) healthy(n string) {
	for i := range 4 {
		h.node(fmt.Sprintf("%s-ok-%d", n, i))
	}
}

// gpuPolicy is the ladder the "gpu" fixtures were written under.
func (h *harness) gpuPolicy() {
	h.policy("gpu", v1alpha1.NodeRepairPolicySpec{Ladder: []v1alpha1.LadderRung{
		{Action: v1alpha1.LadderResetAccelerator},
		{Action: v1alpha1.LadderReboot, Attempts: 2, Timeout: &metav1.Duration{Duration: 10 * time.Minute}},
		{Action: v1alpha1.LadderQuarantine},
	}})
}

func kernelFalse(ltt time.Time) corev1.NodeCondition {
	return repairtest.Condition("KernelReady", corev1.ConditionFalse, "KernelDeadlock", ltt)
}

func gpuFalse(ltt time.Time) corev1.NodeCondition {
	return repairtest.Condition("AcceleratedHardwareReady", corev1.ConditionFalse, "NvidiaXIDError", ltt)
}

func TestUpgradeResumesEveryPhase(t *testing.T) {
	t.Run("unhealthy: the toleration's clock goes on", func(t *testing.T) {
		h := upgrade(t, epoch("12:10"))
		h.healthy("unhealthy")
		// The condition moved its transition time since; the recorded
		// first sighting (12:00) still starts the toleration.
		h.legacyNode("unhealthy", "b1", kernelFalse(epoch("12:05")))
		h.run()
		h.eventually("migrated", func() bool { return h.migrated("unhealthy") })
		if got := h.since("unhealthy"); got != `{"KernelReady":"2026-03-01T12:00:00Z"}` {
			t.Fatalf("since %s", got)
		}
		h.advanceTo(epoch("12:30").Add(-time.Second))
		h.consistently("tolerated until 12:30", func() bool { return h.untouched("unhealthy") })
		h.advanceTo(epoch("12:30"))
		h.waitEvent("unhealthy", "NodeRepairStarted", "since 2026-03-01T12:00:00Z")
	})

	for _, f := range []string{"draining", "draining-preladder"} {
		t.Run(f+": drained, handed over, deleted", func(t *testing.T) {
			h := upgrade(t, epoch("12:31"))
			h.legacyNode(f, "b1", kernelFalse(epoch("12:00")))
			h.run()
			h.eventually(f+" gone", func() bool { return h.gone(f) })
			h.waitEvent(f, "NodeRepairHandedOver", "deleting Node "+f)
			h.waitEvent(f, "NodeRepairSucceeded", "KernelReady")
		})
	}

	t.Run("draining-vetoed: stays halted", func(t *testing.T) {
		h := upgrade(t, epoch("12:31"))
		h.legacyNode("draining-vetoed", "b1", kernelFalse(epoch("12:00")))
		h.run()
		h.eventually("migrated", func() bool { return h.migrated("draining-vetoed") })
		h.waitEvent("draining-vetoed", "NodeRepairBlocked", "INC-42 investigating")
		h.advance(time.Hour)
		h.consistently("halted", func() bool {
			return h.phase("draining-vetoed") == string(record.PhaseDraining) && h.tainted("draining-vetoed")
		})
	})

	for _, f := range []string{"terminating", "terminating-failed"} {
		t.Run(f+": its target deleted", func(t *testing.T) {
			h := upgrade(t, epoch("12:35"))
			n := h.legacyNode(f, "b1", kernelFalse(epoch("12:00")))
			h.targetSelf(n)
			h.run()
			h.eventually(f+" gone", func() bool { return h.gone(f) })
			h.waitEvent(f, "NodeRepairTargetDeleted", "deleted Node "+f)
			if got := len(h.events(f, "NodeRepairFailed")); got != 0 {
				t.Errorf("%d failures reported (the previous release had reported it, or it did not fail)", got)
			}
		})
	}

	t.Run("remediating: the recorded order, then back in service", func(t *testing.T) {
		h := upgrade(t, epoch("12:40"), withLadder)
		h.gpuPolicy()
		h.legacyNode("remediating", "7f3e2d1c-boot-1", gpuFalse(epoch("12:00")))
		h.run()
		h.eventually("the recorded order created", func() bool {
			o := h.orders("remediating")
			return len(o) == 1 && o[0].Name == "remediating-reboot-f8b8b29b9e" && o[0].Spec.BootID == "7f3e2d1c-boot-1"
		})
		if !h.migrated("remediating") {
			t.Fatal("not migrated")
		}
		if err := repairtest.Reboot(h.ctx, k8s, "remediating", "8a9b0c1d-boot-2"); err != nil {
			t.Fatal(err)
		}
		h.waitEvent("remediating", "NodeRebootVerified", "now 8a9b0c1d-boot-2")
		h.heal("remediating", "AcceleratedHardwareReady")
		h.waitEvent("remediating", "NodeReturnedToService", "rung 2 of 3, attempt 1 of 2")
		if st := h.record("remediating"); st.InRepair() || h.tainted("remediating") || st.Ladder == nil || st.Ladder.Rung != 1 {
			t.Errorf("after the return: %+v, tainted %v", st, h.tainted("remediating"))
		}
		if got := len(h.orders("remediating")); got != 1 {
			t.Errorf("%d orders", got)
		}
	})

	t.Run("remediating-verified: waits for health, then back in service", func(t *testing.T) {
		h := upgrade(t, epoch("12:43"), withLadder)
		h.gpuPolicy()
		h.legacyNode("remediating-verified", "8a9b0c1d-boot-2", gpuFalse(epoch("12:00")))
		h.run()
		h.eventually("migrated", func() bool { return h.migrated("remediating-verified") })
		h.consistently("waiting for the condition", func() bool { return h.phase("remediating-verified") == string(record.PhaseRemediating) })
		if got := len(h.events("remediating-verified", "NodeRebootVerified")); got != 0 {
			t.Errorf("the verification reported again (%d)", got)
		}
		h.heal("remediating-verified", "AcceleratedHardwareReady")
		h.waitEvent("remediating-verified", "NodeReturnedToService", "")
	})

	t.Run("remediating-decided: the decided attempt carried out", func(t *testing.T) {
		h := upgrade(t, epoch("12:51"), withLadder)
		h.gpuPolicy()
		h.legacyNode("remediating-decided", "7f3e2d1c-boot-1", gpuFalse(epoch("12:00")))
		h.run()
		h.eventually("the second attempt ordered", func() bool {
			a := h.attempt("remediating-decided")
			return a != nil && a.Order != "" && a.Attempt == 2 && len(h.orders("remediating-decided")) == 1
		})
		if !h.migrated("remediating-decided") {
			t.Fatal("not migrated")
		}
	})

	t.Run("quarantined: released after healthyFor, uncordoned", func(t *testing.T) {
		h := upgrade(t, epoch("13:30"), withLadder)
		h.legacyNode("quarantined", "b1", repairtest.Condition("KernelReady", corev1.ConditionTrue, "KernelIsReady", epoch("13:19")))
		h.run()
		h.eventually("migrated", func() bool { return h.migrated("quarantined") })
		st := h.record("quarantined")
		if st.Phase != record.PhaseQuarantined || !st.Cordoned || st.HealthySince.Time.IsZero() {
			t.Fatalf("record %+v", st.Record)
		}
		h.advanceTo(epoch("13:20").Add(24*time.Hour - time.Second))
		h.consistently("quarantined until healthy for 24h", func() bool { return h.phase("quarantined") == string(record.PhaseQuarantined) })
		h.advanceTo(epoch("13:20").Add(24 * time.Hour))
		h.eventually("released", func() bool { return h.untouched("quarantined") && !h.get("quarantined").Spec.Unschedulable })
	})

	t.Run("quarantined-person-cordon: released, the person's cordon kept", func(t *testing.T) {
		h := upgrade(t, epoch("13:30"), withLadder)
		h.legacyNode("quarantined-person-cordon", "b1", repairtest.Condition("KernelReady", corev1.ConditionTrue, "KernelIsReady", epoch("13:19")))
		h.run()
		h.eventually("migrated", func() bool { return h.migrated("quarantined-person-cordon") })
		reason := "fixed"
		h.annotate("quarantined-person-cordon", record.ReleaseAnnotation, &reason)
		h.eventually("released", func() bool { return h.untouched("quarantined-person-cordon") })
		if !h.get("quarantined-person-cordon").Spec.Unschedulable {
			t.Error("a person's cordon lifted")
		}
	})

	t.Run("quarantined-released: the person's release carried out", func(t *testing.T) {
		h := upgrade(t, epoch("14:01"), withLadder)
		h.legacyNode("quarantined-released", "b1", repairtest.Condition("KernelReady", corev1.ConditionTrue, "KernelIsReady", epoch("13:50")))
		h.run()
		h.eventually("released", func() bool {
			return h.untouched("quarantined-released") && !h.get("quarantined-released").Spec.Unschedulable
		})
		h.waitEvent("quarantined-released", "NodeQuarantineReleased", "GPU reseated, INC-4711")
		if _, ok := h.get("quarantined-released").Annotations[record.ReleaseAnnotation]; ok {
			t.Error("the release was not consumed")
		}
	})

	t.Run("returned-ladder: the fault back within the window continues the ladder", func(t *testing.T) {
		h := upgrade(t, epoch("13:00"), withLadder)
		h.gpuPolicy()
		h.healthy("returned-ladder")
		h.legacyNode("returned-ladder", "b2", gpuFalse(epoch("12:59")))
		h.run()
		h.waitEvent("returned-ladder", "NodeRepairStarted", "rung 2 of 3, attempt 2 of 2")
		if !h.migrated("returned-ladder") {
			t.Fatal("not migrated")
		}
	})
}

// A bad value in the previous release's annotations is not guessed at: the
// node is left alone and the problem reported, as that release did.
func TestUpgradeLeavesAnUnreadableNodeAlone(t *testing.T) {
	h := upgrade(t, epoch("12:31"))
	n := h.legacyNode("draining", "b1", kernelFalse(epoch("12:00")))
	bad := strings.Replace(n.Annotations[legacy.Rung], `"started"`, `"timeout":"soon","started"`, 1)
	h.annotate("draining", legacy.Rung, &bad)
	h.run()
	h.waitEvent("draining", "NodeRepairStateInvalid", "timeout")
	h.advance(time.Hour)
	h.consistently("left alone", func() bool { n := h.get("draining"); return n != nil && n.Annotations[legacy.Phase] == "Draining" })
}
