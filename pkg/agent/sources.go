package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"nodemend.dev/nodemend/internal/backoff"
	"nodemend.dev/nodemend/pkg/agent/config"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/source/journal"
	"nodemend.dev/nodemend/pkg/source/kmsg"
)

// runningSources are the log readers of one source config.
type runningSources struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (s *runningSources) stop() {
	s.cancel()
	s.wg.Wait()
}

// supervise restarts one of the agent's long-running loops on the agent's
// clock, waiting from a second up to max between starts; each restart is
// counted as an error of source and reported once under key.
func (a *Agent) supervise(max time.Duration, key, source string) backoff.Supervisor {
	return backoff.Supervisor{Clock: a.opts.Clock, Initial: time.Second, Max: max, OnExit: func(err error, wait time.Duration) {
		a.metrics.SourceError(source)
		a.errOnce.report(key, fmt.Errorf("%w; restarting in %v", err, wait))
	}}
}

// replayWindows are how far back the log readers read again at start, so
// that the counts of promoted reasons survive a restart of the agent: the
// longest window of a promotion whose reason a rule reads from that source.
type replayWindows struct{ kmsg, journal time.Duration }

func (p *pipeline) replayWindows() replayWindows {
	var w replayWindows
	promos := p.cfg.Promotions()
	for _, m := range p.monitors {
		for _, r := range m.Rules() {
			spec, ok := promos[r.Reason]
			if !ok {
				continue
			}
			reads := func(src logline.Source) bool { return len(r.Sources) == 0 || slices.Contains(r.Sources, src) }
			if reads(logline.Kmsg) {
				w.kmsg = max(w.kmsg, spec.Within.Duration)
			}
			if reads(logline.Journal) {
				w.journal = max(w.journal, spec.Within.Duration)
			}
		}
	}
	return w
}

func (a *Agent) startSources(parent context.Context, c config.Config, replay replayWindows) *runningSources {
	ctx, cancel := context.WithCancel(parent)
	rs := &runningSources{cancel: cancel}
	// A reader that stops (its file is missing, the device failed) is
	// restarted with backoff: the agent must outlive a broken host file.
	run := func(name string, f func(context.Context) error) {
		rs.wg.Add(1)
		go func() {
			defer rs.wg.Done()
			a.supervise(30*time.Second, "source/"+name, name).Go(ctx, func(ctx context.Context) error {
				if err := f(ctx); err != nil {
					return err
				}
				return errors.New("reader stopped")
			})
		}()
	}
	onError := func(name string) func(error) {
		return func(err error) {
			a.metrics.SourceError(name)
			a.errOnce.report("source/"+name, err)
		}
	}
	if *c.Sources.Kmsg.Enabled {
		r := kmsg.NewReader(kmsg.Options{
			HostRoot: a.opts.HostRoot,
			// The ring buffer is replayed (and reported) as configured, or
			// further back when a promotion counts kernel lines.
			Lookback: max(c.Sources.Kmsg.Lookback.Duration, replay.kmsg),
			OnError:  onError("kmsg"),
		})
		run("kmsg", func(ctx context.Context) error { return r.Run(ctx, a.handleLine) })
	}
	if j := c.Sources.Journal; j.Mode != config.JournalOff {
		opts := journal.Options{
			HostRoot:   a.opts.HostRoot,
			Directory:  strings.TrimPrefix(j.Directory, "/"),
			Journalctl: j.Command,
			OnError:    onError("journal"),
			Clock:      a.opts.Clock,
			// Replayed entries only restore promotions' counts.
			Lookback: replay.journal,
		}
		if j.Mode == config.JournalFile {
			opts.File = strings.TrimPrefix(j.File, "/")
		}
		r := journal.NewReader(opts)
		run("journal", func(ctx context.Context) error { return r.Run(ctx, a.handleLine) })
	}
	return rs
}

// startStreams runs the push sources of p's monitors, each restarted with
// backoff when it fails (the vendor library may come and go).
func (a *Agent) startStreams(parent context.Context, p *pipeline) *runningSources {
	ctx, cancel := context.WithCancel(parent)
	rs := &runningSources{cancel: cancel}
	for _, m := range p.monitors {
		st, ok := m.(detection.Streamer)
		if !ok {
			continue
		}
		name := "stream/" + m.Name()
		rs.wg.Add(1)
		go func() {
			defer rs.wg.Done()
			a.supervise(5*time.Minute, name, name).Go(ctx, func(ctx context.Context) error {
				if err := st.Stream(ctx, func(f detection.Finding) { a.report(p, f) }); err != nil {
					return err
				}
				return errors.New("stream ended")
			})
		}()
	}
	return rs
}
