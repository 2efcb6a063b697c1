package limiter

import (
	"context"
	"fmt"
	"time"
)

// Only returns a Limiter of limit i of l alone, bound to the same state:
// for a limit the proxy charges at another moment than the others of its
// policy (one that reads the upstream's answer). Its Decisions' Index is 0.
func (l *Limiter) Only(i int) *Limiter {
	return &Limiter{store: l.store, policy: l.policy, limits: l.limits[i : i+1 : i+1]}
}

// PeekN is Peek for a request of weight n (each limit multiplies it by
// its own cost): what Allow(key, now, n) would decide, changing nothing.
func (l *Limiter) PeekN(ctx context.Context, key string, now time.Time, n int64) (Decision, error) {
	if n <= 0 {
		return Decision{}, fmt.Errorf("limiter: weight %d must be at least 1", n)
	}
	return l.store.Peek(ctx, l.limits, OneKey(key), now, n)
}

// Degraded reports whether l's store cannot decide now and follows its
// on_error rule (the Redis store with its breaker open); false for a
// store that always decides.
func (l *Limiter) Degraded() bool {
	d, ok := l.store.(interface{ Degraded() bool })
	return ok && d.Degraded()
}

// Store returns the store l's limits are bound to.
func (l *Limiter) Store() Store { return l.store }
