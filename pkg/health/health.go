// Package health is nodemend's public contract: the node condition types the
// agent owns, the severities of what it detects, and the reason registry.
//
// The registry itself is data (reasons.yaml); reasons_generated.go is generated
// from it by hack/genreasons, and reasons.lock pins every released
// (reason, condition, severity) triple. Nothing in this package does I/O.
package health

import (
	"slices"
	"time"
)

// ConditionType is a node condition type written by nodemend.
type ConditionType string

// The five condition types. These exact strings are what Karpenter's node repair
// policies and EKS auto repair consume; never rename them.
const (
	KernelReady              ConditionType = "KernelReady"
	ContainerRuntimeReady    ConditionType = "ContainerRuntimeReady"
	NetworkingReady          ConditionType = "NetworkingReady"
	StorageReady             ConditionType = "StorageReady"
	AcceleratedHardwareReady ConditionType = "AcceleratedHardwareReady"
)

// ConditionTypes lists every condition type nodemend may write, in a stable order.
func ConditionTypes() []ConditionType {
	return []ConditionType{KernelReady, ContainerRuntimeReady, NetworkingReady, StorageReady, AcceleratedHardwareReady}
}

// IsOwned reports whether t is one of nodemend's condition types. Anything else
// (Ready, DiskPressure, ...) belongs to the kubelet and is never written.
func IsOwned(t string) bool {
	return slices.Contains(ConditionTypes(), ConditionType(t))
}

// Severity says what a detection does to the node.
type Severity string

const (
	// Fatal turns the reason's condition False: the node becomes repairable.
	Fatal Severity = "Fatal"
	// Warning emits a Warning Event on the Node; the condition stays True.
	Warning Severity = "Warning"
	// Info emits a Normal Event on the Node; the condition stays True.
	Info Severity = "Info"
)

// rank orders severities so that overrides can only lower them.
func (s Severity) rank() int {
	switch s {
	case Fatal:
		return 3
	case Warning:
		return 2
	case Info:
		return 1
	}
	return 0
}

// Valid reports whether s is a known severity.
func (s Severity) Valid() bool { return s.rank() > 0 }

// AtMost reports whether s is the same as or lower than o.
func (s Severity) AtMost(o Severity) bool { return s.rank() <= o.rank() }

// Source says how a reason is detected, which decides how it recovers.
type Source string

const (
	// FromLog reasons come from log lines; a Fatal one recovers after its quiet
	// period passes without a new detection.
	FromLog Source = "log"
	// FromCheck reasons come from a periodic check; they recover as soon as the
	// check passes.
	FromCheck Source = "check"
)

// Threshold is a reason's default threshold and the unit it is expressed in.
type Threshold struct {
	Default float64
	Unit    string
}

// MinQuietPeriod is the shortest quiet period an agent accepts for a
// reason (reasons.<reason>.quietPeriod in its config). A log-derived fault is
// only repaired if it stays reported for its repair toleration, and the
// controller compares policies with the registry's quiet periods, which an
// agent's file may shorten where the controller cannot see it: below a
// minute a fault recovers before any toleration a fleet uses (the defaults
// are 10 and 30 minutes) and before a repair's own steps (drain slots, the
// gate's re-check) come round, so it would never be repaired, silently. A
// minute still lets a test or a simulation run a repair in seconds-scale
// policies' time.
const MinQuietPeriod = time.Minute

// Reason describes one reason code of the registry.
type Reason struct {
	Name      string
	Condition ConditionType
	Severity  Severity
	Source    Source
	// QuietPeriod is how long a Fatal log-derived fault stays active after its
	// last detection. Zero for check-derived and non-Fatal reasons.
	QuietPeriod time.Duration
	// Threshold is nil when the reason has none.
	Threshold *Threshold
	// Remedy is what the vendor's catalogue says resolves the fault
	// (RemedyNone: it names nothing); RemedySource cites the catalogue.
	Remedy       Remedy
	RemedySource string
	Description  string
	Detects      string
}

// Family is a name for a set of reasons (e.g. NvidiaXIDError for every
// NvidiaXID<N>Error), accepted wherever a reason is named.
type Family struct {
	Name      string
	Condition ConditionType
	// Template is the member names with %d for a number.
	Template    string
	Description string
	// Members are the reasons of the family, in registry order.
	Members []string
}

// Monitor names a monitor and the condition it owns.
type Monitor struct {
	Name          string
	Condition     ConditionType
	HealthyReason string
}

// LookupReason returns the registry entry for name.
func LookupReason(name string) (Reason, bool) {
	for _, r := range reasons() {
		if r.Name == name {
			return r, true
		}
	}
	return Reason{}, false
}

// LookupFamily returns the family called name.
func LookupFamily(name string) (Family, bool) {
	for _, f := range families() {
		if f.Name == name {
			f.Members = slices.Clone(f.Members)
			return f, true
		}
	}
	return Family{}, false
}

// FamiliesOf returns the names of the families that reason belongs to.
func FamiliesOf(reason string) []string {
	var out []string
	for _, f := range families() {
		if slices.Contains(f.Members, reason) {
			out = append(out, f.Name)
		}
	}
	return out
}

// Expand returns the reasons a name stands for: a family's members, or the
// reason itself (a name that is both, like NvidiaXIDWarning, is its family).
// ok is false when the name is neither a reason nor a family.
func Expand(name string) (reasons []string, ok bool) {
	if f, found := LookupFamily(name); found {
		return f.Members, true
	}
	if _, found := LookupReason(name); found {
		return []string{name}, true
	}
	return nil, false
}

// Reasons returns a copy of the registry, in registry order.
func Reasons() []Reason { return slices.Clone(reasons()) }

// Monitors returns a copy of the monitor table, in registry order.
func Monitors() []Monitor { return slices.Clone(monitors()) }

// LookupMonitor returns the monitor called name.
func LookupMonitor(name string) (Monitor, bool) {
	for _, m := range monitors() {
		if m.Name == name {
			return m, true
		}
	}
	return Monitor{}, false
}

// CustomReasonPrefix starts every reason an operator defines in the agent's
// config (custom log rules and checks, promotions): the registry never
// uses it, so an operator's reason never collides with a reason a later
// release adds, and readers (repair policies, kubectl mend) know one when
// they see it.
const CustomReasonPrefix = "Custom"

// IsCustomReason reports whether name is an operator's reason (by its
// prefix; the agent's config defines what it means).
func IsCustomReason(name string) bool {
	return len(name) > len(CustomReasonPrefix) && name[:len(CustomReasonPrefix)] == CustomReasonPrefix && ValidReason(name)
}
