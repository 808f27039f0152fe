package remediate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
)

func order(action v1alpha1.HostAction, boot string, created time.Time, deadline time.Duration) *v1alpha1.NodeRemediation {
	return &v1alpha1.NodeRemediation{
		ObjectMeta: metav1.ObjectMeta{Name: "o", CreationTimestamp: metav1.NewTime(created)},
		Spec: v1alpha1.NodeRemediationSpec{NodeName: "n1", Action: action, BootID: boot, ActiveDeadlineSeconds: int64(deadline / time.Second),
			Reason: "KernelReady=False/KernelDeadlock"},
	}
}

// nodeUnderRepair is n1 as the API server has it during a repair: tainted,
// on boot-a, its kernel fault reported.
func nodeUnderRepair() *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: RepairTaintKey, Effect: corev1.TaintEffectNoSchedule}}}}
	n.Status.NodeInfo.BootID = "boot-a"
	n.Status.Conditions = []corev1.NodeCondition{{Type: "Ready", Status: corev1.ConditionTrue}, {Type: "KernelReady", Status: corev1.ConditionFalse}}
	return n
}

func TestJudge(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	facts := func(now time.Time) Facts {
		return Facts{NodeName: "n1", BootID: "boot-a", Now: now, MaxSkew: 30 * time.Second,
			Enabled: map[v1alpha1.HostAction]bool{v1alpha1.HostReboot: true, v1alpha1.HostResetAccelerator: true},
			Node:    nodeUnderRepair(), Rebooted: map[string]string{"boot-0": "earlier"}}
	}
	accepted := func(o *v1alpha1.NodeRemediation, boot string) *v1alpha1.NodeRemediation {
		o.Status.Phase, o.Status.BootID = v1alpha1.RemediationAccepted, boot
		return o
	}
	cases := []struct {
		name  string
		o     *v1alpha1.NodeRemediation
		f     Facts
		want  Verdict
		phase v1alpha1.RemediationPhase
		msg   string
	}{
		{"fresh order", order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute), facts(t0.Add(time.Second)), Act, "", ""},
		{"another node's", func() *v1alpha1.NodeRemediation {
			o := order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute)
			o.Spec.NodeName = "n2"
			return o
		}(), facts(t0), Ignore, "", ""},
		{"past deadline", order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute), facts(t0.Add(5 * time.Minute)), Finish, v1alpha1.RemediationRefused, "past its deadline"},
		// The skew bound works against acting late: an agent whose clock
		// may be 30s behind stops 30s before the deadline.
		{"within the skew bound of the deadline", order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute), facts(t0.Add(4*time.Minute + 31*time.Second)), Finish, v1alpha1.RemediationRefused, "past its deadline"},
		{"just before the skew bound", order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute), facts(t0.Add(4*time.Minute + 29*time.Second)), Act, "", ""},
		{"agent clock far behind the API server", order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute), facts(t0.Add(-time.Minute)), Finish, v1alpha1.RemediationRefused, "skew bound"},
		{"agent clock slightly behind", order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute), facts(t0.Add(-10 * time.Second)), Act, "", ""},
		{"another boot", order(v1alpha1.HostReboot, "boot-0", t0, 5*time.Minute), facts(t0), Finish, v1alpha1.RemediationRefused, "it has rebooted since"},
		{"mechanism off", order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute), func() Facts {
			f := facts(t0)
			f.Enabled[v1alpha1.HostReboot] = false
			f.WhyOff = map[v1alpha1.HostAction]string{v1alpha1.HostReboot: "--reboot-mechanism=none"}
			return f
		}(), Finish, v1alpha1.RemediationRefused, "Reboot is off on this node: --reboot-mechanism=none"},
		{"no boot ID", order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute), func() Facts { f := facts(t0); f.BootID = ""; return f }(), Finish, v1alpha1.RemediationRefused, "boot ID cannot be read"},
		{"accepted, then rebooted", accepted(order(v1alpha1.HostReboot, "boot-0", t0, 5*time.Minute), "boot-0"), facts(t0.Add(time.Hour)), Finish, v1alpha1.RemediationSucceeded, "rebooted: boot boot-0, now boot boot-a"},
		{"accepted, same boot: never again", accepted(order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute), "boot-a"), facts(t0.Add(time.Second)), Finish, v1alpha1.RemediationFailed, "not tried again"},
		{"reset accepted, same boot: never again", accepted(order(v1alpha1.HostResetAccelerator, "boot-a", t0, 5*time.Minute), "boot-a"), facts(t0.Add(time.Second)), Finish, v1alpha1.RemediationFailed, "not tried again"},
		{"a second reboot in the same boot", order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute), func() Facts {
			f := facts(t0)
			f.Rebooted["boot-a"] = "first"
			return f
		}(), Finish, v1alpha1.RemediationRefused, "duplicate: a reboot was already accepted during boot boot-a (order first)"},
		{"a reset after the boot's reboot", order(v1alpha1.HostResetAccelerator, "boot-a", t0, 5*time.Minute), func() Facts {
			f := facts(t0)
			f.Rebooted["boot-a"] = "first"
			return f
		}(), Act, "", ""},
		{"Node unread", order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute), func() Facts { f := facts(t0); f.Node = nil; return f }(),
			Finish, v1alpha1.RemediationRefused, "could not read its Node"},
		{"Node not under repair", order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute), func() Facts { f := facts(t0); f.Node.Spec.Taints = nil; return f }(),
			Finish, v1alpha1.RemediationRefused, "does not carry the repair taint"},
		{"kubelet reports another boot", order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute), func() Facts {
			f := facts(t0)
			f.Node.Status.NodeInfo.BootID = "boot-b"
			return f
		}(), Finish, v1alpha1.RemediationRefused, `status reports boot "boot-b"`},
		{"typed trigger shown", func() *v1alpha1.NodeRemediation {
			o := order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute)
			o.Spec.Reason = "for people only"
			o.Spec.Trigger = &v1alpha1.RepairTrigger{Type: "KernelReady", Status: corev1.ConditionFalse}
			return o
		}(), facts(t0), Act, "", ""},
		{"typed trigger not shown", func() *v1alpha1.NodeRemediation {
			o := order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute)
			o.Spec.Trigger = &v1alpha1.RepairTrigger{Type: "Ready", Status: corev1.ConditionFalse}
			return o
		}(), facts(t0), Finish, v1alpha1.RemediationRefused, "trigger Ready=False is not what the Node reports (Ready=True)"},
		{"trigger healthy", order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute), func() Facts {
			f := facts(t0)
			f.Node.Status.Conditions[1].Status = corev1.ConditionTrue
			return f
		}(), Finish, v1alpha1.RemediationRefused, "nothing to repair"},
		{"finished", func() *v1alpha1.NodeRemediation {
			o := order(v1alpha1.HostReboot, "boot-a", t0, 5*time.Minute)
			o.Status.Phase = v1alpha1.RemediationRefused
			return o
		}(), facts(t0), Ignore, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := Judge(tc.o, tc.f)
			if j.Verdict != tc.want || j.Phase != tc.phase || !strings.Contains(j.Message, tc.msg) {
				t.Errorf("Judge = %+v, want %s %q containing %q", j, tc.want, tc.phase, tc.msg)
			}
		})
	}
}

func TestTrigger(t *testing.T) {
	for reason, want := range map[string]string{
		"KernelReady=False/KernelDeadlock": "KernelReady False true",
		"Ready=Unknown":                    "Ready Unknown true",
		"Ready=Unknown/":                   "Ready Unknown true",
		"":                                 "  false",
		"=False/X":                         " False false",
		"KernelReady=Maybe/X":              "KernelReady Maybe false",
		"KernelReady":                      "KernelReady  false",
	} {
		typ, status, ok := Trigger(reason)
		if got := fmt.Sprintf("%s %s %v", typ, status, ok); got != want {
			t.Errorf("Trigger(%q) = %s, want %s", reason, got, want)
		}
	}
}
