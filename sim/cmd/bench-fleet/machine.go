package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// The processes that share the machine through a storm, by their command
// names as the kernel keeps them (15 characters at most).
var sharers = []string{"kube-apiserver", "etcd", "kwok", "nodemend-contro", "karpenter-kwok", "bench-fleet"}

// machineCPU is the CPU time of the sharers, and of the whole machine, at
// one moment.
type machineCPU struct {
	at     time.Time
	byName map[string]float64 // CPU seconds
	busy   float64            // every CPU's non-idle seconds
}

// machine reads the sharers' CPU. Their processes are found once: the
// trace samples ten times a second through the decisions it measures, on
// the same two cores, so it reads a handful of stat files, not all of /proc.
type machine struct {
	fs    procfs.FS
	procs []procfs.Proc
}

// newMachine finds the sharers' processes (the simulation's, started
// before the storm; a process started later is not counted).
func newMachine() (*machine, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	all, err := fs.AllProcs()
	if err != nil {
		return nil, err
	}
	m := &machine{fs: fs}
	for _, p := range all {
		if st, err := p.Stat(); err == nil && slices.Contains(sharers, st.Comm) {
			m.procs = append(m.procs, p)
		}
	}
	return m, nil
}

func (m *machine) sample() (machineCPU, error) {
	s := machineCPU{at: time.Now(), byName: map[string]float64{}}
	for _, p := range m.procs {
		if st, err := p.Stat(); err == nil { // else it ended
			s.byName[st.Comm] += st.CPUTime()
		}
	}
	stat, err := m.fs.Stat()
	if err != nil {
		return s, err
	}
	c := stat.CPUTotal
	s.busy = c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	return s, nil
}

// cores is the CPU each sharer and the machine used between a and b, in
// cores (CPU seconds per second).
func cores(a, b machineCPU) (byName map[string]float64, busy float64) {
	d := b.at.Sub(a.at).Seconds()
	byName = map[string]float64{}
	if d <= 0 {
		return byName, 0
	}
	for _, n := range sharers {
		byName[n] = (b.byName[n] - a.byName[n]) / d
	}
	return byName, (b.busy - a.busy) / d
}

// trace samples the machine every 100 ms from start for d.
func (m *machine) trace(ctx context.Context, start time.Time, d time.Duration) []machineCPU {
	if err := sleepCtx(ctx, time.Until(start)); err != nil {
		return nil
	}
	var out []machineCPU
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for end := start.Add(d); time.Now().Before(end); {
		if s, err := m.sample(); err == nil {
			out = append(out, s)
		}
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
	}
	return out
}

// nearest is the sample of trace closest to t.
func nearest(trace []machineCPU, t time.Time) machineCPU {
	best := trace[0]
	for _, m := range trace[1:] {
		if m.at.Sub(t).Abs() < best.at.Sub(t).Abs() {
			best = m
		}
	}
	return best
}

// sharesRow is a table row of the cores each sharer used, and the
// machine's.
func sharesRow(byName map[string]float64, busy float64) string {
	var parts []string
	for _, n := range sharers {
		parts = append(parts, fmt.Sprintf("%.2f", byName[n]))
	}
	return strings.Join(parts, " | ") + fmt.Sprintf(" | %.2f", busy)
}
