// Package concurrency limits the requests in flight to one upstream: a
// fixed limit, as HAProxy's maxconn, or an adaptive one learned from the
// latency and the errors the proxy observes (adaptive.go), with a bounded
// queue in front of it in which requests wait for a slot, priority
// classes with a reserved share of the slots each, a fair share of the
// slots per client key, and shedding that answers at once rather than
// after a wait that could not end in time.
//
// Time comes from the clock given to New, and waits use time's timers, so
// tests run it under testing/synctest with exact instants.
package concurrency

import (
	"context"
	"errors"
	"maps"
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
	// Classes are the priority classes, highest first; a request names
	// its class by index when it asks for a slot. Empty: one class.
	Classes []Class
}

// Class is a priority class. Requests of a higher class (listed earlier)
// take the slots that free up before those of lower ones, and may push
// the newest waiter of a lower class out of a full queue; Reserve keeps a
// share of the slots for the class alone.
type Class struct {
	Name string
	// Reserve is the share of the limit, from 0 to below 1, that only
	// this class's requests may take: floor(Reserve × limit) slots are
	// left free for it while it has fewer in flight, whatever waits in
	// other classes. The reserves of all classes add up to less than 1.
	Reserve float64
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
	// Classes are the priority classes' figures, in Params.Classes's
	// order; nil when there are none.
	Classes []ClassStats
}

// Limiter is one upstream's concurrency limit. Safe for concurrent use.
type Limiter struct {
	p   Params
	now func() time.Time

	mu       sync.Mutex
	inFlight int
	queued   int                 // live waiters
	keys     map[keyID]*keyState // keys with requests in flight or waiting
	ctl      *controller         // nil: a fixed limit
	shed     map[Reason]uint64
	waited   uint64
	classes  []classState // at least one
}

// classState is one priority class's requests.
type classState struct {
	Class
	inFlight int
	queued   int         // live waiters
	rr       []*keyState // keys with waiters, in round-robin order
	next     int         // rr index served next
	shed     map[Reason]uint64
}

// keyState is one client key's share in one class.
type keyState struct {
	id       keyID
	inFlight int
	waiters  []*waiter // FIFO; cancelled ones are skipped
	inRR     bool
}

// keyID names a keyState: a client key in a class.
type keyID struct {
	key   string
	class int
}

// waiter is a request waiting for a slot.
type waiter struct {
	ready   chan struct{} // closed when granted or pushed out
	granted bool
	gone    bool   // timed out, cancelled or pushed out: skipped
	pushed  bool   // pushed out of a full queue by a higher class
	ticket  Ticket // set when granted
}

// New returns a limiter with p's settings; now is its clock.
func New(p Params, now func() time.Time) *Limiter {
	l := &Limiter{p: p, now: now, keys: map[keyID]*keyState{}, shed: map[Reason]uint64{}}
	classes := p.Classes
	if len(classes) == 0 {
		classes = []Class{{}}
	}
	for _, c := range classes {
		l.classes = append(l.classes, classState{Class: c, shed: map[Reason]uint64{}})
	}
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
	// The limit and the requests in flight (this one included, and the
	// slots reserved for other classes) when it was let through, and the
	// controller's epoch then.
	limit, inFlight int
	epoch           uint64
}

// Acquire takes a slot for a request from key ("" when the request has
// none: one shared key) in priority class class (an index into
// Params.Classes; 0 when there are none), waiting in the queue if need be
// until ctx ends. A request turned away gets a *Shed error (ErrShed),
// ctx's error if ctx ended first. In shadow mode it never waits and never
// fails; waited reports whether it would have waited.
func (l *Limiter) Acquire(ctx context.Context, key string, class int) (t Ticket, waited bool, err error) {
	if class < 0 || class >= len(l.classes) {
		class = len(l.classes) - 1
	}
	now := l.now()
	l.mu.Lock()
	limit := l.limitLocked(now)
	ks := l.keyLocked(key, class)
	cs := &l.classes[class]
	if l.p.Shadow {
		if !l.mayTakeLocked(class, limit) {
			if reason, _ := l.admitLocked(class, limit, now); reason != "" {
				l.shed[reason]++
				cs.shed[reason]++
			} else {
				waited = true
			}
		}
		t = l.grantLocked(ks, limit, now)
		l.mu.Unlock()
		return t, waited, nil
	}
	if l.mayTakeLocked(class, limit) && l.queuedAheadLocked(class) == 0 {
		t = l.grantLocked(ks, limit, now)
		l.mu.Unlock()
		return t, false, nil
	}
	reason, wait := l.admitLocked(class, limit, now)
	if reason == ReasonQueueFull && l.queued >= l.p.Queue && l.pushOutLocked(class) {
		reason, wait = l.admitLocked(class, limit, now)
	}
	if reason != "" {
		l.shed[reason]++
		cs.shed[reason]++
		retry := l.retryAfterLocked()
		l.dropKeyLocked(ks)
		l.mu.Unlock()
		return Ticket{}, false, &Shed{Reason: reason, RetryAfter: retry}
	}
	w := &waiter{ready: make(chan struct{})}
	ks.waiters = append(ks.waiters, w)
	if !ks.inRR {
		ks.inRR = true
		cs.rr = append(cs.rr, ks)
	}
	l.queued++
	cs.queued++
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
	switch {
	case w.granted:
		// Granted as the wait ended: the slot is the request's.
		l.waited++
		return w.ticket, true, nil
	case w.pushed:
		// Already out of the queue (pushOutLocked).
		cause = &Shed{Reason: ReasonQueueFull}
	default:
		w.gone = true
		l.queued--
		cs.queued--
		l.trimLocked(ks)
	}
	if s, ok := cause.(*Shed); ok {
		l.shed[s.Reason]++
		cs.shed[s.Reason]++
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
	l.classes[t.ks.id.class].inFlight--
	t.ks.inFlight--
	l.dropKeyLocked(t.ks)
	if l.ctl != nil {
		l.ctl.observe(sample{sent: t.sent, latency: latency, outcome: o, limit: t.limit, inFlight: t.inFlight, epoch: t.epoch}, l.inFlight, l.queued, now)
	}
	l.dispatchLocked(now)
}

// ClassStats are one priority class's figures in Stats.
type ClassStats struct {
	Name     string
	Reserved int // slots kept for the class at the limit in force
	InFlight int
	Queued   int
	Shed     map[Reason]uint64
}

// Stats returns the limiter's figures.
func (l *Limiter) Stats() Stats {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{Limit: l.limitLocked(now), InFlight: l.inFlight, Queued: l.queued, Shed: maps.Clone(l.shed), Waited: l.waited}
	s.Learned = s.Limit
	if l.ctl != nil {
		s.Baseline = l.ctl.base
		s.Learned = l.ctl.clamp(l.ctl.l)
		s.Probing = l.ctl.probing
	}
	if len(l.p.Classes) > 0 {
		for i := range l.classes {
			cs := &l.classes[i]
			s.Classes = append(s.Classes, ClassStats{Name: cs.Name, Reserved: cs.reserved(s.Limit), InFlight: cs.inFlight, Queued: cs.queued, Shed: maps.Clone(cs.shed)})
		}
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

// reserved is the slots kept for the class at limit.
func (c *classState) reserved(limit int) int {
	return int(math.Floor(c.Reserve * float64(limit)))
}

// heldBackLocked is the free slots that class may not take at limit:
// those reserved for the other classes that they do not use.
func (l *Limiter) heldBackLocked(class, limit int) int {
	held := 0
	for i := range l.classes {
		if cs := &l.classes[i]; i != class && cs.Reserve > 0 {
			held += max(0, cs.reserved(limit)-cs.inFlight)
		}
	}
	return held
}

// mayTakeLocked reports whether a request of class may have a slot now.
func (l *Limiter) mayTakeLocked(class, limit int) bool {
	return l.inFlight+1+l.heldBackLocked(class, limit) <= limit
}

// queuedAheadLocked is the requests waiting in class and the classes
// above it: those a request of class would wait behind.
func (l *Limiter) queuedAheadLocked(class int) int {
	n := 0
	for i := 0; i <= class; i++ {
		n += l.classes[i].queued
	}
	return n
}

func (l *Limiter) keyLocked(key string, class int) *keyState {
	id := keyID{key: key, class: class}
	ks := l.keys[id]
	if ks == nil {
		ks = &keyState{id: id}
		l.keys[id] = ks
	}
	return ks
}

// dropKeyLocked forgets ks once it has nothing in flight or waiting, so
// that the keys held are bounded by the requests in flight and queued.
func (l *Limiter) dropKeyLocked(ks *keyState) {
	if ks.inFlight == 0 && !ks.inRR {
		delete(l.keys, ks.id)
	}
}

func (l *Limiter) grantLocked(ks *keyState, limit int, now time.Time) Ticket {
	l.inFlight++
	l.classes[ks.id.class].inFlight++
	ks.inFlight++
	// In flight as the class sees it: the slots held back for other
	// classes count, so that an adaptive limit that binds for the
	// unreserved traffic is seen to bind.
	inFlight := l.inFlight + l.heldBackLocked(ks.id.class, limit)
	if l.ctl != nil {
		l.ctl.dispatched(inFlight, limit)
	}
	return Ticket{l: l, ks: ks, sent: now, limit: limit, inFlight: inFlight, epoch: l.epochLocked()}
}

// admitLocked decides whether a request of class that finds no free slot
// may wait, and for how long at most: "" and the wait, or why not.
func (l *Limiter) admitLocked(class, limit int, now time.Time) (Reason, time.Duration) {
	if l.queued >= l.p.Queue || l.p.MaxWait <= 0 {
		return ReasonQueueFull, 0
	}
	if l.ctl == nil {
		return "", l.p.MaxWait
	}
	return l.ctl.admit(l.queuedAheadLocked(class), limit, l.p.MaxWait, now)
}

// pushOutLocked makes room in a full queue for a request of class: the
// newest waiter of the key with the most waiting in the lowest class
// below class that has any is shed (queue_full). It reports whether one
// was.
func (l *Limiter) pushOutLocked(class int) bool {
	for c := len(l.classes) - 1; c > class; c-- {
		cs := &l.classes[c]
		if cs.queued == 0 {
			continue
		}
		var victim *keyState
		most := 0
		for _, ks := range cs.rr {
			if n := liveWaiters(ks); n > most {
				victim, most = ks, n
			}
		}
		if victim == nil {
			continue
		}
		for i := len(victim.waiters) - 1; i >= 0; i-- {
			if w := victim.waiters[i]; !w.gone {
				w.gone, w.pushed = true, true
				l.queued--
				cs.queued--
				close(w.ready)
				break
			}
		}
		if victim.waiters[0].gone {
			l.trimLocked(victim)
		}
		return true
	}
	return false
}

func liveWaiters(ks *keyState) int {
	n := 0
	for _, w := range ks.waiters {
		if !w.gone {
			n++
		}
	}
	return n
}

// trimLocked drops the waiters that have gone from the head of ks's
// queue, and ks from its class's rotation once none is left waiting.
func (l *Limiter) trimLocked(ks *keyState) {
	for len(ks.waiters) > 0 && ks.waiters[0].gone {
		ks.waiters[0] = nil
		ks.waiters = ks.waiters[1:]
	}
	if len(ks.waiters) > 0 || !ks.inRR {
		return
	}
	cs := &l.classes[ks.id.class]
	i := slices.Index(cs.rr, ks)
	cs.rr = slices.Delete(cs.rr, i, i+1)
	if cs.next > i {
		cs.next--
	}
	ks.inRR = false
	ks.waiters = nil
	l.dropKeyLocked(ks)
}

// dispatchLocked hands free slots to waiters: to the highest class that
// has waiters and may take a slot, and in it round-robin over the keys
// waiting, skipping a key at its fair share (the limit over the keys
// with requests in flight or waiting, rounded up) while another key can
// take the slot.
func (l *Limiter) dispatchLocked(now time.Time) {
	for l.queued > 0 {
		limit := l.limitLocked(now)
		if l.inFlight >= limit {
			return
		}
		var ks *keyState
		for c := range l.classes {
			if l.classes[c].queued > 0 && l.mayTakeLocked(c, limit) {
				if ks = l.pickLocked(c, limit); ks != nil {
					break
				}
			}
		}
		if ks == nil {
			return
		}
		w := ks.waiters[0]
		ks.waiters[0] = nil
		ks.waiters = ks.waiters[1:]
		w.granted = true
		l.queued--
		l.classes[ks.id.class].queued--
		w.ticket = l.grantLocked(ks, limit, now)
		l.trimLocked(ks)
		close(w.ready)
	}
}

// pickLocked returns the next key of class in round-robin order with a
// live waiter, under its fair share if FairShare and any key is; keys
// left without waiters leave the rotation.
func (l *Limiter) pickLocked(class, limit int) *keyState {
	cs := &l.classes[class]
	share := math.MaxInt
	if l.p.FairShare && len(l.keys) > 1 {
		share = (limit + len(l.keys) - 1) / len(l.keys)
	}
	var over *keyState // the first with a waiter, whatever its share
	for seen := 0; seen < len(cs.rr); {
		if cs.next >= len(cs.rr) {
			cs.next = 0
		}
		ks := cs.rr[cs.next]
		if l.trimLocked(ks); !ks.inRR {
			continue
		}
		cs.next++
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
