package remediate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/internal/textcut"
	"nodemend.dev/nodemend/internal/workloop"
)

// ReasonDuplicate is the reason of the Warning Event on the Node when a
// reboot order arrives for a boot that had its reboot already.
const ReasonDuplicate = "NodeRemediationDuplicate"

// Options configure an Executor.
type Options struct {
	// Config is the agent's REST config.
	Config   *rest.Config
	NodeName string
	HostRoot string
	// Rebooter reboots the host; nil: reboots are off (RebootOff says why).
	Rebooter  Rebooter
	RebootOff string
	// Resetter resets GPUs; nil: resets are off (ResetOff says why).
	Resetter Resetter
	ResetOff string
	// ResetCandidates are the GPUs with a fault a reset resolves, reset by
	// an order that names no devices; none known: every GPU of the host.
	ResetCandidates func() []string
	// AfterReset is told the GPUs reset and found healthy (everyGPU: the
	// whole host's), to clear their faults.
	AfterReset func(devices []string, everyGPU bool)
	// MaxClockSkew defaults to DefaultMaxClockSkew.
	MaxClockSkew time.Duration
	Clock        clock.Clock
	Log          logr.Logger
	// Event records an Event on the agent's Node (nil: none).
	Event func(eventType, reason, message string)
}

// Executor carries out the NodeRemediations of one node.
type Executor struct {
	opts   Options
	client *orders
	core   *coreclient.Client
	// ledger holds the boots that had their reboot; ledgerErr, when it
	// cannot be read, turns reboots off (which boots had one is unknown).
	ledger    *ledger
	ledgerErr error
	loop      *workloop.Loop
	// accepted are the orders this process accepted: their outcome is
	// this process's to write (or, for a reboot, the next boot's), not a
	// sign of an agent that stopped half-way.
	accepted map[types.UID]bool
}

// New validates opts and builds an Executor.
func New(opts Options) (*Executor, error) {
	if opts.Config == nil || opts.NodeName == "" {
		return nil, errors.New("remediate: a REST config and a node name are required")
	}
	if opts.HostRoot == "" {
		opts.HostRoot = "/"
	}
	if opts.MaxClockSkew <= 0 {
		opts.MaxClockSkew = DefaultMaxClockSkew
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	client, err := newOrders(opts.Config)
	if err != nil {
		return nil, err
	}
	core, err := coreclient.New(opts.Config)
	if err != nil {
		return nil, err
	}
	e := &Executor{opts: opts, client: client, core: core, accepted: map[types.UID]bool{}}
	e.loop = workloop.New(workloop.Config{
		Name: "NodeRemediation", ListWatch: client.forNode(opts.NodeName), Object: &v1alpha1.NodeRemediation{},
		RetryInitial: QueueRetryInitial, RetryMax: QueueRetryMax, Sync: e.sync, Log: opts.Log,
		Ready: func() {
			opts.Log.Info("serving NodeRemediations", "reboot", e.mechanism(), "reset", e.opts.Resetter != nil)
		},
	})
	if e.ledger, e.ledgerErr = openLedger(opts.HostRoot); e.ledgerErr != nil {
		opts.Log.Error(e.ledgerErr, "reboots are off")
	}
	return e, nil
}

// Retries of an order whose sync failed: 500 ms doubling to 30 s per
// order, with jitter (internal/backoff.PerItem); client-go's default would
// let an order that failed through an outage wait up to 1000 s after it.
const (
	QueueRetryInitial = 500 * time.Millisecond
	QueueRetryMax     = 30 * time.Second
)

// Run serves the node's NodeRemediations until ctx ends.
func (e *Executor) Run(ctx context.Context) error { return e.loop.Run(ctx) }

func (e *Executor) mechanism() string {
	if e.opts.Rebooter == nil {
		return MechanismNone
	}
	return e.opts.Rebooter.Mechanism()
}

// facts are what Judge needs, read now.
func (e *Executor) facts() Facts {
	boot, err := ReadBootID(e.opts.HostRoot)
	if err != nil {
		e.opts.Log.Error(err, "reading the boot ID")
	}
	f := Facts{
		NodeName: e.opts.NodeName, BootID: boot, Now: e.opts.Clock.Now(), MaxSkew: e.opts.MaxClockSkew,
		Enabled: map[v1alpha1.HostAction]bool{}, WhyOff: map[v1alpha1.HostAction]string{},
	}
	for action, c := range e.carriers() {
		f.Enabled[action], f.WhyOff[action] = c.on, c.off
	}
	if e.ledgerErr == nil {
		f.Rebooted = e.ledger.boots()
	}
	return f
}

// carrier is how this agent carries out the orders of one agent rung
// (pkg/rungs): whether it may, and why not, the mechanism it reports, and
// the act, which writes the order's outcome (or, for a reboot, leaves it to
// the next boot).
type carrier struct {
	on        bool
	off       string
	mechanism func() string
	do        func(ctx context.Context, log logr.Logger, accepted *v1alpha1.NodeRemediation, boot string, now time.Time) error
}

// carriers are this agent's carriers, one for each order action of the
// rung table's agent rungs (a test checks that none is missing). Adding an
// agent rung is its line in pkg/rungs and its carrier here.
func (e *Executor) carriers() map[v1alpha1.HostAction]carrier {
	reboot := carrier{on: e.opts.Rebooter != nil, off: e.opts.RebootOff, mechanism: e.mechanism, do: e.reboot}
	if e.ledgerErr != nil {
		// Which boots had their reboot is unknown: none is done.
		reboot.on, reboot.off = false, e.ledgerErr.Error()
	}
	return map[v1alpha1.HostAction]carrier{
		v1alpha1.HostReboot:           reboot,
		v1alpha1.HostResetAccelerator: {on: e.opts.Resetter != nil, off: e.opts.ResetOff, mechanism: e.resetMechanism, do: e.reset},
	}
}

// sync judges one order from the cache; anything but Ignore is judged again
// on a fresh read before it is written or done.
func (e *Executor) sync(ctx context.Context, name string) error {
	item, exists, err := e.loop.Store().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	cached, ok := item.(*v1alpha1.NodeRemediation)
	if !ok {
		return fmt.Errorf("unexpected object %T in the NodeRemediation cache", item)
	}
	if e.accepted[cached.UID] || Judge(cached, e.facts()).Verdict == Ignore {
		return nil
	}
	// The confirmation: a fresh read from the API server. An agent that
	// lost the API acts on nothing its cache held.
	fresh, err := e.client.get(ctx, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("confirming the order: %w", err)
	}
	// The evidence: the agent's own Node, read fresh (its taint, the
	// kubelet's boot ID, the conditions).
	facts := e.facts()
	if facts.Node, err = e.core.GetNode(ctx, e.opts.NodeName); apierrors.IsNotFound(err) {
		facts.Node = nil
	} else if err != nil {
		return fmt.Errorf("reading the Node: %w", err)
	}
	j := Judge(fresh, facts)
	log := e.opts.Log.WithValues("order", name, "action", fresh.Spec.Action)
	switch j.Verdict {
	case Ignore:
		return nil
	case Finish:
		log.Info("order finished without acting", "phase", j.Phase, "message", j.Message)
		if _, err := e.writeStatus(ctx, fresh, j.Phase, j.Message, nil); err != nil {
			return ignoreConflict(err)
		}
		if strings.HasPrefix(j.Message, DuplicatePrefix) && e.opts.Event != nil {
			e.opts.Event(corev1.EventTypeWarning, ReasonDuplicate, fmt.Sprintf("NodeRemediation %s refused: %s", name, j.Message))
		}
		return nil
	}
	// Accept: the write carries the fresh read's resourceVersion, so it
	// succeeds only if nothing changed since; only then is the host touched.
	boot := facts.BootID
	fresh.Status.BootID = boot
	fresh.Status.Mechanism = e.carriers()[fresh.Spec.Action].mechanism()
	now := metav1.NewTime(e.opts.Clock.Now())
	fresh.Status.AcceptedTime = &now
	accepted, err := e.writeStatus(ctx, fresh, v1alpha1.RemediationAccepted, "accepted on boot "+boot, nil)
	if err != nil {
		return ignoreConflict(err)
	}
	e.accepted[fresh.UID] = true
	log.Info("order accepted; carrying it out", "boot", boot, "mechanism", accepted.Status.Mechanism)
	return e.carriers()[fresh.Spec.Action].do(ctx, log, accepted, boot, now.Time)
}

// reboot carries out an accepted reboot order.
func (e *Executor) reboot(ctx context.Context, log logr.Logger, accepted *v1alpha1.NodeRemediation, boot string, now time.Time) error {
	// The boot's one reboot, recorded before it is tried: a reboot
	// that may not be recorded is not done.
	if err := e.ledger.record(boot, accepted.Name, now); err != nil {
		log.Error(err, "recording the reboot in the ledger")
		_, werr := e.writeStatus(ctx, accepted, v1alpha1.RemediationFailed, "not rebooted: the reboot cannot be recorded in the agent's ledger: "+err.Error(), nil)
		return werr
	}
	if err := e.opts.Rebooter.Reboot(ctx); err != nil {
		log.Error(err, "reboot failed")
		_, werr := e.writeStatus(ctx, accepted, v1alpha1.RemediationFailed, "reboot failed: "+err.Error(), nil)
		return werr
	}
	// The host goes down; the agent of the next boot records the
	// outcome (judgeAccepted).
	log.Info("reboot requested")
	return nil
}

// reset carries out an accepted accelerator reset order.
func (e *Executor) reset(ctx context.Context, log logr.Logger, accepted *v1alpha1.NodeRemediation, _ string, _ time.Time) error {
	devices := accepted.Spec.Devices
	if len(devices) == 0 && e.opts.ResetCandidates != nil {
		devices = e.opts.ResetCandidates()
	}
	res, err := e.opts.Resetter.Reset(ctx, devices)
	if err == nil && e.opts.AfterReset != nil {
		e.opts.AfterReset(res.Devices, len(devices) == 0)
	}
	phase, msg := v1alpha1.RemediationSucceeded, res.Message
	if err != nil {
		phase, msg = v1alpha1.RemediationFailed, err.Error()
		if errors.Is(err, ErrBusy) || errors.Is(err, ErrRefused) {
			phase = v1alpha1.RemediationRefused
		}
		log.Error(err, "accelerator reset not done")
	} else {
		log.Info("accelerators reset and healthy", "devices", res.Devices)
	}
	_, werr := e.writeStatus(ctx, accepted, phase, msg, res.Devices)
	return werr
}

func (e *Executor) resetMechanism() string {
	if e.opts.Resetter != nil {
		return e.opts.Resetter.Mechanism()
	}
	return ""
}

// writeStatus writes the status subresource with o's resourceVersion.
func (e *Executor) writeStatus(ctx context.Context, o *v1alpha1.NodeRemediation, phase v1alpha1.RemediationPhase, msg string, devices []string) (*v1alpha1.NodeRemediation, error) {
	o = o.DeepCopy()
	o.Status.Phase = phase
	o.Status.Message = textcut.Ellipsis(msg, 2048)
	if devices != nil {
		o.Status.Devices = devices
	}
	if phase.Finished() {
		now := metav1.NewTime(e.opts.Clock.Now())
		o.Status.CompletedTime = &now
	}
	return e.client.updateStatus(ctx, o)
}

// ignoreConflict: a conflict means the order changed since the fresh read;
// the informer delivers the new version, which is judged again.
func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}
