package unhealthy

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/pkg/repair/policy"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func cond(typ, status string, ltt time.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: corev1.NodeConditionType(typ), Status: corev1.ConditionStatus(status), Reason: "R", LastTransitionTime: metav1.NewTime(ltt)}
}

func TestAssess(t *testing.T) {
	rules := policy.DefaultRules()
	tests := []struct {
		name        string
		conds       []corev1.NodeCondition
		recorded    Since
		now         time.Time
		unhealthy   bool
		expired     bool
		wantExpiry  time.Time
		wantSince   Since
		wantTrigger corev1.NodeConditionType
	}{
		{
			name:  "healthy",
			conds: []corev1.NodeCondition{cond("Ready", "True", t0), cond("KernelReady", "True", t0)},
			now:   t0.Add(time.Hour), wantSince: Since{},
		},
		{
			name:  "absent condition is not unhealthy",
			conds: []corev1.NodeCondition{cond("Ready", "True", t0)},
			now:   t0, wantSince: Since{},
		},
		{
			name:  "toleration not yet reached",
			conds: []corev1.NodeCondition{cond("KernelReady", "False", t0)},
			now:   t0.Add(30*time.Minute - time.Second), unhealthy: true,
			wantExpiry: t0.Add(30 * time.Minute), wantSince: Since{"KernelReady": t0}, wantTrigger: "KernelReady",
		},
		{
			name:  "exactly at expiry",
			conds: []corev1.NodeCondition{cond("KernelReady", "False", t0)},
			now:   t0.Add(30 * time.Minute), unhealthy: true, expired: true,
			wantExpiry: t0.Add(30 * time.Minute), wantSince: Since{"KernelReady": t0}, wantTrigger: "KernelReady",
		},
		{
			name:  "accelerator tolerates 10 minutes",
			conds: []corev1.NodeCondition{cond("KernelReady", "False", t0), cond("AcceleratedHardwareReady", "False", t0.Add(time.Minute))},
			now:   t0.Add(11 * time.Minute), unhealthy: true, expired: true,
			wantExpiry: t0.Add(11 * time.Minute), wantSince: Since{"KernelReady": t0, "AcceleratedHardwareReady": t0.Add(time.Minute)}, wantTrigger: "AcceleratedHardwareReady",
		},
		{
			name:     "LastTransitionTime pushed forward: the record keeps the clock",
			conds:    []corev1.NodeCondition{cond("KernelReady", "False", t0.Add(25*time.Minute))},
			recorded: Since{"KernelReady": t0},
			now:      t0.Add(30 * time.Minute), unhealthy: true, expired: true,
			wantExpiry: t0.Add(30 * time.Minute), wantSince: Since{"KernelReady": t0}, wantTrigger: "KernelReady",
		},
		{
			name:     "earlier LastTransitionTime wins over a later record",
			conds:    []corev1.NodeCondition{cond("KernelReady", "False", t0)},
			recorded: Since{"KernelReady": t0.Add(10 * time.Minute)},
			now:      t0.Add(10 * time.Minute), unhealthy: true,
			wantExpiry: t0.Add(30 * time.Minute), wantSince: Since{"KernelReady": t0}, wantTrigger: "KernelReady",
		},
		{
			name:     "recovered condition drops out of the record",
			conds:    []corev1.NodeCondition{cond("KernelReady", "True", t0.Add(time.Minute)), cond("Ready", "Unknown", t0)},
			recorded: Since{"KernelReady": t0, "Ready": t0},
			now:      t0.Add(time.Minute), unhealthy: true,
			wantExpiry: t0.Add(30 * time.Minute), wantSince: Since{"Ready": t0}, wantTrigger: "Ready",
		},
		{
			name:     "Ready False then Unknown keeps the clock",
			conds:    []corev1.NodeCondition{cond("Ready", "Unknown", t0.Add(20*time.Minute))},
			recorded: Since{"Ready": t0},
			now:      t0.Add(20 * time.Minute), unhealthy: true,
			wantExpiry: t0.Add(30 * time.Minute), wantSince: Since{"Ready": t0}, wantTrigger: "Ready",
		},
		{
			name:  "future LastTransitionTime counts from now",
			conds: []corev1.NodeCondition{cond("KernelReady", "False", t0.Add(time.Hour))},
			now:   t0, unhealthy: true,
			wantExpiry: t0.Add(30 * time.Minute), wantSince: Since{"KernelReady": t0}, wantTrigger: "KernelReady",
		},
		{
			name:  "pressure conditions are not faults",
			conds: []corev1.NodeCondition{cond("DiskPressure", "True", t0), cond("MemoryPressure", "True", t0), cond("PIDPressure", "True", t0)},
			now:   t0.Add(24 * time.Hour), wantSince: Since{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := Assess(tt.conds, rules, tt.recorded, tt.now)
			if a.Unhealthy() != tt.unhealthy {
				t.Fatalf("Unhealthy = %v, want %v", a.Unhealthy(), tt.unhealthy)
			}
			f, expired := a.Expired(tt.now)
			if expired != tt.expired {
				t.Errorf("Expired = %v, want %v", expired, tt.expired)
			}
			if !a.NextExpiry().Equal(tt.wantExpiry) {
				t.Errorf("NextExpiry = %v, want %v", a.NextExpiry(), tt.wantExpiry)
			}
			if !a.Since.Equal(tt.wantSince) {
				t.Errorf("Since = %v, want %v", a.Since, tt.wantSince)
			}
			if tt.unhealthy && a.Findings[0].Rule.Type != tt.wantTrigger {
				t.Errorf("first finding %s, want %s", a.Findings[0].Rule.Type, tt.wantTrigger)
			}
			if expired && f.Rule.Type != tt.wantTrigger {
				t.Errorf("expired finding %s, want %s", f.Rule.Type, tt.wantTrigger)
			}
		})
	}
}

// A user rule on a pressure condition (admitted before the CRD refused it, or
// built in code) is ignored.
func TestAssessIgnoresPressureRules(t *testing.T) {
	rules := []policy.Rule{{Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue}}
	a := Assess([]corev1.NodeCondition{cond("DiskPressure", "True", t0)}, rules, nil, t0.Add(time.Hour))
	if a.Unhealthy() {
		t.Fatal("DiskPressure made the node unhealthy")
	}
}

func TestSinceRoundTrip(t *testing.T) {
	s := Since{"KernelReady": t0.Add(1500 * time.Millisecond), "Ready": t0}
	text := s.String()
	if text != `{"KernelReady":"2026-03-01T12:00:01Z","Ready":"2026-03-01T12:00:00Z"}` {
		t.Errorf("String = %s", text)
	}
	back, err := ParseSince(text)
	if err != nil || !back.Equal(s) {
		t.Errorf("ParseSince = %v, %v", back, err)
	}
	if !back.Earliest().Equal(t0) {
		t.Errorf("Earliest = %v", back.Earliest())
	}
	if e, _ := ParseSince(""); len(e) != 0 || e.String() != "" {
		t.Errorf("empty round trip: %v", e)
	}
	if _, err := ParseSince("{"); err == nil {
		t.Error("garbage parsed")
	}
}

func FuzzParseSince(f *testing.F) {
	f.Add(`{"KernelReady":"2026-03-01T12:00:01Z"}`)
	f.Add("")
	f.Add(`{"a":1}`)
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSince(s)
		if err != nil {
			return
		}
		again, err := ParseSince(v.String())
		if err != nil || !again.Equal(v) {
			t.Fatalf("round trip of %q: %v %v", s, again, err)
		}
	})
}

func TestAnyAgreesWithAssess(t *testing.T) {
	rules := policy.DefaultRules()
	cases := [][]corev1.NodeCondition{
		nil,
		{cond("Ready", "True", t0)},
		{cond("Ready", "Unknown", t0)},
		{cond("DiskPressure", "True", t0)},
		{cond("KernelReady", "True", t0), cond("AcceleratedHardwareReady", "False", t0)},
	}
	for i, c := range cases {
		if Any(c, rules) != Assess(c, rules, nil, t0).Unhealthy() {
			t.Errorf("case %d: Any and Assess disagree", i)
		}
	}
	if Any([]corev1.NodeCondition{cond("DiskPressure", "True", t0)}, []policy.Rule{{Type: "DiskPressure", Status: "True"}}) {
		t.Error("Any counted a pressure rule")
	}
}
