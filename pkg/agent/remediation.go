package agent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"nodemend.dev/nodemend/internal/childproc"
	"nodemend.dev/nodemend/pkg/agent/remediate"
	"nodemend.dev/nodemend/pkg/health"
)

// RemediationOptions enable the NodeRemediations of this node: reboots and
// accelerator resets ordered by the controller (docs/repair.md, The
// ladder).
type RemediationOptions struct {
	// Config is the REST config for NodeRemediations; nil disables them.
	Config *rest.Config
	// Reboot is the operator's reboot mechanism (none by default).
	Reboot remediate.RebootConfig
	// ResetAccelerators lets the agent reset GPUs with the driver's tool
	// (nvidia-smi, amd-smi).
	ResetAccelerators bool
	// MaxClockSkew is the bound on the difference between this node's clock
	// and the API server's (default remediate.DefaultMaxClockSkew).
	MaxClockSkew time.Duration
}

// startRemediation starts the NodeRemediation executor, if enabled.
func (a *Agent) startRemediation(ctx context.Context, wg *sync.WaitGroup) {
	o := a.opts.Remediation
	if o.Config == nil {
		return
	}
	log := a.opts.Log.WithName("remediation")
	opts := remediate.Options{
		Config: o.Config, NodeName: a.opts.NodeName, HostRoot: a.opts.HostRoot,
		MaxClockSkew: o.MaxClockSkew, Clock: a.opts.Clock, Log: log,
		RebootOff: "no reboot mechanism is configured (--reboot-mechanism)",
		ResetOff:  "accelerator resets are off (--accelerator-reset=false)",
		Event: func(eventType, reason, message string) {
			if a.exporter != nil {
				a.recorder.Event(a.exporter.NodeRef(), eventType, reason, health.BoundMessage(message))
			}
		},
	}
	rb, err := remediate.NewRebooter(a.opts.HostRoot, o.Reboot, a.opts.Commands)
	switch {
	case err != nil:
		// Refused orders say why; the node keeps detecting.
		log.Error(err, "reboots are off")
		opts.RebootOff = err.Error()
	case rb != nil:
		opts.Rebooter = rb
	}
	if o.ResetAccelerators {
		if r, why := remediate.SelectResetter(a.opts.Commands, a.opts.HostCommands); r == nil {
			opts.ResetOff = why
			if strings.Contains(why, childproc.ErrUntrusted.Error()) {
				// The refusal is in every refused order's status too.
				a.toolRefused(errors.New(why))
			}
		} else {
			opts.Resetter = r
			opts.ResetCandidates = func() []string {
				return a.exporter.FaultSubjects(health.AcceleratedHardwareReady, remediate.ResetCandidate)
			}
			opts.AfterReset = func(devices []string, everyGPU bool) {
				a.exporter.ClearFaults(health.AcceleratedHardwareReady, remediate.ClearedByReset(devices, everyGPU))
			}
		}
	}
	e, err := remediate.New(opts)
	if err != nil {
		log.Error(err, "remediation disabled")
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := e.Run(ctx); err != nil {
			log.Error(err, "remediation stopped")
		}
	}()
}
