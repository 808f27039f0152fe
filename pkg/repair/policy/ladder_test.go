package policy

import (
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
)

func rung(a v1alpha1.LadderAction, attempts int32, timeout, window time.Duration) v1alpha1.LadderRung {
	r := v1alpha1.LadderRung{Action: a, Attempts: attempts}
	if timeout > 0 {
		r.Timeout = &metav1.Duration{Duration: timeout}
	}
	if window > 0 {
		r.Window = &metav1.Duration{Duration: window}
	}
	return r
}

// The CRD admits ladders that end in at most one terminal rung, each action
// once, and refuses a ladder next to an action.
func TestCRDLadderRules(t *testing.T) {
	ok := [][]v1alpha1.LadderRung{
		{rung(v1alpha1.LadderReboot, 2, 20*time.Minute, 2*time.Hour), rung(v1alpha1.LadderQuarantine, 0, 0, 0)},
		{rung(v1alpha1.LadderResetAccelerator, 0, 5*time.Minute, 0), rung(v1alpha1.LadderReboot, 0, 0, 0), rung(v1alpha1.LadderReplace, 0, 0, 0)},
		{rung(v1alpha1.LadderReboot, 0, 0, 0)},
	}
	for _, l := range ok {
		if err := create(t, v1alpha1.NodeRepairPolicySpec{Ladder: l}); err != nil {
			t.Errorf("ladder %v refused: %v", l, err)
		}
	}
	bad := []struct {
		name string
		spec v1alpha1.NodeRepairPolicySpec
		want string
	}{
		{"terminal not last", v1alpha1.NodeRepairPolicySpec{Ladder: []v1alpha1.LadderRung{rung(v1alpha1.LadderQuarantine, 0, 0, 0), rung(v1alpha1.LadderReboot, 0, 0, 0)}}, "may only be the last rung"},
		{"two terminals", v1alpha1.NodeRepairPolicySpec{Ladder: []v1alpha1.LadderRung{rung(v1alpha1.LadderReplace, 0, 0, 0), rung(v1alpha1.LadderQuarantine, 0, 0, 0)}}, "may only be the last rung"},
		{"twice", v1alpha1.NodeRepairPolicySpec{Ladder: []v1alpha1.LadderRung{rung(v1alpha1.LadderReboot, 0, 0, 0), rung(v1alpha1.LadderReboot, 0, 0, 0)}}, "at most once"},
		{"unknown action", v1alpha1.NodeRepairPolicySpec{Ladder: []v1alpha1.LadderRung{rung("PowerCycle", 0, 0, 0)}}, "Unsupported value"},
		{"too many attempts", v1alpha1.NodeRepairPolicySpec{Ladder: []v1alpha1.LadderRung{rung(v1alpha1.LadderReboot, 9, 0, 0)}}, "attempts"},
		{"short timeout", v1alpha1.NodeRepairPolicySpec{Ladder: []v1alpha1.LadderRung{rung(v1alpha1.LadderReboot, 0, 10*time.Second, 0)}}, "timeout must be between 1m and 2h"},
		{"with action", v1alpha1.NodeRepairPolicySpec{Action: v1alpha1.ActionReplace, Ladder: []v1alpha1.LadderRung{rung(v1alpha1.LadderReboot, 0, 0, 0)}}, "set action or ladder, not both"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			err := create(t, tt.spec)
			if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want Invalid containing %q", err, tt.want)
			}
		})
	}
}

func TestLadderFromAPI(t *testing.T) {
	o := &v1alpha1.NodeRepairPolicy{ObjectMeta: metav1.ObjectMeta{Name: "l"}, Spec: v1alpha1.NodeRepairPolicySpec{
		Ladder:     []v1alpha1.LadderRung{rung(v1alpha1.LadderReboot, 2, 20*time.Minute, 0), rung(v1alpha1.LadderQuarantine, 3, 0, 0)},
		Quarantine: &v1alpha1.QuarantinePolicy{HealthyFor: &metav1.Duration{}},
	}}
	p, _, err := FromAPI(o)
	if err != nil {
		t.Fatal(err)
	}
	want := []Rung{{Action: v1alpha1.LadderReboot, Attempts: 2, Timeout: 20 * time.Minute, Window: DefaultRungWindow},
		{Action: v1alpha1.LadderQuarantine, Attempts: 1, Window: DefaultRungWindow}}
	if len(p.Ladder) != 2 || p.Ladder[0] != want[0] || p.Ladder[1] != want[1] || p.QuarantineHealthyFor != 0 {
		t.Errorf("ladder %+v, healthyFor %s", p.Ladder, p.QuarantineHealthyFor)
	}
	// action: Replace keeps meaning what it meant: the one rung Replace.
	r, _, _ := FromAPI(&v1alpha1.NodeRepairPolicy{Spec: v1alpha1.NodeRepairPolicySpec{Action: v1alpha1.ActionReplace}})
	if len(r.Ladder) != 1 || r.Ladder[0].Action != v1alpha1.LadderReplace {
		t.Errorf("action Replace: ladder %+v", r.Ladder)
	}
	if d := Default(); d.Ladder != nil || d.QuarantineHealthyFor != DefaultQuarantineHealthyFor {
		t.Errorf("default: ladder %+v, healthyFor %s", d.Ladder, d.QuarantineHealthyFor)
	}
	// Objects admitted before the CRD's rules existed are checked too.
	if _, _, err := FromAPI(&v1alpha1.NodeRepairPolicy{Spec: v1alpha1.NodeRepairPolicySpec{Ladder: []v1alpha1.LadderRung{rung(v1alpha1.LadderQuarantine, 0, 0, 0), rung(v1alpha1.LadderReboot, 0, 0, 0)}}}); err == nil {
		t.Error("a terminal rung before the last was accepted")
	}
}
