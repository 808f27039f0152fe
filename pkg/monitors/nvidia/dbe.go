package nvidia

import (
	"fmt"
	"sync"
	"time"

	"nodemend.dev/nodemend/pkg/health"
)

// --- double-bit ECC: one fault, one reason ----------------------------------
//
// A double-bit (uncorrectable) ECC error reaches the agent up to three ways:
// NVML's double-bit ECC event, NVML's volatile DBE counter (the health
// check), and the driver's XID 48 in the kernel log (also pushed as an NVML
// XID event). Where NVML reports double-bit errors for the GPU, the fault is
// NvidiaDoubleBitError, as the EKS Node Monitoring Agent reports it, and an
// XID 48 for the same GPU is folded into it: the same reason and subject,
// so the exporter holds one fault, with a message that names the XID. On
// the kernel-only path (no NVML, or a GPU whose DBE counter NVML does not
// support and that NVML did not report), XID 48 stays NvidiaXID48Error.

// dbeWindow is how close in time an XID 48 and NVML's report of the same
// fault must be to be folded when NVML cannot otherwise vouch for the GPU.
const dbeWindow = time.Minute

// dbeGPU is what the monitor knows of one GPU's double-bit errors.
type dbeGPU struct {
	// counter is whether NVML reads the GPU's volatile DBE counter: known
	// after the first health check; unknown GPUs fold (NVML is loaded).
	counterKnown, counterSupported bool
	// reported is when NVML last reported a double-bit error (event, or the
	// counter above zero); xid48 when the last XID 48 was seen.
	reported, xid48 time.Time
}

// dbeTracker is shared by the log path (Interpret), the event stream and
// the health check; it has its own lock so that the log path never waits
// for an NVML call.
type dbeTracker struct {
	mu    sync.Mutex
	nvml  bool // NVML is loaded on this node
	byPCI map[string]*dbeGPU
}

func (t *dbeTracker) gpu(pci string) *dbeGPU {
	if t.byPCI == nil {
		t.byPCI = map[string]*dbeGPU{}
	}
	g := t.byPCI[pci]
	if g == nil {
		g = &dbeGPU{}
		t.byPCI[pci] = g
	}
	return g
}

// nvmlLoaded records that NVML is available.
func (t *dbeTracker) nvmlLoaded() {
	t.mu.Lock()
	t.nvml = true
	t.mu.Unlock()
}

// sampled records what the health check read of a GPU's DBE counter.
func (t *dbeTracker) sampled(pci string, v Value, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.gpu(pci)
	g.counterKnown, g.counterSupported = true, v.OK
	if v.OK && v.V > 0 {
		g.reported = at
	}
}

// event records NVML's double-bit ECC event.
func (t *dbeTracker) event(pci string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gpu(pci).reported = at
}

// lastXID48 is when the kernel (or NVML) last reported XID 48 on the GPU.
func (t *dbeTracker) lastXID48(pci string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if g := t.byPCI[pci]; g != nil {
		return g.xid48
	}
	return time.Time{}
}

// xid48 records an XID 48 on a GPU and returns the finding it becomes.
func (t *dbeTracker) xid48(spec findingSpec, pci string, at time.Time) findingSpec {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.gpu(pci)
	g.xid48 = at
	if !foldXID48(t.nvml, *g, at) {
		return spec
	}
	return findingSpec{reason: health.ReasonNvidiaDoubleBitError, subject: pci,
		message: fmt.Sprintf("%s; NVML reports this GPU's double-bit ECC errors, so it is one NvidiaDoubleBitError fault: reset the GPU", spec.message)}
}

// foldXID48 decides whether an XID 48 at "at" is folded into
// NvidiaDoubleBitError: NVML is loaded and reports double-bit errors for
// the GPU (its counter is supported, or not known yet), or reported one
// within dbeWindow of the XID.
func foldXID48(nvml bool, g dbeGPU, at time.Time) bool {
	if !nvml {
		return false
	}
	if !g.counterKnown || g.counterSupported {
		return true
	}
	if g.reported.IsZero() {
		return false
	}
	d := at.Sub(g.reported)
	return d <= dbeWindow && d >= -dbeWindow
}
