// Package amdgpu is the amdgpu monitor: it owns AcceleratedHardwareReady on
// nodes with AMD GPUs (Instinct) bound to the amdgpu kernel driver.
//
// A periodic check reads the driver's RAS error counters from sysfs
// (/sys/class/drm/cardN/device/ras/<block>_err_count, "ue: N\nce: N\n", see
// drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c amdgpu_ras_sysfs_read) and counts
// the GPUs; log rules read the driver's GPU reset, job timeout and RAS
// messages from the kernel log. The monitor applies only when a DRM card is
// bound to amdgpu.
package amdgpu

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/monitors/accel"
)

// Name is the registry monitor name.
const Name = "amdgpu"

// Options tune the monitor; OptionsFor builds them from the config
// section. A zero CheckPeriod takes DefaultConfig's.
type Options struct {
	Expect      accel.ExpectOptions
	NodeLabels  accel.NodeLabels
	CheckPeriod time.Duration
}

// Monitor implements detection.Monitor for AMD GPUs.
type Monitor struct {
	env  detection.Env
	opts Options

	mu sync.Mutex
	// prevCE is the last correctable total per GPU, for the growth rate.
	prevCE map[string]ceReading
}

type ceReading struct {
	total uint64
	at    time.Time
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
	return &Monitor{env: env, opts: opts, prevCE: map[string]ceReading{}}
}

// Name implements detection.Monitor.
func (m *Monitor) Name() string { return Name }

func (m *Monitor) drmDir() string { return filepath.Join(m.env.HostRoot, "sys", "class", "drm") }

// Applies implements detection.Applier: a DRM card is bound to amdgpu.
func (m *Monitor) Applies(context.Context) bool {
	cards, err := scanCards(m.drmDir())
	return err == nil && len(cards) > 0
}

// Card is one amdgpu card as sysfs shows it.
type Card struct {
	Name string // "card0"
	PCI  string // PCI_SLOT_NAME, "0000:c1:00.0"
	// RAS maps a block ("umc", "gfx", ...) to its counters.
	RAS map[string]RASCount
}

// RASCount is one block's RAS error counters.
type RASCount struct{ UE, CE uint64 }

// scanCards lists the DRM cards bound to amdgpu with their RAS counters.
// Connectors (card0-DP-1), render nodes and other drivers' cards are skipped.
func scanCards(dir string) ([]Card, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cards []Card
	for _, e := range entries {
		if _, ok := accel.DeviceNumber(e.Name(), "card"); !ok {
			continue
		}
		dev := filepath.Join(dir, e.Name(), "device")
		uevent, err := os.ReadFile(filepath.Join(dev, "uevent"))
		if err != nil {
			continue
		}
		u := ParseUevent(uevent)
		if u["DRIVER"] != "amdgpu" {
			continue
		}
		c := Card{Name: e.Name(), PCI: u["PCI_SLOT_NAME"], RAS: map[string]RASCount{}}
		files, _ := filepath.Glob(filepath.Join(dev, "ras", "*_err_count"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			if rc, ok := ParseErrCount(data); ok {
				c.RAS[strings.TrimSuffix(filepath.Base(f), "_err_count")] = rc
			}
		}
		cards = append(cards, c)
	}
	return cards, nil
}

// ParseUevent parses KEY=VALUE lines.
func ParseUevent(data []byte) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			out[k] = v
		}
	}
	return out
}

// ParseErrCount parses a RAS <block>_err_count file: "ue: N\nce: N\n"
// (amdgpu_ras.c prints "%s: %lu\n%s: %lu\n" with "ue" and "ce"). Both
// counts are required.
func ParseErrCount(data []byte) (RASCount, bool) {
	var rc RASCount
	var haveUE, haveCE bool
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return RASCount{}, false
		}
		switch strings.TrimSpace(k) {
		case "ue":
			rc.UE, haveUE = n, true
		case "ce":
			rc.CE, haveCE = n, true
		}
	}
	if !haveUE || !haveCE {
		return RASCount{}, false
	}
	return rc, true
}

// Rules returns the kernel log rules. Formats from the amdgpu driver
// (drivers/gpu/drm/amd/amdgpu): amdgpu_device.c amdgpu_device_gpu_recover
// ("GPU reset begin!", "GPU reset(%d) failed"), amdgpu_job.c
// amdgpu_job_timedout ("ring %s timeout, signaled seq=%u, emitted seq=%u"),
// amdgpu_ras.c ("%ld uncorrectable hardware errors detected in %s block",
// "uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!"). dev_*
// messages carry the "amdgpu 0000:c1:00.0: amdgpu: " prefix, which gives the
// subject.
func Rules() []logline.Rule {
	kmsg := []logline.Source{logline.Kmsg}
	kernel := []logline.Provenance{logline.ByKernel}
	const dev = `(?:amdgpu (?P<pci>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]): )?`
	return []logline.Rule{
		{Reason: health.ReasonAMDGPUHardwareError, Sources: kmsg, Accept: kernel, Contains: []string{" uncorrectable hardware errors detected in "},
			Pattern: dev + `.*?(?P<n>\d+) uncorrectable hardware errors detected in (?P<block>\S+) block`,
			Message: "${n} uncorrectable hardware errors in the ${block} block"},
		{Reason: health.ReasonAMDGPUHardwareError, Sources: kmsg, Accept: kernel, Contains: []string{"uncorrectable hardware error(", ") detected!"},
			Pattern: dev + `.*uncorrectable hardware error\((?P<event>[A-Z_]+)\) detected!`,
			Message: "fatal RAS interrupt ${event}"},
		{Reason: health.ReasonAMDGPUResetFailed, Sources: kmsg, Accept: kernel, Contains: []string{"GPU reset(", ") failed"},
			Pattern: dev + `.*GPU reset\((?P<n>\d+)\) failed`, Message: "GPU reset ${n} failed"},
		{Reason: health.ReasonAMDGPUResetFailed, Sources: kmsg, Accept: kernel, Contains: []string{"GPU Recovery Failed"},
			Pattern: dev + `.*GPU Recovery Failed`, Message: "GPU recovery failed"},
		{Reason: health.ReasonAMDGPUReset, Sources: kmsg, Accept: kernel, Contains: []string{"GPU reset begin!"},
			Pattern: dev + `.*GPU reset begin!`, Message: "GPU reset begun after a hang or error"},
		{Reason: health.ReasonAMDGPURingTimeout, Sources: kmsg, Accept: kernel, Contains: []string{"ring ", " timeout, signaled seq="},
			Pattern: dev + `.*ring (?P<ring>\S+) timeout, signaled seq=(?P<sig>\d+), emitted seq=(?P<emit>\d+)`,
			Message: "job on ring ${ring} timed out (signaled seq ${sig}, emitted ${emit})"},
	}
}

// Rules implements detection.Monitor.
func (m *Monitor) Rules() []logline.Rule { return Rules() }

// Interpret implements detection.Monitor.
func (m *Monitor) Interpret(match logline.Match) []detection.Finding {
	msg, subject := match.Message, match.Groups["pci"]
	if subject != "" {
		msg = "GPU " + subject + ": " + msg
	}
	return []detection.Finding{{Reason: match.Reason, Message: msg, Subject: subject, Observed: match.Line.Time}}
}

// Checks implements detection.Monitor.
func (m *Monitor) Checks() []detection.Check {
	return []detection.Check{
		{Name: "amdgpu-device-count", Period: m.opts.CheckPeriod, Reasons: []string{health.ReasonAMDGPUDeviceCountMismatch}, Run: m.runDeviceCount},
		{Name: "amdgpu-ras", Period: m.opts.CheckPeriod,
			Reasons: []string{health.ReasonAMDGPUUncorrectableError, health.ReasonAMDGPUCorrectableErrors}, Run: m.runRAS},
	}
}

func (m *Monitor) runDeviceCount(ctx context.Context) ([]detection.Finding, error) {
	cards, err := scanCards(m.drmDir())
	if err != nil {
		return nil, err
	}
	exp, ok, err := accel.ResolveExpected(ctx, m.opts.Expect, m.opts.NodeLabels)
	if err != nil {
		return nil, err
	}
	if !ok || len(cards) >= exp.Count {
		return nil, nil
	}
	return []detection.Finding{{Reason: health.ReasonAMDGPUDeviceCountMismatch, Observed: m.env.Clock.Now(),
		Message: fmt.Sprintf("%d AMD GPUs bound to amdgpu, %d expected (from %s)", len(cards), exp.Count, exp.Source)}}, nil
}

func (m *Monitor) runRAS(context.Context) ([]detection.Finding, error) {
	cards, err := scanCards(m.drmDir())
	if err != nil {
		return nil, err
	}
	now := m.env.Clock.Now()
	perHour := m.env.Threshold(health.ReasonAMDGPUCorrectableErrors)
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []detection.Finding
	for _, c := range cards {
		fs, next := evalRAS(c, m.prevCE[c.Name], now, perHour)
		m.prevCE[c.Name] = next
		for _, f := range fs {
			f.Observed = now
			out = append(out, f)
		}
	}
	return out, nil
}

// evalRAS evaluates one card's RAS counters: any uncorrectable error is
// Fatal (the counters reset only with the driver, i.e. after a GPU reset or
// reboot); correctable errors growing at perHour or more are a Warning.
func evalRAS(c Card, prev ceReading, now time.Time, perHour float64) ([]detection.Finding, ceReading) {
	subject := c.PCI
	if subject == "" {
		subject = c.Name
	}
	blocks := make([]string, 0, len(c.RAS))
	for b := range c.RAS {
		blocks = append(blocks, b)
	}
	sort.Strings(blocks)
	var ue []string
	var ce uint64
	for _, b := range blocks {
		if n := c.RAS[b].UE; n > 0 {
			ue = append(ue, fmt.Sprintf("%s %d", b, n))
		}
		ce += c.RAS[b].CE
	}
	var out []detection.Finding
	if len(ue) > 0 {
		out = append(out, detection.Finding{Reason: health.ReasonAMDGPUUncorrectableError, Subject: subject,
			Message: fmt.Sprintf("GPU %s: uncorrectable RAS errors since the driver loaded: %s", subject, strings.Join(ue, ", "))})
	}
	next := ceReading{total: ce, at: now}
	if !prev.at.IsZero() && now.After(prev.at) && ce > prev.total {
		rate := float64(ce-prev.total) / now.Sub(prev.at).Hours()
		if rate >= perHour {
			out = append(out, detection.Finding{Reason: health.ReasonAMDGPUCorrectableErrors, Subject: subject,
				Message: fmt.Sprintf("GPU %s: correctable RAS errors growing at %.0f per hour (total %d)", subject, rate, ce)})
		}
	}
	return out, next
}
