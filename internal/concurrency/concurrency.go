// Package concurrency limits the requests in flight to one upstream: a
// fixed limit, as HAProxy's maxconn, or an adaptive one learned from the
// latency and the errors the proxy observes (adaptive.go), with a bounded
// queue in front of it in which requests wait for a slot, a fair share of
// the slots per client key, and shedding that answers at once rather than
// after a wait that could not end in time.
//
// Time comes from the clock given to New, and waits use time's timers, so
// tests run it under testing/synctest with exact instants.
package concurrency

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"
)

// Params are one upstream's concurrency settings ([upstream.concurrency]
// in docs/configuration.md).
type Params struct {
	// Limit is the most requests in flight (HAProxy's maxconn). With
	// Adaptive, the limit to start from (0: 4).
	Limit int
	// Adaptive learns the limit between MinLimit and MaxLimit.
	Adaptive bool
	// MinLimit and MaxLimit bound an adaptive limit (0: 1 and 1000).
	MinLimit, MaxLimit int
	// Queue is the most requests waiting for a slot; 0 sheds at once
	// whatever cannot be sent now.
	Queue int
	// MaxWait is the longest a request waits for a slot (HAProxy's
	// timeout queue); one that would wait longer is shed at once when the
	// wait can be foreseen, else when it runs out. 0: no wait.
	MaxWait time.Duration
	// FairShare: while requests wait, slots go round-robin to the client
	// keys waiting, none taking more than its share of the limit, so that
	// one client cannot take every slot.
	FairShare bool
	// Shadow decides as Enforce would but never holds or sheds a
	// request: the decisions are only counted (Stats).
	Shadow bool
}

// ErrShed is why Acquire turned a request away; errors.As gives a *Shed.
var ErrShed = errors.New("concurrency limit: shed")

// Shed is an Acquire that did not get a slot.
type Shed struct {
	Reason Reason
	// RetryAfter is when the client might try again: at least one second.
	RetryAfter time.Duration
}

func (s *Shed) Error() string { return "concurrency limit: shed (" + string(s.Reason) + ")" }

// Is makes errors.Is(err, ErrShed) true.
func (s *Shed) Is(target error) bool { return target == ErrShed }

// Reason is why a request was shed, the reason label of the metrics.
type Reason string

// The reasons.
const (
	ReasonQueueFull Reason = "queue_full" // the queue held Params.Queue requests
	ReasonWait      Reason = "wait"       // its foreseen wait was over what is allowed
	ReasonTimeout   Reason = "timeout"    // it waited as long as allowed
)

// Outcome is what the upstream made of a request, for the adaptive limit.
type Outcome int

// The outcomes.
const (
	// Good: an answer the upstream worked out (status below 500 but 429);
	// its time to response headers is a latency sample.
	Good Outcome = iota
	// Overload: 429, 503, 504, a timeout, a refused or reset connection.
	// No latency sample: a backend failing in a millisecond is not fast.
	Overload
	// Neutral: anything else (other 5xx, a client gone): no sample, no
	// signal, so that a bug in the upstream cannot drive its limit down.
	Neutral
)

// Stats are a limiter's figures now, and its counters since it began.
type Stats struct {
	Limit int // the limit in force (during a probe, the probe's)
	// Learned is the adaptive limit learned, which a probe lowers for a
	// moment (Limit); for a fixed limit, Limit.
	Learned  int
	Probing  bool // an adaptive limit's probe runs
	InFlight int
	Queued   int
	// Baseline is the adaptive limit's no-load latency; 0 when not
	// learned, or for a fixed limit.
	Baseline time.Duration
	Shed     map[Reason]uint64 // requests turned away (enforce), or that would have been (shadow)
	Waited   uint64            // requests that waited for a slot and got one
}

// Limiter is one upstream's concurrency limit. Safe for concurrent use.
type Limiter struct {
	p   Params
	now func() time.Time

	mu       sync.Mutex
	inFlight int
	queued   int                  // live waiters
	keys     map[string]*keyState // keys with requests in flight or waiting
	rr       []*keyState          // keys with waiters, in round-robin order
	next     int                  // rr index served next
	ctl      *controller          // nil: a fixed limit
	shed     map[Reason]uint64
	waited   uint64
}

// keyState is one client key's share.
type keyState struct {
	key      string
	inFlight int
	waiters  []*waiter // FIFO; cancelled ones are skipped
	inRR     bool
}

// waiter is a request waiting for a slot.
type waiter struct {
	ready   chan struct{} // closed when granted
	granted bool
	gone    bool   // timed out or cancelled: skipped
	ticket  Ticket // set when granted
}

// New returns a limiter with p's settings; now is its clock.
func New(p Params, now func() time.Time) *Limiter {
	l := &Limiter{p: p, now: now, keys: map[string]*keyState{}, shed: map[Reason]uint64{}}
	if p.Adaptive {
		l.ctl = newController(p, now())
	}
	return l
}

// Params returns the limiter's settings.
func (l *Limiter) Params() Params { return l.p }

// Ticket is a slot held by one request, returned by Acquire; the request
// gives it back with Release once the upstream's answer has ended. The
// zero Ticket holds nothing.
type Ticket struct {
	l    *Limiter
	ks   *keyState
	sent time.Time // when the request was let through
	// The limit and the requests in flight (this one included) when it
	// was let through, and the controller's epoch then.
	limit, inFlight int
	epoch           uint64
}

// Acquire takes a slot for a request from key ("" when the request has
// none: one shared key), waiting in the queue if need be until ctx ends.
// A request turned away gets a *Shed error (ErrShed), ctx's error if ctx
// ended first. In shadow mode it never waits and never fails; wait
// reports whether it would have waited.
func (l *Limiter) Acquire(ctx context.Context, key string) (t Ticket, waited bool, err error) {
	now := l.now()
	l.mu.Lock()
	limit := l.limitLocked(now)
	ks := l.keyLocked(key)
	if l.p.Shadow {
		if l.inFlight >= limit {
			if reason, _ := l.admitLocked(limit, now); reason != "" {
				l.shed[reason]++
			} else {
				waited = true
			}
		}
		t = l.grantLocked(ks, limit, now)
		l.mu.Unlock()
		return t, waited, nil
	}
	if l.inFlight < limit && l.queued == 0 {
		t = l.grantLocked(ks, limit, now)
		l.mu.Unlock()
		return t, false, nil
	}
	reason, wait := l.admitLocked(limit, now)
	if reason != "" {
		l.shed[reason]++
		retry := l.retryAfterLocked()
		l.dropKeyLocked(ks)
		l.mu.Unlock()
		return Ticket{}, false, &Shed{Reason: reason, RetryAfter: retry}
	}
	w := &waiter{ready: make(chan struct{})}
	ks.waiters = append(ks.waiters, w)
	if !ks.inRR {
		ks.inRR = true
		l.rr = append(l.rr, ks)
	}
	l.queued++
	if l.ctl != nil {
		l.ctl.queueGrew(now)
	}
	l.mu.Unlock()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	var cause error
	select {
	case <-w.ready:
	case <-timer.C:
		cause = &Shed{Reason: ReasonTimeout}
	case <-ctx.Done():
		cause = ctx.Err()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted {
		// Granted as the wait ended: the slot is the request's.
		l.waited++
		return w.ticket, true, nil
	}
	w.gone = true
	l.queued--
	l.trimLocked(ks)
	if s, ok := cause.(*Shed); ok {
		l.shed[s.Reason]++
		s.RetryAfter = l.retryAfterLocked()
		if l.ctl != nil {
			l.ctl.shedLate(l.now())
		}
	}
	return Ticket{}, true, cause
}

// Release gives t's slot back: the request's answer has ended (or it
// failed) with outcome o, its response headers latency after it was let
// through (ignored unless o is Good). Releasing the zero Ticket does
// nothing; a Ticket is released once.
func (t Ticket) Release(o Outcome, latency time.Duration) {
	l := t.l
	if l == nil {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight--
	t.ks.inFlight--
	l.dropKeyLocked(t.ks)
	if l.ctl != nil {
		l.ctl.observe(sample{sent: t.sent, latency: latency, outcome: o, limit: t.limit, inFlight: t.inFlight, epoch: t.epoch}, l.inFlight, l.queued, now)
	}
	l.dispatchLocked(now)
}

// Stats returns the limiter's figures.
func (l *Limiter) Stats() Stats {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{Limit: l.limitLocked(now), InFlight: l.inFlight, Queued: l.queued, Shed: make(map[Reason]uint64, len(l.shed)), Waited: l.waited}
	for r, n := range l.shed {
		s.Shed[r] = n
	}
	s.Learned = s.Limit
	if l.ctl != nil {
		s.Baseline = l.ctl.base
		s.Learned = l.ctl.clamp(l.ctl.l)
		s.Probing = l.ctl.probing
	}
	return s
}

// limitLocked is the limit in force.
func (l *Limiter) limitLocked(now time.Time) int {
	if l.ctl == nil {
		return l.p.Limit
	}
	return l.ctl.limit(now, l.inFlight)
}

func (l *Limiter) epochLocked() uint64 {
	if l.ctl == nil {
		return 0
	}
	return l.ctl.epoch
}

func (l *Limiter) keyLocked(key string) *keyState {
	ks := l.keys[key]
	if ks == nil {
		ks = &keyState{key: key}
		l.keys[key] = ks
	}
	return ks
}

// dropKeyLocked forgets ks once it has nothing in flight or waiting, so
// that the keys held are bounded by the requests in flight and queued.
func (l *Limiter) dropKeyLocked(ks *keyState) {
	if ks.inFlight == 0 && !ks.inRR {
		delete(l.keys, ks.key)
	}
}

func (l *Limiter) grantLocked(ks *keyState, limit int, now time.Time) Ticket {
	l.inFlight++
	ks.inFlight++
	if l.ctl != nil {
		l.ctl.dispatched(l.inFlight, limit)
	}
	return Ticket{l: l, ks: ks, sent: now, limit: limit, inFlight: l.inFlight, epoch: l.epochLocked()}
}

// admitLocked decides whether a request that finds no free slot may
// wait, and for how long at most: "" and the wait, or why not.
func (l *Limiter) admitLocked(limit int, now time.Time) (Reason, time.Duration) {
	if l.queued >= l.p.Queue || l.p.MaxWait <= 0 {
		return ReasonQueueFull, 0
	}
	if l.ctl == nil {
		return "", l.p.MaxWait
	}
	return l.ctl.admit(l.queued, limit, l.p.MaxWait, now)
}

// trimLocked drops the waiters that have gone from the head of ks's
// queue, and ks from the rotation once none is left waiting.
func (l *Limiter) trimLocked(ks *keyState) {
	for len(ks.waiters) > 0 && ks.waiters[0].gone {
		ks.waiters[0] = nil
		ks.waiters = ks.waiters[1:]
	}
	if len(ks.waiters) > 0 || !ks.inRR {
		return
	}
	i := slices.Index(l.rr, ks)
	l.rr = slices.Delete(l.rr, i, i+1)
	if l.next > i {
		l.next--
	}
	ks.inRR = false
	ks.waiters = nil
	l.dropKeyLocked(ks)
}

// dispatchLocked hands free slots to waiters: round-robin over the keys
// waiting, skipping a key at its fair share (the limit over the keys
// with requests in flight or waiting, rounded up) while another key can
// take the slot.
func (l *Limiter) dispatchLocked(now time.Time) {
	for l.queued > 0 {
		limit := l.limitLocked(now)
		if l.inFlight >= limit {
			return
		}
		ks := l.pickLocked(limit)
		if ks == nil {
			return
		}
		w := ks.waiters[0]
		ks.waiters[0] = nil
		ks.waiters = ks.waiters[1:]
		w.granted = true
		l.queued--
		w.ticket = l.grantLocked(ks, limit, now)
		l.trimLocked(ks)
		close(w.ready)
	}
}

// pickLocked returns the next key in round-robin order with a live
// waiter, under its fair share if FairShare and any key is; keys left
// without waiters leave the rotation.
func (l *Limiter) pickLocked(limit int) *keyState {
	share := math.MaxInt
	if l.p.FairShare && len(l.keys) > 1 {
		share = (limit + len(l.keys) - 1) / len(l.keys)
	}
	var over *keyState // the first with a waiter, whatever its share
	for seen := 0; seen < len(l.rr); {
		if l.next >= len(l.rr) {
			l.next = 0
		}
		ks := l.rr[l.next]
		if l.trimLocked(ks); !ks.inRR {
			continue
		}
		l.next++
		seen++
		if ks.inFlight < share {
			return ks
		}
		if over == nil {
			over = ks
		}
	}
	return over
}

// retryAfterLocked is the Retry-After of a shed request: one second, more
// the more requests are waiting per slot, at most ten.
func (l *Limiter) retryAfterLocked() time.Duration {
	s := 1
	if limit := max(1, l.limitLocked(l.now())); l.queued > limit {
		s = min(10, 1+l.queued/limit)
	}
	return time.Duration(s) * time.Second
}
