package dcgm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	"nodemend.dev/nodemend/internal/textcut"
	"nodemend.dev/nodemend/pkg/health"
)

// Mode says whether the node is expected to have DCGM.
type Mode string

const (
	// Auto uses DCGM when a host engine answers. A node without one
	// writes nothing for DCGM; DCGMError is raised only when an engine that
	// answered stops answering.
	Auto Mode = "auto"
	// Required expects a host engine from the start: none is DCGMError.
	Required Mode = "required"
	// Off never runs dcgmi.
	Off Mode = "off"
)

// Valid reports whether m is a known mode.
func (m Mode) Valid() bool { return m == Auto || m == Required || m == Off }

// HealthAPI is what the source needs from DCGM; Client implements it.
type HealthAPI interface {
	Installed() error
	Tool() string
	Where() string
	Health(ctx context.Context) (HealthReport, error)
	EnableWatches(ctx context.Context) error
	Fields(ctx context.Context, fields []FieldID) ([]FieldRow, error)
}

// Source reads DCGM's health watches and fields for the nvidia monitor. It
// remembers whether a host engine has answered since the agent started:
// until one does (mode Auto), DCGM is absent and the source reports nothing
// at all; once one has, losing it is DCGMError.
type Source struct {
	api  HealthAPI
	mode Mode
	log  logr.Logger

	mu sync.Mutex
	// seen: a host engine answered since the agent started.
	seen bool
	// armed: the health watches were set since the engine was last reached.
	armed bool
	// absentLogged avoids repeating the "no DCGM here" line every check.
	absentLogged string
}

// NewSource returns a source over api.
func NewSource(api HealthAPI, mode Mode, log logr.Logger) *Source {
	if mode == "" {
		mode = Auto
	}
	return &Source{api: api, mode: mode, log: log}
}

// HealthReasons are the reasons the health check reports: DCGMError and
// every DCGMHealthCode<N> of the registry.
func HealthReasons() []string {
	out := []string{health.ReasonDCGMError}
	for _, r := range health.Reasons() {
		if strings.HasPrefix(r.Name, healthCodePrefix) {
			out = append(out, r.Name)
		}
	}
	return out
}

// FieldReasons are the reasons the field check reports.
func FieldReasons() []string { return []string{FieldErrorReason(FieldClocksEventReasons)} }

// Present reports whether a host engine has answered since the agent
// started.
func (s *Source) Present() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen
}

// CheckHealth runs one health check. Without DCGM (tool missing, no engine
// ever answered) it returns nothing and logs that once at debug level; it
// returns an error only when DCGM answered but its output could not be read
// (the previous state is then kept).
func (s *Source) CheckHealth(ctx context.Context) ([]Finding, error) {
	if err := s.api.Installed(); err != nil {
		return s.unavailable(err)
	}
	s.mu.Lock()
	arm := !s.armed
	s.mu.Unlock()
	if arm {
		// Set the watches on first contact (and after a reconnect: a
		// restarted host engine forgets them).
		if err := s.api.EnableWatches(ctx); err != nil {
			if errors.Is(err, ErrUnreachable) {
				return s.unavailable(err)
			}
			return nil, err
		}
		s.reached(true)
		s.log.Info("DCGM health watches enabled", "hostEngine", s.api.Where(), "dcgmi", s.api.Tool())
		// DCGM's first check after setting the watches only creates their
		// state; results come with the next one.
		return nil, nil
	}
	r, err := s.api.Health(ctx)
	switch {
	case errors.Is(err, ErrWatchesOff):
		s.mu.Lock()
		s.armed = false
		s.mu.Unlock()
		return s.CheckHealth(ctx)
	case errors.Is(err, ErrUnreachable):
		return s.unavailable(err)
	case err != nil:
		return nil, err
	}
	s.reached(true)
	return HealthFindings(r), nil
}

// CheckFields reads the watched fields; nothing while DCGM is absent or
// unreachable (the health check reports that).
func (s *Source) CheckFields(ctx context.Context) ([]Finding, error) {
	s.mu.Lock()
	seen, armed := s.seen, s.armed
	s.mu.Unlock()
	if !seen || !armed {
		return nil, nil
	}
	rows, err := s.api.Fields(ctx, []FieldID{FieldClocksEventReasons})
	if errors.Is(err, ErrUnreachable) || errors.Is(err, ErrNotInstalled) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return FieldFindings(rows), nil
}

func (s *Source) reached(ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.seen, s.armed, s.absentLogged = true, true, ""
	}
}

// unavailable decides what a missing tool or a silent host engine means:
// nothing on a node that never had DCGM (mode Auto), DCGMError when the
// engine answered before or DCGM is required.
func (s *Source) unavailable(cause error) ([]Finding, error) {
	s.mu.Lock()
	seen := s.seen
	s.armed = false
	logged := s.absentLogged
	s.absentLogged = cause.Error()
	s.mu.Unlock()
	if seen || s.mode == Required {
		msg := fmt.Sprintf("DCGM host engine %s does not answer: %v", s.api.Where(), cause)
		if errors.Is(cause, ErrNotInstalled) {
			msg = fmt.Sprintf("DCGM is required on this node but %v", cause)
		}
		if seen {
			msg = fmt.Sprintf("DCGM host engine %s answered earlier and now does not: %v", s.api.Where(), cause)
		}
		return []Finding{{Reason: health.ReasonDCGMError, Severity: health.Fatal, Message: textcut.Ellipsis(msg, maxMessage)}}, nil
	}
	switch {
	case errors.Is(cause, ErrRefused):
		// Someone put a dcgmi where others can write, or something it
		// loads: an error of the check, which the agent reports where
		// operators look (an UntrustedHostTool event on the Node) until it
		// is fixed — not only in the debug log.
		return nil, cause
	case logged == cause.Error():
	default:
		s.log.V(1).Info("DCGM not in use on this node: its checks write nothing until a host engine answers", "reason", cause.Error())
	}
	return nil, nil
}
