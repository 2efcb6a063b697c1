package driver

import (
	"context"
	"errors"
	"time"
)

// Store keeps the per-key state of limits and applies requests to it: the
// interface limiter.Store names, and the one every store implements (the
// memory store, limiter/memstore, and the Redis store); limitertest.Run
// holds any implementation to the same decisions. A store may also
// implement Charger, and the per-key interfaces of limiter/perkey beside
// it, as separate values. Implementations are safe for concurrent use.
//
// A Store is created once per process and outlives reloads: a limit's state
// is keyed by (Limit.Name, client key), so a new Limiter built with the same
// names finds the same state and applies its new parameters from its next
// request on.
type Store interface {
	// Decide applies a request of weight n at instant now to every limit
	// in limits, limit i counting it under client key keys.For(i) (usually
	// the same for every limit), atomically: either
	// every limit admits it and each consumes n × its cost, or the request
	// is rejected and no limit's state changes in any way that would admit
	// or reject a later request differently. It merges the per-limit
	// decisions with Decision.Merge, in order. Implementations must be safe
	// for concurrent use and must not modify limits or keys; they may
	// retain pointers to limits' elements, which a Limiter never changes.
	//
	// An error means no decision was made; wrap ErrStoreUnavailable when the
	// backend could not be reached in time.
	Decide(ctx context.Context, limits []Limit, keys Keys, now time.Time, n int64) (Decision, error)

	// Peek returns the decision Decide would return for the same
	// arguments, without changing any state (the admin API's view of one
	// client). A leaky bucket's Decision carries no place in the queue.
	Peek(ctx context.Context, limits []Limit, keys Keys, now time.Time, n int64) (Decision, error)

	// Wait blocks until the request of an admitted Decision this Store
	// returned with a Delay or a Ticket may be forwarded, or until ctx
	// ends: then the request leaves its queue (with a real queue, those
	// behind it move up) and Wait returns ctx's error. Limiter.Wait calls
	// it.
	Wait(ctx context.Context, d Decision) error

	// Reset forgets key's state for every limit in limits, so that its
	// next request is a fresh key's (the admin API's "unblock this
	// client"). Requests already waiting in a leaky-bucket queue keep their
	// places.
	Reset(ctx context.Context, limits []Limit, key string) error
}

// Keys are the client keys of one decision: one for every limit (OneKey),
// or one per limit (PerLimit). A plain value, so that the common case of
// one key costs no allocation. The zero Keys is the key "" for every limit.
type Keys struct {
	one string
	per []string
}

// OneKey is key for every limit.
func OneKey(key string) Keys { return Keys{one: key} }

// PerLimit is keys[i] for limit i. keys must not be modified while a
// Store uses it.
func PerLimit(keys []string) Keys { return Keys{per: keys} }

// For returns the key of limit i.
func (k Keys) For(i int) string {
	if k.per != nil {
		return k.per[i]
	}
	return k.one
}

// Single reports whether every limit has the same key, and which.
func (k Keys) Single() (string, bool) {
	if k.per == nil {
		return k.one, true
	}
	for _, x := range k.per[1:] {
		if x != k.per[0] {
			return "", false
		}
	}
	return k.per[0], true
}

// ErrStoreUnavailable is wrapped by the errors a Store returns when its
// backend cannot decide in time; callers apply their on_error policy.
var ErrStoreUnavailable = errors.New("limiter: store unavailable")

// Counter is what a Store may keep beside its limits' state: plain
// counters with an expiry, as Redis's INCRBY and EXPIRE keep them, which
// the RLS service counts with as envoyproxy/ratelimit does (its Redis
// keys name a window by its start and expire a unit after each hit). The
// memory and Redis stores implement it, and the global tier forwards it
// to its shared store. Implementations are safe for concurrent use.
type Counter interface {
	// AddCount adds n (at least 0) to key's count and sets its expiry to
	// ttl from now, both also for n = 0 (INCRBY, then EXPIRE), and
	// returns the count after. A key past its expiry counts from 0. An
	// error wraps ErrStoreUnavailable when the backend did not answer in
	// time: nothing may have been counted.
	AddCount(ctx context.Context, key string, n int64, ttl time.Duration, now time.Time) (int64, error)
	// Count returns key's count at now, 0 for none, changing nothing
	// (GET).
	Count(ctx context.Context, key string, now time.Time) (int64, error)
}
