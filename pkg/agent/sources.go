package agent

import (
	"context"
	"path/filepath"
	"sync"

	"nodemend.dev/nodemend/pkg/agent/config"
	"nodemend.dev/nodemend/pkg/agent/source/journal"
	"nodemend.dev/nodemend/pkg/agent/source/kmsg"
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
	run := func(name string, f func(context.Context) error) {
		rs.wg.Add(1)
		go func() {
			defer rs.wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				a.metrics.SourceError(name)
				a.errOnce.report("source/"+name, err)
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
	switch j := c.Sources.Journal; j.Mode {
	case config.JournalCtl:
		r := journal.NewCommandReader(journal.CommandOptions{
			Command:   j.Command,
			Directory: filepath.Join(a.opts.HostRoot, j.Directory),
			OnError:   onError("journal"),
		})
		run("journal", func(ctx context.Context) error { return r.Run(ctx, a.handleLine) })
	case config.JournalFile:
		r := journal.NewFileReader(journal.FileOptions{
			Path:    filepath.Join(a.opts.HostRoot, j.File),
			OnError: onError("journal"),
		})
		run("journal", func(ctx context.Context) error { return r.Run(ctx, a.handleLine) })
	}
	return rs
}
