package limiter

import (
	"context"
	"sync"
	"time"
)

// LeakyBucketParams configures a leaky bucket (SPEC §3): a FIFO queue per key
// in front of the upstream. Requests leave one at a time, a request of cost
// c holding the exit for c intervals of 1/Rate (rounded up to the
// nanosecond, so the rate is never exceeded); an idle key lets the first
// request through at once. A request is rejected at once if Queue requests
// of its key are already waiting or if its wait would exceed MaxWait.
type LeakyBucketParams struct {
	Rate    Rate          // departures per period; must be positive
	Queue   int64         // requests that may wait, 0..MaxQueue
	MaxWait time.Duration // longest admissible wait, ≥ 0
	Cost    int64         // intervals each request holds the exit; 0 means 1
}

type leakyBucket struct {
	LeakyBucketParams
	interval int64 // ns between departures of cost 1
}

// NewLeakyBucket validates p and returns the limit.
func NewLeakyBucket(p LeakyBucketParams) (Limit, error) {
	if err := p.Rate.validate(); err != nil {
		return Limit{}, paramErr(LeakyBucket, "rate", "%v", err)
	}
	switch {
	case p.Queue < 0:
		return Limit{}, paramErr(LeakyBucket, "queue", "must not be negative")
	case p.Queue > MaxQueue:
		return Limit{}, paramErr(LeakyBucket, "queue", "%d is above the maximum of %d", p.Queue, MaxQueue)
	case p.MaxWait < 0:
		return Limit{}, paramErr(LeakyBucket, "max_wait", "must not be negative")
	}
	cost, err := checkCost(LeakyBucket, p.Cost, MaxCount, "the maximum")
	if err != nil {
		return Limit{}, err
	}
	p.Cost = cost
	return Limit{alg: LeakyBucket, cost: cost, lb: leakyBucket{p, p.Rate.interval()}}, nil
}

// LeakyBucketState is the state a Store keeps per key for a leaky bucket:
// one pointer, nil for a fresh key. While the key is busy it points to the
// key's queue, whose release timer runs under the lock the Store passes to
// StepLeakyBucket; once the last release's interval has passed the queue is
// idle, holds no timer, and the Store may forget it (LeakyBucketIdle).
type LeakyBucketState struct {
	q *leakyQueue
}

// leakyQueue is one key's FIFO and exit gate. All fields are guarded by mu,
// the Store's lock for the key.
//
// The gate is closed for spacing ns after each release: a request arriving
// at an open gate with nobody waiting leaves at once and closes it; one
// arriving at a closed gate waits. One timer per busy key fires when the
// gate opens; it releases the head (closing the gate again for the head's
// spacing) or, with nobody waiting, leaves the key idle. Each re-arm is a
// fresh timer interval measured from the release itself, so two releases
// are never closer than the first one's spacing whatever the timer's
// lateness. gateAt estimates when the gate opens, in the caller's clock, for
// Delay, Queue and MaxWait; a late timer only makes estimates slightly low
// until the next arrival corrects them.
type leakyQueue struct {
	mu      *sync.Mutex
	timer   *time.Timer
	busy    bool  // gate closed; timer armed
	gateAt  int64 // ns: when the gate opens
	pending int64 // ns: sum of the spacing of the waiters
	n       int64 // waiters
	head    *waiter
	tail    *waiter
}

// waiter is a request's place in a leakyQueue. Its fields are guarded by
// the queue's mu, except ready, which is closed once under mu.
type waiter struct {
	q          *leakyQueue
	prev, next *waiter
	spacing    int64 // ns the gate stays closed after this request leaves
	ready      chan struct{}
	released   bool
	removed    bool
}

// StepLeakyBucket applies a request of weight n at now to s (the state of
// limit l); see StepTokenBucket for commit. mu is the lock the caller holds
// for this key; the queue's release timer takes it too, so it must outlive
// the state. An admitted request that must wait gets a Decision whose Wait
// blocks until its release (or returns when its context ends, leaving the
// queue so that those behind move up).
//
// Memory: 8 bytes per key while idle (nil), plus about 150 bytes and one
// timer while busy, plus about 100 bytes per waiter. Waiters hold no
// goroutine besides their own.
func (l *Limit) StepLeakyBucket(s *LeakyBucketState, mu *sync.Mutex, now time.Time, n int64, commit bool) Decision {
	p := &l.lb
	c, ok := weighted(n, l.cost, MaxCount)
	if !ok {
		return never(p.Queue + 1)
	}
	spacing := satMul(c, p.interval)
	t := nanos(now)
	q := s.q
	d := Decision{Limit: p.Queue + 1}

	if q == nil || !q.busy {
		d.Allowed = true
		d.Remaining = p.Queue
		d.ResetAt = instant(satAdd(t, spacing))
		if commit {
			if q == nil {
				q = &leakyQueue{mu: mu}
				q.timer = time.AfterFunc(time.Duration(spacing), q.fire)
				s.q = q
			} else {
				q.timer.Reset(time.Duration(spacing))
			}
			q.busy, q.gateAt = true, t+spacing
		}
		return d
	}

	// A timer that is due but has not run yet opens the gate about now.
	gate := max(q.gateAt, t)
	if commit {
		q.gateAt = gate
	}
	leave := satAdd(gate, q.pending) // departure if admitted
	wait := leave - t
	if q.n >= p.Queue || wait > int64(p.MaxWait) {
		// Admissible once enough waiters have left for a free place and the
		// wait has shrunk to MaxWait.
		at := leave - int64(p.MaxWait)
		if q.n >= p.Queue {
			at = max(at, q.departure(gate, q.n-p.Queue))
		}
		d.RetryAfter = time.Duration(at - nanos(now))
		d.Remaining = 0
		d.ResetAt = instant(leave)
		return d
	}
	d.Allowed = true
	d.Delay = time.Duration(wait)
	d.Remaining = p.Queue - q.n - 1
	d.ResetAt = instant(satAdd(leave, spacing))
	if commit {
		w := &waiter{q: q, spacing: spacing, ready: make(chan struct{})}
		q.push(w)
		d.waiter = w
	}
	return d
}

// departure returns when the i-th waiter (0 = head) is released, if the gate
// opens at gate and nobody leaves.
func (q *leakyQueue) departure(gate, i int64) int64 {
	w := q.head
	for ; i > 0 && w != nil; i-- {
		gate = satAdd(gate, w.spacing)
		w = w.next
	}
	return gate
}

// fire runs when the gate opens.
func (q *leakyQueue) fire() {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.head
	if w == nil {
		q.busy = false
		return
	}
	q.unlink(w)
	w.released = true
	close(w.ready)
	q.gateAt = satAdd(q.gateAt, w.spacing)
	q.timer.Reset(time.Duration(w.spacing))
}

func (q *leakyQueue) push(w *waiter) {
	w.prev = q.tail
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
	q.n++
	q.pending = satAdd(q.pending, w.spacing)
}

func (q *leakyQueue) unlink(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
	w.removed = true
	q.n--
	q.pending -= w.spacing
}

// wait blocks until w is released or ctx ends; in the latter case w leaves
// the queue and is never released.
func (w *waiter) wait(ctx context.Context) error {
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	w.q.mu.Lock()
	if !w.removed {
		w.q.unlink(w)
	}
	w.q.mu.Unlock()
	// If the release raced with the cancellation, the place is spent, but
	// the client has gone: do not forward.
	return ctx.Err()
}

// LeakyBucketIdle reports whether s holds no queue, or an idle one: no
// waiter and the gate open. An idle state equals a fresh key's. The caller
// must hold the lock it passes to StepLeakyBucket.
func LeakyBucketIdle(s *LeakyBucketState) bool { return s.q == nil || !s.q.busy }

// LeakyBucketWaiting returns how many requests wait in s's queue. The caller
// must hold the lock it passes to StepLeakyBucket.
func LeakyBucketWaiting(s *LeakyBucketState) int64 {
	if s.q == nil {
		return 0
	}
	return s.q.n
}

func satMul(a, b int64) int64 {
	if a != 0 && b > (1<<63-1)/a {
		return 1<<63 - 1
	}
	return a * b
}
