package limiter

import (
	"context"
	"math"
	"sync"
	"time"
)

// LeakyBucketParams configures a leaky bucket (docs/algorithms.md): a FIFO queue per key
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
// 16 bytes, and its zero value is a fresh key. A request that finds the exit
// open leaves at once and only closes it (an instant in the state: no
// allocation, no timer). Only when a request must wait does the key get a
// queue, whose one release timer runs under the lock the Store passes to
// StepLeakyBucket; once nobody waits and the exit has reopened, the queue
// holds no timer and the Store may forget the key (LeakyBucketIdleAt).
type LeakyBucketState struct {
	open uint64 // biased instant the exit reopens after a direct release; 0 = fresh
	q    *leakyQueue
}

// gate returns when the exit of an un-busy key reopens.
func (s *LeakyBucketState) gate() int64 {
	g := int64(math.MinInt64)
	if s.open != 0 {
		g = unbias(s.open)
	}
	if s.q != nil {
		g = max(g, s.q.gateAt)
	}
	return g
}

// leakyQueue is one key's FIFO and exit gate while requests wait. All fields
// are guarded by mu, the Store's lock for the key.
//
// One timer per busy key fires when the exit reopens; it releases the head
// (closing the exit again for the head's spacing) or, with nobody waiting,
// leaves the key idle. gateAt is when the exit reopens, in the caller's
// clock.
//
// With a clock (the one the caller's instants come from), releases keep to
// a schedule: due is when the next release is due, one spacing after the
// previous one was due, and no release happens before it is due, so in any
// interval T at most ⌈T/spacing⌉ + 1 leave. Timers fire late (Go's by up
// to about a millisecond), and spacing each release from the previous one
// forwarded 1000/s as about 750/s; instead a release made late lets the
// next follow sooner, though no sooner than minGap of its spacing while
// the schedule is within reach, and at once when it is overdue too. A
// queue more than a spacing (at least timerSlack) behind, a stall,
// restarts its schedule from now rather than bursting. Without a clock,
// each release is timed from the previous one.
type leakyQueue struct {
	mu      *sync.Mutex
	clock   func() time.Time // nil: time each release from the previous one
	timer   *time.Timer
	busy    bool  // timer armed
	gateAt  int64 // ns: when the exit reopens
	due     int64 // ns: when the next release is due on the schedule
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
	spacing    int64 // ns the exit stays closed after this request leaves
	ready      chan struct{}
	released   bool
	removed    bool
}

// StepLeakyBucket applies a request of weight n at now to s (the state of
// limit l); see StepTokenBucket for commit. mu is the lock the caller holds
// for this key; the queue's release timer takes it too, so it must outlive
// the state. clock, if not nil, is the clock now comes from; the queue
// reads it to keep its releases on schedule (see leakyQueue). An admitted
// request that must wait gets a Decision whose Wait blocks until its
// release (or returns when its context ends, leaving the queue so that
// those behind move up).
//
// Memory: 16 bytes per key; while requests wait, about 150 bytes and one
// timer for the key and about 100 bytes per waiter. Waiters hold no
// goroutine besides their own.
func (l *Limit) StepLeakyBucket(s *LeakyBucketState, mu *sync.Mutex, clock func() time.Time, now time.Time, n int64, commit bool) Decision {
	p := &l.lb
	c, ok := weighted(n, l.cost, MaxCount)
	if !ok {
		return never(p.Queue + 1)
	}
	spacing := satMul(c, p.interval)
	t := nanos(now)
	q := s.q
	busy := q != nil && q.busy
	d := Decision{Limit: p.Queue + 1}

	var gate, waiting, pending int64
	if busy {
		// A timer that is due but has not run yet reopens the exit about now.
		gate, waiting, pending = max(q.gateAt, t), q.n, q.pending
	} else if gate = s.gate(); gate <= t {
		// The exit is open and nobody waits: leave at once.
		d.Allowed = true
		d.Remaining = p.Queue
		d.ResetAt = instant(satAdd(t, spacing))
		if commit {
			s.open = bias(satAdd(t, spacing))
		}
		return d
	}

	leave := satAdd(gate, pending) // departure if admitted
	wait := leave - t
	if waiting >= p.Queue || wait > int64(p.MaxWait) {
		// Admissible once enough waiters have left for a free place and the
		// wait has shrunk to MaxWait.
		at := leave - int64(p.MaxWait)
		if waiting >= p.Queue {
			at = max(at, q.departure(gate, waiting-p.Queue))
		}
		d.RetryAfter = time.Duration(at - t)
		d.ResetAt = instant(leave)
		return d
	}
	d.Allowed = true
	d.Delay = time.Duration(wait)
	d.Remaining = p.Queue - waiting - 1
	d.ResetAt = instant(satAdd(leave, spacing))
	if commit {
		switch {
		case q == nil:
			q = &leakyQueue{mu: mu, clock: clock}
			q.timer = time.AfterFunc(time.Duration(gate-t), q.fire)
			s.q = q
		case !busy:
			q.timer.Reset(time.Duration(gate - t))
		}
		if !busy {
			q.due = gate // a new schedule
		}
		q.busy, q.gateAt = true, gate
		w := &waiter{q: q, spacing: spacing, ready: make(chan struct{})}
		q.push(w)
		d.waiter = w
	}
	return d
}

// departure returns when the i-th waiter (0 = head) is released, if the
// exit reopens at gate and nobody leaves. q may be nil when i is 0.
func (q *leakyQueue) departure(gate, i int64) int64 {
	if i == 0 {
		return gate
	}
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
	next := w.spacing
	if q.clock != nil {
		now := nanos(q.clock())
		due := satAdd(q.due, w.spacing)
		switch lag := now - due; {
		case lag > max(w.spacing, int64(timerSlack)): // a stall: the next at once, and a new schedule from it
			due, next = now, 0
		case lag >= 0: // overdue: at once
			next = 0
		default: // catch up, gently
			next = max(due-now, satMul(w.spacing, minGap)/100)
		}
		q.due = due
		q.gateAt = satAdd(now, next)
	} else {
		q.gateAt = satAdd(q.gateAt, w.spacing)
	}
	q.timer.Reset(time.Duration(next))
}

// minGap is the shortest gap, in percent of a spacing, between a late
// release and the next while the schedule is within reach.
const minGap = 90

// timerSlack bounds how far behind its schedule a queue may fall and
// still catch up rather than start a new schedule (or a spacing, if that
// is longer). Timers fire late routinely (Go's wait for the network poller
// counts whole milliseconds) and more so when a busy neighbour takes the
// CPU; at 1000/s, where a spacing is shorter than that, 2 ms forwarded
// 980–987/s beside a CPU-bound process and 10 ms 1000/s. Catching up
// releases at most timerSlack's worth of the rate at once, never ahead of
// the schedule.
const timerSlack = 10 * time.Millisecond

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

// LeakyBucketIdleAt returns when s equals a fresh key's state if nothing
// arrives: when its exit reopens, or the maximal Time while requests wait
// (such a key must not be forgotten). The caller must hold the lock it
// passes to StepLeakyBucket.
func LeakyBucketIdleAt(s *LeakyBucketState) time.Time {
	switch {
	case s.q != nil && s.q.busy:
		return instant(math.MaxInt64)
	case s.open == 0 && s.q == nil:
		return time.Time{}
	}
	return instant(s.gate())
}

func satMul(a, b int64) int64 {
	if a != 0 && b > (1<<63-1)/a {
		return 1<<63 - 1
	}
	return a * b
}
