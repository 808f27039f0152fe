package storage

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"nodemend.dev/nodemend/internal/bounded"
	"nodemend.dev/nodemend/internal/textcut"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

const psiIOPath = "proc/pressure/io"

// psiLine is one line of a pressure file: the share of wall time, in
// percent, that tasks were stalled over the last 10, 60 and 300 seconds,
// and the total stall time in microseconds.
type psiLine struct {
	Avg10, Avg60, Avg300 float64
	Total                uint64
}

// psi is a pressure file (Documentation/accounting/psi.rst): "some" is the
// time at least one task was stalled, "full" the time all non-idle tasks
// were stalled at once.
type psi struct {
	Some, Full psiLine
	HasFull    bool
}

func (m *Monitor) runIOPressure(ctx context.Context) ([]detection.Finding, error) {
	const reason = health.ReasonIODelays
	thr := m.env.Threshold(reason)
	if math.IsNaN(thr) || thr <= 0 || thr > 100 {
		return nil, fmt.Errorf("%s: invalid threshold %v: want a percentage in (0, 100]", reason, thr)
	}
	data, err := bounded.Run(ctx, &m.psiGuard, "reading "+psiIOPath, m.opts.ProbeTimeout, func() ([]byte, error) {
		return os.ReadFile(m.hostPath(psiIOPath))
	})
	// No file (kernel without CONFIG_PSI) or EOPNOTSUPP (booted with psi=0):
	// nothing measures I/O pressure, nothing to report.
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.EOPNOTSUPP) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p, err := parsePSI(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", psiIOPath, err)
	}
	return evalIOPressure(p, thr, m.env.Clock.Now()), nil
}

// parsePSI parses a pressure file:
//
//	some avg10=0.15 avg60=0.18 avg300=0.58 total=23346399
//	full avg10=0.00 avg60=0.07 avg300=0.21 total=8373681
func parsePSI(data []byte) (psi, error) {
	var p psi
	seenSome := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var l psiLine
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return psi{}, fmt.Errorf("malformed field %q", textcut.Ellipsis(kv, quoteLimit))
			}
			var err error
			switch k {
			case "avg10":
				l.Avg10, err = parsePct(v)
			case "avg60":
				l.Avg60, err = parsePct(v)
			case "avg300":
				l.Avg300, err = parsePct(v)
			case "total":
				l.Total, err = strconv.ParseUint(v, 10, 64)
			}
			if err != nil {
				return psi{}, fmt.Errorf("malformed %s=%q: %w", k, textcut.Ellipsis(v, quoteLimit), err)
			}
		}
		switch f[0] {
		case "some":
			p.Some, seenSome = l, true
		case "full":
			p.Full, p.HasFull = l, true
		default:
			return psi{}, fmt.Errorf("unknown line %q", textcut.Ellipsis(f[0], quoteLimit))
		}
	}
	if !seenSome {
		return psi{}, errors.New("no \"some\" line")
	}
	return p, nil
}

func parsePct(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(v) || v < 0 || v > 100 {
		return 0, fmt.Errorf("%v is not a percentage", v)
	}
	return v, nil
}

// evalIOPressure reports IODelays when, over the last minute, all non-idle
// tasks were stalled on I/O at once for at least threshold percent of the
// time ("full avg60"). A one-minute average is sustained by construction;
// "some" is not used because one busy task waiting on its own disk makes it
// high on a healthy node.
func evalIOPressure(p psi, threshold float64, now time.Time) []detection.Finding {
	if !p.HasFull || p.Full.Avg60 < threshold {
		return nil
	}
	return []detection.Finding{{
		Reason: health.ReasonIODelays,
		Message: fmt.Sprintf("all non-idle tasks were stalled on I/O %.1f%% of the last minute (PSI io full avg60; avg10 %.1f%%, avg300 %.1f%%; some avg60 %.1f%%); threshold %g%%",
			p.Full.Avg60, p.Full.Avg10, p.Full.Avg300, p.Some.Avg60, threshold),
		Observed: now,
	}}
}
