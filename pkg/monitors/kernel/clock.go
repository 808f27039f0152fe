package kernel

import (
	"context"
	"fmt"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// Kernel NTP constants.
const (
	// staUnsync is STA_UNSYNC from include/uapi/linux/timex.h: "clock
	// unsynchronized (rw)". The kernel sets it at boot and whenever maxerror
	// reaches ntpPhaseLimit; an NTP daemon (chronyd, systemd-timesyncd, ntpd)
	// clears it once it disciplines the clock.
	staUnsync = 0x0040
	// ntpPhaseLimitMicros is NTP_PHASE_LIMIT from include/linux/timex.h,
	// ((MAXPHASE / NSEC_PER_USEC) << 5) with MAXPHASE 500000000 ns: 16 s in
	// µs. kernel/time/ntp.c grows maxerror by MAXFREQ (500 µs) every second
	// without an update and declares the clock unsynchronized at this bound.
	ntpPhaseLimitMicros = 16_000_000
)

// Timex is the part of the kernel's NTP state (struct timex, adjtimex(2))
// that the clock check reads.
type Timex struct {
	// Status holds the STA_* bits.
	Status int64
	// MaxErrorMicros and EstErrorMicros are the maximum and estimated error
	// of the clock in microseconds.
	MaxErrorMicros int64
	EstErrorMicros int64
}

// TimexReader reads the kernel's NTP state. SystemTimex is the real one;
// tests feed fixture values.
type TimexReader interface {
	ReadTimex() (Timex, error)
}

func (m *Monitor) runClock(context.Context) ([]detection.Finding, error) {
	tx, err := m.opts.Timex.ReadTimex()
	if err != nil {
		return nil, fmt.Errorf("adjtimex: %w", err)
	}
	return evalClock(tx, m.env.Clock.Now()), nil
}

// evalClock reports ClockUnsynchronized when the kernel flags the clock as
// unsynchronized (STA_UNSYNC) or its maximum error reached the kernel's own
// unsynchronized bound (NTP_PHASE_LIMIT, 16 s).
func evalClock(tx Timex, now time.Time) []detection.Finding {
	unsync := tx.Status&staUnsync != 0
	tooFar := tx.MaxErrorMicros >= ntpPhaseLimitMicros
	if !unsync && !tooFar {
		return nil
	}
	var why string
	switch {
	case unsync && tooFar:
		why = "the kernel flags it unsynchronized (STA_UNSYNC) and its maximum error reached the 16s bound"
	case unsync:
		why = "the kernel flags it unsynchronized (STA_UNSYNC): no time source disciplines it"
	default:
		why = "its maximum error reached the kernel's 16s unsynchronized bound"
	}
	return []detection.Finding{{
		Reason: health.ReasonClockUnsynchronized,
		Message: fmt.Sprintf("system clock not synchronized: %s (maxerror %s, esterror %s, status 0x%04x)",
			why, micros(tx.MaxErrorMicros), micros(tx.EstErrorMicros), tx.Status),
		Observed: now,
	}}
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
