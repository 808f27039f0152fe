package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"nodemend.dev/nodemend/pkg/agent/config"
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

func (a *Agent) startSources(parent context.Context, c config.Config) *runningSources {
	ctx, cancel := context.WithCancel(parent)
	rs := &runningSources{cancel: cancel}
	// A reader that stops (its file is missing, the device failed) is
	// restarted with backoff: the agent must outlive a broken host file.
	run := func(name string, f func(context.Context) error) {
		rs.wg.Add(1)
		go func() {
			defer rs.wg.Done()
			backoff := time.Second
			for {
				err := f(ctx)
				if ctx.Err() != nil {
					return
				}
				if err == nil {
					err = errors.New("reader stopped")
				}
				a.metrics.SourceError(name)
				a.errOnce.report("source/"+name, fmt.Errorf("%w; restarting in %v", err, backoff))
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 30*time.Second)
			}
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
			Lookback: c.Sources.Kmsg.Lookback.Duration,
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
		}
		if j.Mode == config.JournalFile {
			opts.File = strings.TrimPrefix(j.File, "/")
		}
		r := journal.NewReader(opts)
		run("journal", func(ctx context.Context) error { return r.Run(ctx, a.handleLine) })
	}
	return rs
}
