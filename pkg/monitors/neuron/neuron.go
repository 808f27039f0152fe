// Package neuron is the neuron monitor: it owns AcceleratedHardwareReady on
// nodes with AWS Neuron devices (Inferentia, Trainium).
//
// The Neuron driver reports hardware errors to the kernel log with a
// "NEURON_HW_ERR=<KIND>" tag (the format the AWS Neuron node problem
// detector matches); a periodic check compares the /dev/neuronN device nodes
// with the expected device count. The monitor applies only when /dev/neuronN
// exist.
package neuron

import (
	"context"
	"fmt"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/monitors/accel"
)

// Name is the registry monitor name.
const Name = "neuron"

// Options tune the monitor; OptionsFor builds them from the config
// section. A zero CheckPeriod takes DefaultConfig's.
type Options struct {
	Expect      accel.ExpectOptions
	NodeLabels  accel.NodeLabels
	CheckPeriod time.Duration
}

// Monitor implements detection.Monitor for Neuron devices.
type Monitor struct {
	env  detection.Env
	opts Options
}

var (
	_ detection.Monitor = (*Monitor)(nil)
	_ detection.Applier = (*Monitor)(nil)
)

// New builds the monitor.
func New(env detection.Env, opts Options) *Monitor {
	env = env.WithDefaults()
	if opts.CheckPeriod <= 0 {
		opts.CheckPeriod = DefaultConfig().CheckInterval.Duration
	}
	return &Monitor{env: env, opts: opts}
}

// Name implements detection.Monitor.
func (m *Monitor) Name() string { return Name }

// Applies implements detection.Applier: the node has /dev/neuronN devices.
func (m *Monitor) Applies(context.Context) bool {
	nodes, err := accel.DeviceNodes(accel.DevDir(m.env.HostRoot), "neuron")
	return err == nil && len(nodes) > 0
}

// hwErrors maps the driver's NEURON_HW_ERR kinds to reasons.
var hwErrors = []struct{ kind, reason, what string }{
	{"SRAM_UNCORRECTABLE_ERROR", health.ReasonNeuronSRAMUncorrectableError, "on-chip SRAM uncorrectable (parity) error"},
	{"NC_UNCORRECTABLE_ERROR", health.ReasonNeuronNCUncorrectableError, "NeuronCore uncorrectable memory error"},
	{"HBM_UNCORRECTABLE_ERROR", health.ReasonNeuronHBMUncorrectableError, "HBM uncorrectable error"},
	{"DMA_ERROR", health.ReasonNeuronDMAError, "DMA engine unrecoverable error"},
}

// Rules returns the kernel log rules. The tag and kinds are those of the AWS
// Neuron node problem detector configuration (aws-neuron-sdk,
// k8s-neuron-problem-detector-and-recovery-config.yml), also used by the EKS
// node monitoring agent; the device, when the line names one
// ("neuron<N>" / "nd<N>"), becomes the subject.
func Rules() []logline.Rule {
	var rs []logline.Rule
	for _, e := range hwErrors {
		rs = append(rs, logline.Rule{
			Reason:   e.reason,
			Sources:  []logline.Source{logline.Kmsg},
			Accept:   []logline.Provenance{logline.ByKernel},
			Contains: []string{"NEURON_HW_ERR=" + e.kind},
			Pattern:  `(?:\b(?:neuron|nd)(?P<dev>\d+)\b.*)?NEURON_HW_ERR=` + e.kind + `\b`,
			Message:  "Neuron device ${dev}: " + e.what,
		})
	}
	return rs
}

// Rules implements detection.Monitor.
func (m *Monitor) Rules() []logline.Rule { return Rules() }

// Interpret implements detection.Monitor.
func (m *Monitor) Interpret(match logline.Match) []detection.Finding {
	msg, subject := match.Message, ""
	if dev := match.Groups["dev"]; dev != "" {
		subject = "neuron" + dev
	} else {
		for _, e := range hwErrors {
			if e.reason == match.Reason {
				msg = "Neuron device: " + e.what + ": " + match.Line.Text
			}
		}
	}
	return []detection.Finding{{Reason: match.Reason, Message: msg, Subject: subject, Observed: match.Line.Time}}
}

// Checks implements detection.Monitor.
func (m *Monitor) Checks() []detection.Check {
	return []detection.Check{{
		Name:    "neuron-device-count",
		Period:  m.opts.CheckPeriod,
		Reasons: []string{health.ReasonNeuronDeviceCountMismatch},
		Run:     m.runDeviceCount,
	}}
}

func (m *Monitor) runDeviceCount(ctx context.Context) ([]detection.Finding, error) {
	nodes, err := accel.DeviceNodes(accel.DevDir(m.env.HostRoot), "neuron")
	if err != nil {
		return nil, err
	}
	exp, ok, err := accel.ResolveExpected(ctx, m.opts.Expect, m.opts.NodeLabels)
	if err != nil {
		return nil, err
	}
	if msg, bad := evalDeviceCount(len(nodes), exp, ok); bad {
		return []detection.Finding{{Reason: health.ReasonNeuronDeviceCountMismatch, Message: msg, Observed: m.env.Clock.Now()}}, nil
	}
	return nil, nil
}

// evalDeviceCount reports fewer devices than expected.
func evalDeviceCount(have int, exp accel.Expectation, known bool) (string, bool) {
	if !known || have >= exp.Count {
		return "", false
	}
	return fmt.Sprintf("%d Neuron devices present (/dev/neuronN), %d expected (from %s)", have, exp.Count, exp.Source), true
}
