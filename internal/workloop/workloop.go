// Package workloop is the agent's informer + work queue loop, written once
// for the two kinds of object the agent serves for its own node
// (NodeDiagnostics and NodeRemediations): an informer caches the objects
// of one list-watch, each add and update (and delete, where asked) puts
// the object's key on a rate-limited queue, and one worker syncs the keys
// one at a time, retrying a failed sync with per-key backoff.
package workloop

import (
	"context"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"nodemend.dev/nodemend/internal/backoff"
)

// resync is how often the informer hands every cached object over again: a
// sync that was lost (a process's own bug, a status write the API server
// took but did not answer) is done again without waiting for a change.
const resync = 10 * time.Minute

// Config says what a Loop serves.
type Config struct {
	// Name is the kind of the objects, for logs ("NodeDiagnostic"); the
	// queue is named by its plural in lower case ("nodediagnostics").
	Name string
	// ListWatch lists and watches the objects, already confined to the
	// node's own (a field selector).
	ListWatch cache.ListerWatcher
	// Object is an empty object of the kind listed.
	Object runtime.Object
	// Deletes queues the key of a deleted object too (its sync finds it
	// gone from Store), for a worker that must stop what it started for it.
	Deletes bool
	// RetryInitial and RetryMax bound each key's retry delays
	// (internal/backoff.PerItem: exponential, jittered, capped).
	RetryInitial, RetryMax time.Duration
	// Sync brings the work of one key in line with the object in Store
	// (absent when deleted). An error retries the key after its backoff.
	Sync func(ctx context.Context, key string) error
	// Ready, when set, is called once the cache has synced, before the
	// first Sync.
	Ready func()
	Log   logr.Logger
}

// Loop is one informer and its queue.
type Loop struct {
	cfg      Config
	informer cache.SharedIndexInformer
}

// New builds a Loop; nothing runs before Run.
func New(cfg Config) *Loop {
	return &Loop{cfg: cfg, informer: cache.NewSharedIndexInformer(cfg.ListWatch, cfg.Object, resync, cache.Indexers{})}
}

// Store is the informer's cache, where Sync reads the object of its key.
func (l *Loop) Store() cache.Store { return l.informer.GetStore() }

// Run runs the informer and syncs keys until ctx ends. It returns nil when
// ctx ends (also before the first list), and an error only when the loop
// could not be set up; an in-flight Sync is waited for.
func (l *Loop) Run(ctx context.Context) error {
	queue := workqueue.NewTypedRateLimitingQueueWithConfig[string](&backoff.PerItem[string]{Initial: l.cfg.RetryInitial, Max: l.cfg.RetryMax},
		workqueue.TypedRateLimitingQueueConfig[string]{Name: strings.ToLower(l.cfg.Name) + "s"})
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }}
	if l.cfg.Deletes {
		handler.DeleteFunc = enqueue
	}
	if _, err := l.informer.AddEventHandler(handler); err != nil {
		return err
	}
	go l.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced) {
		queue.ShutDown()
		return nil // stopped before the first list
	}
	if l.cfg.Ready != nil {
		l.cfg.Ready()
	}
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for l.next(ctx, queue) {
	}
	return nil
}

func (l *Loop) next(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string]) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	if err := l.cfg.Sync(ctx, key); err != nil {
		l.cfg.Log.Error(err, "syncing "+l.cfg.Name, "name", key)
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	return true
}
