package redisstore

import (
	"sync"
	"time"
)

// breaker stops calls to Redis after repeated failures, so that an outage
// costs one timeout per request only until it opens; then decisions follow
// on_error at once. After a pause it lets one call through as a probe: its
// success closes the breaker, its failure opens it again. Times are the
// instants callers pass to Decide (nothing here reads the clock). Safe for
// concurrent use.
type breaker struct {
	after  int           // consecutive failures that open it
	pause  time.Duration // how long it stays open before a probe
	notify func(open bool, err error)

	mu        sync.Mutex
	failures  int
	openUntil time.Time // zero while closed
	probing   bool
}

// allow reports whether a call may go to Redis at now, and whether it is
// the probe of an open breaker.
func (b *breaker) allow(now time.Time) (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.openUntil.IsZero():
		return true, false
	case now.Before(b.openUntil) || b.probing:
		return false, false
	}
	b.probing = true
	return true, true
}

// retryAt returns when the next probe may happen (for a deny's Retry-After).
func (b *breaker) retryAt() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.openUntil
}

// open reports whether the breaker is open.
func (b *breaker) open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.openUntil.IsZero()
}

// done records the outcome of a call allowed at now.
func (b *breaker) done(now time.Time, probe bool, err error) {
	b.mu.Lock()
	wasOpen := !b.openUntil.IsZero()
	if probe {
		b.probing = false
	}
	var changed, open bool
	switch {
	case err == nil:
		b.failures = 0
		if wasOpen {
			b.openUntil, changed, open = time.Time{}, true, false
		}
	case probe || wasOpen:
		b.openUntil = now.Add(b.pause)
	default:
		if b.failures++; b.failures >= b.after {
			b.failures = 0
			b.openUntil, changed, open = now.Add(b.pause), true, true
		}
	}
	notify := b.notify
	b.mu.Unlock()
	if changed && notify != nil {
		notify(open, err)
	}
}
