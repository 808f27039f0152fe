package dcgm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"nodemend.dev/nodemend/internal/command"
)

// Keeper holds the DCGM client and source of the settings in force. The
// agent rebuilds its monitors on every config reload; the keeper hands the
// nvidia monitor the same source while the settings that reach dcgmi stay,
// so that a reload does not make it forget that a host engine answered (and
// so stop reporting its loss). Requested GPU diagnostics run through the
// same client (Diagnose).
type Keeper struct {
	// Runner and HostRunner run dcgmi: Client's fields of the same names.
	Runner, HostRunner command.Runner
	// Log is the sources' log.
	Log logr.Logger

	mu  sync.Mutex
	cur *kept
}

// kept is the client and source of one set of settings.
type kept struct {
	cfg    Config
	client *Client
	src    *Source
}

// Source returns the source for c: the current one while the settings
// that reach dcgmi do not change. Mode off returns nil.
func (k *Keeper) Source(c Config) *Source {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c.Mode == Off {
		k.cur = nil
		return nil
	}
	if cur := k.cur; cur != nil && cur.cfg.Mode == c.Mode && cur.cfg.Dcgmi == c.Dcgmi && cur.cfg.DcgmiFrom == c.DcgmiFrom && cur.cfg.HostEngine == c.HostEngine {
		return cur.src
	}
	client := &Client{Runner: k.Runner, HostRunner: k.HostRunner, From: c.DcgmiFrom, Dcgmi: c.Dcgmi, HostEngine: c.HostEngine}
	k.cur = &kept{cfg: c, client: client, src: NewSource(client, c.Mode, k.Log)}
	return k.cur.src
}

// Client is the dcgmi client of the settings in force; nil when DCGM is off
// (or before the first Source).
func (k *Keeper) Client() *Client {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cur == nil {
		return nil
	}
	return k.cur.client
}

// unavailableError is an error of Diagnose that says the node cannot run a
// diagnostic at all (DCGM off, no dcgmi, no host engine), rather than one
// that failed midway.
type unavailableError struct{ error }

func (e unavailableError) Unwrap() error { return e.error }

// Unavailable reports whether err, from Diagnose, means the node cannot run
// a diagnostic at all: the request is refused, not failed.
func Unavailable(err error) bool {
	var u unavailableError
	return errors.As(err, &u)
}

// Diagnose runs a diagnostic at level, bounded by timeout, with the client
// of the settings in force, and returns its report and dcgmi's output as
// printed.
func (k *Keeper) Diagnose(ctx context.Context, level int, timeout time.Duration) (DiagReport, []byte, error) {
	c := k.Client()
	if c == nil {
		return DiagReport{}, nil, unavailableError{errors.New("DCGM is off in the agent config (monitors.nvidia.dcgm.mode)")}
	}
	if err := c.Installed(); err != nil {
		return DiagReport{}, nil, unavailableError{fmt.Errorf("%w (monitors.nvidia.dcgm.dcgmi)", err)}
	}
	r, raw, err := c.Diag(ctx, level, timeout)
	if errors.Is(err, ErrUnreachable) {
		return DiagReport{}, nil, unavailableError{err}
	}
	return r, raw, err
}
