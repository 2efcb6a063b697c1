package limiter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/limitproxy/limitproxy/limiter/driver"
)

// Store keeps the per-key state of limits and applies requests to it
// atomically: memstore.New (in this process) and redisstore.New (shared
// by every instance) return one. Create one Store per process and let it
// outlive reloads: state is keyed by each limit's Name and the client
// key, so a new Limiter built with the same names finds the same state.
// Callers never call its methods: a Limiter does. Its contract, for
// writing another store, is driver.Store; limitertest.Run checks one.
// Implementations are safe for concurrent use.
type Store = driver.Store

// Counter is the plain counters with an expiry a Store may keep
// (driver.Counter): memstore's, redisstore's, and the global tier's,
// forwarded.
type Counter = driver.Counter

// Errors a Limiter returns. Compare with errors.Is: a store wraps
// ErrStoreUnavailable with its cause.
var (
	// ErrStoreUnavailable is wrapped by the errors of a Store that could
	// not decide in time (Redis unreachable, a deadline passed); the
	// Decision is then the zero value, and the caller applies its own
	// rule (fail open, fail closed, a local fallback).
	ErrStoreUnavailable = driver.ErrStoreUnavailable
	// ErrRejected is returned by Limiter.Wait for a rejected Decision.
	ErrRejected = errors.New("limiter: request rejected")
	// ErrNoCharger is returned by Limiter.Charge when the Limiter's Store
	// cannot charge after the fact (it does not implement driver.Charger).
	ErrNoCharger = errors.New("limiter: the store cannot charge after the fact")
)

// Never is the RetryAfter of a request that no wait can admit: its weight
// times a limit's cost exceeds that limit's capacity.
const Never = driver.Never

// SkipKey, as a key of AllowKeys or ChargeKeys, leaves that limit out:
// it neither counts the request nor can reject it (a limit whose key the
// request lacks). Client keys are never this string.
const SkipKey = "\x00skip"

// MaxLimits is the most limits one Limiter may have.
const MaxLimits = driver.MaxLimits

// Decision is the outcome of one request against every limit of a
// Limiter: whether it may pass, after what Delay, and the figures of the
// most restrictive limit for the rate-limit headers. It is the driver
// package's type, so that a Store returns what a caller reads, with no
// copy between two layouts; its fields are documented there.
type Decision = driver.Decision

// Limiter is one policy's limits bound to a Store: the unit a server asks
// "may this request pass?". Build it with New. A Limiter is immutable and
// safe for concurrent use; a reload builds a new one, and state carries
// over through the Store because it is keyed by the limits' names. The
// zero Limiter is not usable.
type Limiter struct {
	store  Store
	limits []driver.Limit // bound, as the Store sees them
	pub    []Limit        // the same, as Limits returns them
}

// New binds limits, in order, to store under the policy name policy, so
// that a request is admitted only if every limit admits it. Each limit's
// state lives in the store under a name made of the policy name, the
// algorithm and the limit's ordinal among the policy's limits of that
// algorithm: a reload which keeps a policy's name and a limit's
// algorithm keeps that limit's counters, and a changed algorithm starts
// fresh. A shared limit (Limit.Shared) lives under its share's name
// instead, the same in every policy that uses it. It allows 1 to
// MaxLimits limits, at most one leaky bucket (a request waits in one
// queue) and a share at most once.
func New(store Store, policy string, limits ...Limit) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("limiter: nil store")
	}
	ds := make([]driver.Limit, len(limits))
	for i := range limits {
		ds[i] = limits[i].d
	}
	bound, err := driver.Bind(policy, ds)
	if err != nil {
		return nil, err
	}
	pub := make([]Limit, len(bound))
	for i := range bound {
		pub[i] = Limit{d: bound[i]}
	}
	return &Limiter{store: store, limits: bound, pub: pub}, nil
}

// Allow decides a request of weight n (normally 1; each limit multiplies
// it by its own cost) from client key at instant now, against every
// limit of l at once: the request is admitted only if every limit admits
// it, and a rejected request consumes nothing from any limit. now is the
// caller's clock: nothing in this package reads one, and an instant
// earlier than one a key has seen counts as that one. The key may be any
// string. An error means the store could not decide (ErrStoreUnavailable)
// and the Decision is the zero value. If the Decision has a Delay or a
// Ticket, call Wait before going on.
func (l *Limiter) Allow(ctx context.Context, key string, now time.Time, n int64) (Decision, error) {
	if n <= 0 {
		return Decision{}, fmt.Errorf("limiter: weight %d must be at least 1", n)
	}
	return l.store.Decide(ctx, l.limits, driver.OneKey(key), now, n)
}

// AllowKeys is Allow with a client key per limit: limit i counts the
// request under keys[i] (a policy limited per address and per API key at
// once), or not at all if keys[i] is SkipKey. len(keys) must be
// len(Limits()). With every limit skipped the request is allowed with no
// figures and Index -1.
func (l *Limiter) AllowKeys(ctx context.Context, keys []string, now time.Time, n int64) (Decision, error) {
	return l.keys(ctx, keys, now, n, l.store.Decide)
}

// PeekKeys is PeekN with a client key per limit: what AllowKeys(ctx,
// keys, now, n) would decide, changing nothing.
func (l *Limiter) PeekKeys(ctx context.Context, keys []string, now time.Time, n int64) (Decision, error) {
	return l.keys(ctx, keys, now, n, l.store.Peek)
}

// keys is AllowKeys and PeekKeys, deciding with step.
func (l *Limiter) keys(ctx context.Context, keys []string, now time.Time, n int64, step func(context.Context, []driver.Limit, driver.Keys, time.Time, int64) (Decision, error)) (Decision, error) {
	if n <= 0 {
		return Decision{}, fmt.Errorf("limiter: weight %d must be at least 1", n)
	}
	if len(keys) != len(l.limits) {
		return Decision{}, fmt.Errorf("limiter: %d keys for %d limits", len(keys), len(l.limits))
	}
	if !slices.Contains(keys, SkipKey) {
		return step(ctx, l.limits, driver.PerLimit(keys), now, n)
	}
	// Decide the others; Index back to l's numbering.
	var idx [MaxLimits]int32
	lims := make([]driver.Limit, 0, len(l.limits))
	ks := make([]string, 0, len(l.limits))
	for i, k := range keys {
		if k != SkipKey {
			idx[len(lims)] = int32(i)
			lims = append(lims, l.limits[i])
			ks = append(ks, k)
		}
	}
	if len(lims) == 0 {
		return Decision{Allowed: true, Index: -1}, nil
	}
	d, err := step(ctx, lims, driver.PerLimit(ks), now, n)
	d.Index = idx[d.Index]
	return d, err
}

// Peek returns the decision Allow(ctx, key, now, 1) would return, without
// changing any state: a view of one client. A leaky bucket's Decision
// then holds no place in its queue.
func (l *Limiter) Peek(ctx context.Context, key string, now time.Time) (Decision, error) {
	return l.store.Peek(ctx, l.limits, driver.OneKey(key), now, 1)
}

// PeekN is Peek for a request of weight n: what Allow(ctx, key, now, n)
// would decide, changing nothing.
func (l *Limiter) PeekN(ctx context.Context, key string, now time.Time, n int64) (Decision, error) {
	if n <= 0 {
		return Decision{}, fmt.Errorf("limiter: weight %d must be at least 1", n)
	}
	return l.store.Peek(ctx, l.limits, driver.OneKey(key), now, n)
}

// Wait blocks until a request admitted by Allow may go on: at once for a
// Decision without Delay, when its place in the memory store's
// leaky-bucket queue is released, or after Delay for a store whose queue
// is virtual (Redis). If ctx ends first, the request leaves the queue
// (those behind it move up) and Wait returns ctx's error; the request
// must then not go on. A rejected Decision returns ErrRejected.
func (l *Limiter) Wait(ctx context.Context, d Decision) error {
	if !d.Allowed {
		return ErrRejected
	}
	if d.Delay <= 0 && d.Ticket == 0 {
		return nil
	}
	return l.store.Wait(ctx, d)
}

// Reset forgets key's state for every limit of l, so that its next
// request is a fresh key's ("unblock this client"). Requests already
// waiting in a leaky-bucket queue keep their places.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	return l.store.Reset(ctx, l.limits, key)
}

// Charge charges (n > 0) or refunds (n < 0) n units, in the limits' own
// units (their Cost is not applied), to every limit of l for client key,
// at instant now, for a request whose reservation was made at reservedAt
// (Allow's instant): reserve an estimate with Allow, then charge the
// difference once the true cost is known. A charge is never refused:
// past the quota the key goes into debt, which its later requests wait
// out, bounded at one capacity (Capped reports units dropped at that
// bound); a refund gives back only what the reservation still counts.
// driver.Charger gives each algorithm's rules. The Decision is always
// allowed and says the state after the charge. An error means nothing was
// charged: ErrNoCharger, a leaky bucket among the limits (it cannot be
// charged after the fact), or a store that could not be reached.
func (l *Limiter) Charge(ctx context.Context, key string, now, reservedAt time.Time, n int64) (Decision, error) {
	c, err := l.charger()
	if err != nil {
		return Decision{}, err
	}
	return c.Charge(ctx, l.limits, driver.OneKey(key), now, reservedAt, n)
}

// ChargeKeys is Charge with a client key per limit, as AllowKeys: limit i
// is charged under keys[i], or not at all if keys[i] is SkipKey.
// len(keys) must be len(Limits()). With every limit skipped it returns an
// allowed Decision with no figures and Index -1.
func (l *Limiter) ChargeKeys(ctx context.Context, keys []string, now, reservedAt time.Time, n int64) (Decision, error) {
	if len(keys) != len(l.limits) {
		return Decision{}, fmt.Errorf("limiter: %d keys for %d limits", len(keys), len(l.limits))
	}
	c, err := l.charger()
	if err != nil {
		return Decision{}, err
	}
	if !slices.Contains(keys, SkipKey) {
		return c.Charge(ctx, l.limits, driver.PerLimit(keys), now, reservedAt, n)
	}
	var idx [MaxLimits]int32
	lims := make([]driver.Limit, 0, len(l.limits))
	ks := make([]string, 0, len(l.limits))
	for i, k := range keys {
		if k != SkipKey {
			idx[len(lims)] = int32(i)
			lims = append(lims, l.limits[i])
			ks = append(ks, k)
		}
	}
	if len(lims) == 0 {
		return Decision{Allowed: true, Index: -1}, nil
	}
	d, err := c.Charge(ctx, lims, driver.PerLimit(ks), now, reservedAt, n)
	d.Index = idx[d.Index]
	return d, err
}

func (l *Limiter) charger() (driver.Charger, error) {
	c, ok := l.store.(driver.Charger)
	if !ok {
		return nil, ErrNoCharger
	}
	return c, nil
}

// Only returns a Limiter of limit i of l alone, bound to the same state
// (a limit charged at another moment than the others of its policy). Its
// Decisions' Index is 0.
func (l *Limiter) Only(i int) *Limiter {
	return &Limiter{store: l.store, limits: l.limits[i : i+1 : i+1], pub: l.pub[i : i+1 : i+1]}
}

// Limits returns l's limits, bound (their Name is set), in order. The
// slice must not be modified.
func (l *Limiter) Limits() []Limit { return l.pub }

// Store returns the store l's limits are bound to.
func (l *Limiter) Store() Store { return l.store }

// Degraded reports whether l's store cannot decide now and follows its
// fallback rule (the Redis store with its breaker open); false for a
// store that always decides.
func (l *Limiter) Degraded() bool {
	d, ok := l.store.(interface{ Degraded() bool })
	return ok && d.Degraded()
}
