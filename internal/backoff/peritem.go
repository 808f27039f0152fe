package backoff

import (
	"sync"
	"time"
)

// PerItem is a workqueue rate limiter (k8s.io/client-go/util/workqueue's
// TypedRateLimiter) whose delays are a Retry per item: exponential, jittered
// and capped. client-go's default controller limiter has neither jitter
// nor a useful cap (1000 s): after an outage an item that failed often
// would wait a quarter of an hour, and the queues of a fleet's agents that
// failed together would retry together.
type PerItem[T comparable] struct {
	// Initial and Max bound each item's delays (see New).
	Initial, Max time.Duration

	mu    sync.Mutex
	items map[T]*perItem
}

type perItem struct {
	retry    *Retry
	requeues int
}

// When returns the delay before item's next retry.
func (p *PerItem[T]) When(item T) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.items == nil {
		p.items = map[T]*perItem{}
	}
	it, ok := p.items[item]
	if !ok {
		it = &perItem{retry: New(p.Initial, p.Max)}
		p.items[item] = it
	}
	it.requeues++
	return it.retry.Next()
}

// Forget starts item over (it succeeded).
func (p *PerItem[T]) Forget(item T) {
	p.mu.Lock()
	delete(p.items, item)
	p.mu.Unlock()
}

// NumRequeues is how many times item was retried since it was forgotten.
func (p *PerItem[T]) NumRequeues(item T) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if it, ok := p.items[item]; ok {
		return it.requeues
	}
	return 0
}
