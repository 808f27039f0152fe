// Package kernel is the kernel monitor: it owns the KernelReady condition.
//
// Log rules read kernel messages (/dev/kmsg) and the journal of the node's
// daemons; periodic checks read <host-root>/proc and adjtimex(2). Every check
// splits into a gatherer (the only I/O) and a pure evaluation function.
package kernel

import (
	"context"
	"strings"
	"time"

	"nodemend.dev/nodemend/internal/cloudmeta"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
)

// Name is the registry monitor name.
const Name = "kernel"

// Options tune the monitor; Config.Options builds them from the config
// section. A zero period takes the one of DefaultConfig, the only place the
// defaults are written.
type Options struct {
	// LimitsPeriod is the period of the pid_max and open-files checks.
	LimitsPeriod time.Duration
	// ZombiePeriod is the period of the zombie scan (one read per process).
	ZombiePeriod time.Duration
	// ClockPeriod is the period of the clock synchronization check.
	ClockPeriod time.Duration
	// EnvironPeriod is the period of the environment size scan.
	EnvironPeriod time.Duration
	// Timex reads the kernel's NTP state; nil means adjtimex(2). The clock is
	// not under the host root: tests and simulations inject a reader.
	Timex TimexReader
	// CloudEvents reads the events the cloud scheduled for this instance
	// (its metadata service); nil leaves the check out.
	CloudEvents func(ctx context.Context) ([]cloudmeta.Event, error)
	// CloudEventsPeriod is the period of that check.
	CloudEventsPeriod time.Duration
}

// Monitor implements detection.Monitor for KernelReady.
type Monitor struct {
	env  detection.Env
	opts Options
	// cron remembers when each cron job last started (RapidCron).
	cron cronRuns
}

var _ detection.Monitor = (*Monitor)(nil)

// New builds the kernel monitor. env.HostRoot "" means "/".
func New(env detection.Env, opts Options) *Monitor {
	env = env.WithDefaults()
	detection.FillDefaults(&opts, DefaultConfig().Options())
	if opts.Timex == nil {
		opts.Timex = SystemTimex{}
	}
	return &Monitor{env: env, opts: opts}
}

// Name implements detection.Monitor.
func (m *Monitor) Name() string { return Name }

// Rules implements detection.Monitor.
func (m *Monitor) Rules() []logline.Rule { return Rules() }

// Interpret implements detection.Monitor: every kernel rule maps one to one to
// a finding, except cron's job starts, which are findings only when a job
// starts again too soon (RapidCron). Journal matches name their unit in the
// message.
func (m *Monitor) Interpret(match logline.Match) []detection.Finding {
	if match.Reason == health.ReasonRapidCron {
		return m.cron.started(match, m.env.Threshold(health.ReasonRapidCron))
	}
	msg := match.Message
	if u := match.Line.Unit; match.Line.Source != logline.Kmsg && u != "" && !strings.HasPrefix(msg, u+": ") {
		msg = u + ": " + msg
	}
	f := detection.Finding{
		Reason:   match.Reason,
		Message:  msg,
		Observed: match.Line.Time,
		Subject:  subject(match),
	}
	if judgedByHolders(match) {
		// Two small reads, only for a host daemon's fork failure (rare):
		// who holds the tasks must be read while the failure lasts.
		h, ok := m.readTaskHolders()
		f = blameForkFailure(f, h, ok)
	}
	return []detection.Finding{f}
}

// subject picks what a log finding is about, so that events about different
// processes, CPUs or cgroups are not merged: the cgroup, else the CPU, else
// the process name, else the unit.
func subject(match logline.Match) string {
	g := match.Groups
	switch {
	case g["cgroup"] != "":
		return g["cgroup"]
	case g["cpu"] != "":
		return "CPU#" + g["cpu"]
	case g["comm"] != "":
		return g["comm"]
	case match.Line.Source != logline.Kmsg:
		return match.Line.Unit
	}
	return ""
}

// Checks implements detection.Monitor.
func (m *Monitor) Checks() []detection.Check {
	checks := []detection.Check{
		{
			Name:    "kernel-pid-max",
			Period:  m.opts.LimitsPeriod,
			Reasons: []string{health.ReasonApproachingKernelPidMax},
			Run:     m.runPIDMax,
		},
		{
			Name:    "kernel-open-files",
			Period:  m.opts.LimitsPeriod,
			Reasons: []string{health.ReasonApproachingMaxOpenFiles},
			Run:     m.runOpenFiles,
		},
		{
			Name:    "kernel-zombies",
			Period:  m.opts.ZombiePeriod,
			Reasons: []string{health.ReasonExcessiveZombieProcesses},
			Run:     m.runZombies,
		},
		{
			Name:    "kernel-environment",
			Period:  m.opts.EnvironPeriod,
			Reasons: []string{health.ReasonLargeEnvironment},
			Run:     m.runEnviron,
		},
		{
			Name:    "kernel-clock",
			Period:  m.opts.ClockPeriod,
			Reasons: []string{health.ReasonClockUnsynchronized},
			Run:     m.runClock,
		},
	}
	if m.opts.CloudEvents != nil {
		checks = append(checks, detection.Check{
			Name:    "kernel-cloud-events",
			Period:  m.opts.CloudEventsPeriod,
			Reasons: []string{health.ReasonScheduledMaintenance, health.ReasonSpotInterruption},
			Run:     m.runCloudEvents,
		})
	}
	return checks
}

// threshold is the effective threshold of reason: the agent's (config
// override or registry default), else the registry default.
func (m *Monitor) threshold(reason string) float64 { return m.env.Threshold(reason) }
