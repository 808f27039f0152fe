package policy

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodemend.dev/nodemend/api/v1alpha1"
)

// The defaults are a public promise (docs/repair.md): this test is
// the table, spelled out, so that changing it is a deliberate act.
func TestDefaultRulesAreTheDesignTable(t *testing.T) {
	want := []Rule{
		{Type: "Ready", Status: "False", Toleration: 30 * time.Minute},
		{Type: "Ready", Status: "Unknown", Toleration: 30 * time.Minute},
		{Type: "KernelReady", Status: "False", Toleration: 30 * time.Minute},
		{Type: "ContainerRuntimeReady", Status: "False", Toleration: 30 * time.Minute},
		{Type: "NetworkingReady", Status: "False", Toleration: 30 * time.Minute},
		{Type: "StorageReady", Status: "False", Toleration: 30 * time.Minute},
		{Type: "AcceleratedHardwareReady", Status: "False", Toleration: 10 * time.Minute},
	}
	got := DefaultRules()
	if len(got) != len(want) {
		t.Fatalf("got %d rules, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Type != want[i].Type || got[i].Status != want[i].Status || got[i].Toleration != want[i].Toleration || len(got[i].Reasons) != 0 {
			t.Errorf("rule %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	d := Default()
	if d.MaxUnhealthy.String() != "20%" || d.Drain.Mode != v1alpha1.DrainEvict || d.Drain.Deadline != 10*time.Minute || d.Action != v1alpha1.ActionReplace {
		t.Errorf("default policy = %+v", d)
	}
	for _, r := range got {
		if IsPressure(r.Type) {
			t.Errorf("default rule on pressure condition %s", r.Type)
		}
	}
}

func TestRuleMatches(t *testing.T) {
	cond := func(typ, status, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: corev1.NodeConditionType(typ), Status: corev1.ConditionStatus(status), Reason: reason}
	}
	tests := []struct {
		name string
		rule Rule
		c    corev1.NodeCondition
		want bool
	}{
		{"type and status", Rule{Type: "KernelReady", Status: "False"}, cond("KernelReady", "False", "KernelDeadlock"), true},
		{"other status", Rule{Type: "KernelReady", Status: "False"}, cond("KernelReady", "True", "KernelIsReady"), false},
		{"unknown is not false", Rule{Type: "Ready", Status: "False"}, cond("Ready", "Unknown", "NodeStatusUnknown"), false},
		{"other type", Rule{Type: "KernelReady", Status: "False"}, cond("StorageReady", "False", "X"), false},
		{"reason listed", Rule{Type: "AcceleratedHardwareReady", Status: "False", Reasons: []string{"NvidiaXID79Error"}}, cond("AcceleratedHardwareReady", "False", "NvidiaXID79Error"), true},
		{"reason not listed", Rule{Type: "AcceleratedHardwareReady", Status: "False", Reasons: []string{"NvidiaXID79Error"}}, cond("AcceleratedHardwareReady", "False", "NvidiaDoubleBitError"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.Matches(tt.c); got != tt.want {
				t.Errorf("Matches = %v, want %v", got, tt.want)
			}
		})
	}
}

func nrp(name string, weight int32, sel map[string]string, mut func(*v1alpha1.NodeRepairPolicySpec)) v1alpha1.NodeRepairPolicy {
	o := v1alpha1.NodeRepairPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.NodeRepairPolicySpec{Weight: weight}}
	if sel != nil {
		o.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: sel}
	}
	if mut != nil {
		mut(&o.Spec)
	}
	return o
}

func TestFromAPI(t *testing.T) {
	pct := intstr.FromString("50%")
	three := intstr.FromInt32(3)
	bad := intstr.FromString("lots")
	tests := []struct {
		name     string
		spec     func(*v1alpha1.NodeRepairPolicySpec)
		check    func(t *testing.T, p Policy)
		warnings int
		err      bool
	}{
		{name: "empty spec is the defaults", check: func(t *testing.T, p Policy) {
			if len(p.Rules) != len(DefaultRules()) || p.MaxUnhealthy.String() != "20%" || p.Drain.Deadline != DefaultDrainDeadline {
				t.Errorf("got %+v", p)
			}
		}},
		{name: "scheduled events are ignored by default", check: func(t *testing.T, p Policy) {
			if p.DrainOnScheduledEvent {
				t.Error("an empty spec drains on scheduled events")
			}
		}},
		{name: "scheduledEvents Drain", spec: func(s *v1alpha1.NodeRepairPolicySpec) {
			s.ScheduledEvents = &v1alpha1.ScheduledEventsPolicy{Action: v1alpha1.ScheduledEventDrain}
		}, check: func(t *testing.T, p Policy) {
			if !p.DrainOnScheduledEvent {
				t.Error("scheduledEvents.action Drain does not drain")
			}
		}},
		{name: "scheduledEvents Ignore", spec: func(s *v1alpha1.NodeRepairPolicySpec) {
			s.ScheduledEvents = &v1alpha1.ScheduledEventsPolicy{Action: v1alpha1.ScheduledEventIgnore}
		}, check: func(t *testing.T, p Policy) {
			if p.DrainOnScheduledEvent {
				t.Error("scheduledEvents.action Ignore drains")
			}
		}},
		{name: "scheduledEvents unknown action", spec: func(s *v1alpha1.NodeRepairPolicySpec) {
			s.ScheduledEvents = &v1alpha1.ScheduledEventsPolicy{Action: "Reboot"}
		}, err: true},
		{name: "rules replace the defaults", spec: func(s *v1alpha1.NodeRepairPolicySpec) {
			s.Rules = []v1alpha1.RepairRule{{ConditionType: "AcceleratedHardwareReady", Status: "False", Toleration: metav1.Duration{Duration: time.Minute}, Reasons: []string{"NvidiaXIDError"}}}
		}, check: func(t *testing.T, p Policy) {
			if len(p.Rules) != 1 || p.Rules[0].Toleration != time.Minute {
				t.Errorf("rules %+v", p.Rules)
			}
		}},
		{name: "a family stands for its members", spec: func(s *v1alpha1.NodeRepairPolicySpec) {
			s.Rules = []v1alpha1.RepairRule{{ConditionType: "AcceleratedHardwareReady", Status: "False", Reasons: []string{"NvidiaXIDError", "NvidiaDoubleBitError"}}}
		}, check: func(t *testing.T, p Policy) {
			r := p.Rules[0]
			xid79 := corev1.NodeCondition{Type: "AcceleratedHardwareReady", Status: "False", Reason: "NvidiaXID79Error"}
			dbe := corev1.NodeCondition{Type: "AcceleratedHardwareReady", Status: "False", Reason: "NvidiaDoubleBitError"}
			warn := corev1.NodeCondition{Type: "AcceleratedHardwareReady", Status: "False", Reason: "NvidiaXID13Warning"}
			if !r.Matches(xid79) || !r.Matches(dbe) || r.Matches(warn) {
				t.Errorf("NvidiaXIDError rule: XID79 %v, DBE %v, XID13 warning %v", r.Matches(xid79), r.Matches(dbe), r.Matches(warn))
			}
		}},
		{name: "the DCGM families stand for their members", spec: func(s *v1alpha1.NodeRepairPolicySpec) {
			s.Rules = []v1alpha1.RepairRule{{ConditionType: "AcceleratedHardwareReady", Status: "False", Reasons: []string{"DCGMHealthCodeFatal", "DCGMError"}}}
		}, check: func(t *testing.T, p Policy) {
			r := p.Rules[0]
			cond := func(reason string) corev1.NodeCondition {
				return corev1.NodeCondition{Type: "AcceleratedHardwareReady", Status: "False", Reason: reason}
			}
			for reason, want := range map[string]bool{"DCGMHealthCode120": true, "DCGMHealthCode4": true, "DCGMError": true,
				"DCGMHealthCode3": false, "DCGMDiagnosticFailure": false, "NvidiaXID79Error": false} {
				if r.Matches(cond(reason)) != want {
					t.Errorf("DCGMHealthCodeFatal rule matches %s: %v, want %v", reason, !want, want)
				}
			}
		}},
		{name: "an operator's custom reason is taken as it is, without a warning", spec: func(s *v1alpha1.NodeRepairPolicySpec) {
			s.Rules = []v1alpha1.RepairRule{{ConditionType: "AcceleratedHardwareReady", Status: "False", Reasons: []string{"CustomXID13Repeated", "NvidiaXID79Error"}}}
		}, warnings: 0, check: func(t *testing.T, p Policy) {
			if !slices.Equal(p.Rules[0].Reasons, []string{"CustomXID13Repeated", "NvidiaXID79Error"}) || !p.Rules[0].Matches(corev1.NodeCondition{Type: "AcceleratedHardwareReady", Status: "False", Reason: "CustomXID13Repeated"}) {
				t.Errorf("rules %+v", p.Rules)
			}
		}},
		{name: "an unknown reason on a nodemend condition is kept with a warning", spec: func(s *v1alpha1.NodeRepairPolicySpec) {
			s.Rules = []v1alpha1.RepairRule{
				{ConditionType: "KernelReady", Status: "False", Reasons: []string{"KernelDeadlock"}},
				{ConditionType: "Ready", Status: "False", Reasons: []string{"KubeletNotReady"}},
			}
		}, warnings: 1, check: func(t *testing.T, p Policy) {
			if !slices.Equal(p.Rules[0].Reasons, []string{"KernelDeadlock"}) || !slices.Equal(p.Rules[1].Reasons, []string{"KubeletNotReady"}) {
				t.Errorf("rules %+v", p.Rules)
			}
		}},
		{name: "pressure rules are dropped with a warning", spec: func(s *v1alpha1.NodeRepairPolicySpec) {
			s.Rules = []v1alpha1.RepairRule{
				{ConditionType: "DiskPressure", Status: "True", Toleration: metav1.Duration{Duration: time.Minute}},
				{ConditionType: "MemoryPressure", Status: "True"},
				{ConditionType: "PIDPressure", Status: "True"},
				{ConditionType: "KernelReady", Status: "False", Toleration: metav1.Duration{Duration: time.Minute}},
			}
		}, warnings: 3, check: func(t *testing.T, p Policy) {
			if len(p.Rules) != 1 || p.Rules[0].Type != "KernelReady" {
				t.Errorf("rules %+v", p.Rules)
			}
		}},
		{name: "percent", spec: func(s *v1alpha1.NodeRepairPolicySpec) { s.MaxUnhealthy = &pct }, check: func(t *testing.T, p Policy) {
			if p.MaxUnhealthy.String() != "50%" {
				t.Errorf("maxUnhealthy %v", p.MaxUnhealthy)
			}
		}},
		{name: "count", spec: func(s *v1alpha1.NodeRepairPolicySpec) { s.MaxUnhealthy = &three }, check: func(t *testing.T, p Policy) {
			if p.MaxUnhealthy.IntValue() != 3 {
				t.Errorf("maxUnhealthy %v", p.MaxUnhealthy)
			}
		}},
		{name: "bad maxUnhealthy", spec: func(s *v1alpha1.NodeRepairPolicySpec) { s.MaxUnhealthy = &bad }, err: true},
		{name: "drain override keeps the other default", spec: func(s *v1alpha1.NodeRepairPolicySpec) {
			s.Drain = &v1alpha1.DrainPolicy{Deadline: &metav1.Duration{Duration: time.Hour}}
		}, check: func(t *testing.T, p Policy) {
			if p.Drain.Mode != v1alpha1.DrainEvict || p.Drain.Deadline != time.Hour {
				t.Errorf("drain %+v", p.Drain)
			}
		}},
		{name: "drain concurrency", spec: func(s *v1alpha1.NodeRepairPolicySpec) {
			s.Drain = &v1alpha1.DrainPolicy{MaxConcurrent: ptr.To[int32](4)}
		}, check: func(t *testing.T, p Policy) {
			if p.Drain.MaxConcurrent != 4 || p.Drain.Deadline != DefaultDrainDeadline {
				t.Errorf("drain %+v", p.Drain)
			}
		}},
		{name: "zero drain concurrency", spec: func(s *v1alpha1.NodeRepairPolicySpec) {
			s.Drain = &v1alpha1.DrainPolicy{MaxConcurrent: ptr.To[int32](0)}
		}, err: true},
		{name: "bad drain mode", spec: func(s *v1alpha1.NodeRepairPolicySpec) { s.Drain = &v1alpha1.DrainPolicy{Mode: "Yolo"} }, err: true},
		{name: "action none", spec: func(s *v1alpha1.NodeRepairPolicySpec) { s.Action = v1alpha1.ActionNone }, check: func(t *testing.T, p Policy) {
			if p.Action != v1alpha1.ActionNone {
				t.Errorf("action %v", p.Action)
			}
		}},
		{name: "bad status", spec: func(s *v1alpha1.NodeRepairPolicySpec) {
			s.Rules = []v1alpha1.RepairRule{{ConditionType: "KernelReady", Status: "Maybe"}}
		}, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := nrp("p", 0, nil, tt.spec)
			p, warnings, err := FromAPI(&o)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if len(warnings) != tt.warnings {
				t.Errorf("warnings = %q, want %d", warnings, tt.warnings)
			}
			if err == nil && tt.check != nil {
				tt.check(t, p)
			}
		})
	}
}

func TestSetFor(t *testing.T) {
	gpu := map[string]string{"karpenter.sh/nodepool": "gpu"}
	objs := []v1alpha1.NodeRepairPolicy{
		nrp("all", 0, nil, func(s *v1alpha1.NodeRepairPolicySpec) { s.Action = v1alpha1.ActionNone }),
		nrp("gpu-b", 10, gpu, nil),
		nrp("gpu-a", 10, gpu, nil),
		nrp("gpu-low", 5, gpu, nil),
		nrp("broken", 100, nil, func(s *v1alpha1.NodeRepairPolicySpec) {
			s.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Sometimes"}}}
		}),
	}
	s, problems := NewSet(objs)
	if len(problems) != 1 || problems[0].Policy != "broken" || problems[0].Err == nil {
		t.Errorf("problems = %+v, want the broken selector", problems)
	}
	if s.Len() != 4 {
		t.Errorf("Len = %d", s.Len())
	}
	tests := []struct {
		labels map[string]string
		want   string
	}{
		{gpu, "gpu-a"}, // highest weight, then name
		{map[string]string{"karpenter.sh/nodepool": "cpu"}, "all"},
		{nil, "all"},
	}
	for _, tt := range tests {
		if got := s.For(tt.labels).Name; got != tt.want {
			t.Errorf("For(%v) = %s, want %s", tt.labels, got, tt.want)
		}
	}
	var none *Set
	if got := none.For(gpu).Name; got != DefaultName {
		t.Errorf("nil set: %s", got)
	}
	empty, _ := NewSet(nil)
	if got := empty.For(gpu).Name; got != DefaultName {
		t.Errorf("empty set: %s", got)
	}
}
