// Package detection defines what a monitor is: log rules and periodic checks
// that produce findings for one condition type. Monitors never talk to the
// Kubernetes API; the exporter turns their findings into conditions and events.
package detection

import (
	"context"
	"time"

	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
)

// Finding is one detection of a registry reason.
type Finding struct {
	// Reason is a registry reason code (pkg/health).
	Reason string
	// Message is for humans: what was seen, with the specifics (PID, unit, pod).
	Message string
	// Observed is the source timestamp of the signal, used for latency metrics
	// and event times.
	Observed time.Time
	// Subject optionally names what the finding is about (a pod, a unit, a CPU),
	// so that events about different subjects are not merged.
	Subject string
	// Severity, when set, lowers the reason's effective severity for this
	// one detection: a source that grades each detection itself (DCGM's
	// health watch reports the same code as a warning or a failure) makes
	// its warnings Events. It never raises the severity.
	Severity health.Severity
}

// Effective is the registry entry f is reported under: r (the reason with
// the config's overrides) lowered to f's own severity, if it has one.
func (f Finding) Effective(r health.Reason) health.Reason {
	if f.Severity.Valid() && f.Severity.AtMost(r.Severity) {
		r.Severity = f.Severity
	}
	return r
}

// Check is a periodic check. Run gathers its input (the only I/O) and evaluates
// it with a pure function. Each run reports the full set of faults it currently
// sees among Reasons: a reason of Reasons that is absent from the result has
// recovered.
type Check struct {
	Name    string
	Period  time.Duration
	Reasons []string
	// Run returns an error when the input could not be read; the previous
	// state is then kept (never Unknown) and the error is reported once.
	Run func(ctx context.Context) ([]Finding, error)
}

// Monitor is the detection logic of one registry monitor (pkg/health Monitors).
type Monitor interface {
	// Name is the registry monitor name, e.g. "kernel".
	Name() string
	// Rules are the log rules of the monitor.
	Rules() []logline.Rule
	// Interpret turns a rule match into findings. Most matches map one to one;
	// thresholds (restart counters) and rate windows (probe failures) may
	// return none.
	Interpret(m logline.Match) []Finding
	// Checks are the periodic checks of the monitor.
	Checks() []Check
}

// Applier is implemented by monitors of hardware that a node may not have
// (GPUs, accelerators). The agent runs such a monitor only while Applies
// reports true, checking again periodically: hardware whose driver loads
// after the agent starts is picked up. A monitor that does not apply writes
// no condition at all; absent is not Unknown.
type Applier interface {
	Applies(ctx context.Context) bool
}

// Streamer is implemented by monitors with a push source (an NVML event set):
// the agent runs Stream while the monitor applies and publishes each finding
// at once, like a log match. Stream returns when ctx ends; an error return is
// retried with backoff.
type Streamer interface {
	Stream(ctx context.Context, report func(Finding)) error
}

// Env is what a monitor gets from the agent when it is built.
type Env struct {
	// HostRoot prefixes every host path the monitor reads.
	HostRoot string
	Clock    clock.PassiveClock
	// Threshold returns the effective threshold of a reason: the config
	// override, else the registry default.
	Threshold func(reason string) float64
}

// WithDefaults fills in what the caller left empty: host root "/", the real
// clock, and the registry's default thresholds.
func (e Env) WithDefaults() Env {
	if e.HostRoot == "" {
		e.HostRoot = "/"
	}
	if e.Clock == nil {
		e.Clock = clock.RealClock{}
	}
	if e.Threshold == nil {
		e.Threshold = func(reason string) float64 {
			if r, ok := health.LookupReason(reason); ok && r.Threshold != nil {
				return r.Threshold.Default
			}
			return 0
		}
	}
	return e
}
