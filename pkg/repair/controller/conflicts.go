package controller

import (
	"sync"
	"time"

	"nodemend.dev/nodemend/internal/backoff"
)

// Retries of a node whose write conflicted: the cache had not yet seen the
// node's latest version (our own previous write, usually), so the first
// retry comes soon; a node that keeps conflicting (another writer rewrites
// it constantly, or the watch is stuck) is retried ever more slowly instead
// of ten times a second.
const (
	conflictRetryInitial = 100 * time.Millisecond
	conflictRetryMax     = 10 * time.Second
)

// conflictRetries hands out per-node retry delays; the zero value is ready.
type conflictRetries struct {
	mu     sync.Mutex
	byNode map[string]*backoff.Retry
}

// next is the delay before node's next retry after a conflict.
func (c *conflictRetries) next(node string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byNode == nil {
		c.byNode = map[string]*backoff.Retry{}
	}
	b, ok := c.byNode[node]
	if !ok {
		b = backoff.New(conflictRetryInitial, conflictRetryMax)
		c.byNode[node] = b
	}
	return b.Next()
}

// forget starts node over: its last reconcile did not conflict.
func (c *conflictRetries) forget(node string) {
	c.mu.Lock()
	delete(c.byNode, node)
	c.mu.Unlock()
}
