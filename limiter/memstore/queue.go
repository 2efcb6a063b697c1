package memstore

import (
	"context"
	"math"
	"math/bits"
	"time"

	"github.com/limitproxy/limitproxy/limiter/driver"
)

// The leaky bucket's real queue (docs/algorithms.md): per busy key a FIFO
// of waiters and one timer that releases the head and re-arms itself; an
// idle key holds nothing but its 8-byte state and a nil pointer in its
// table's queues. The limit's step decides who may wait and for how long
// (driver.Limit.Step, told about the queue by a driver.Queue); the queue
// keeps the waiters, their places and the release schedule. Any queued
// limit (driver.Limit.Queued) gets one; the leaky bucket is the one.

// leakyQueue is one key's FIFO and exit gate while requests wait. All
// fields are guarded by sh.mu, the lock of the key's shard.
//
// One timer per busy key fires when the exit reopens; it releases the head
// (closing the exit again for the head's spacing) or, with nobody waiting,
// leaves the key idle. gateAt is when the exit reopens, in the clock of the
// instants the store is given.
//
// With a clock (Options.Clock), releases keep to a schedule: due is when
// the next release is due, one spacing after the previous one was due, and
// no release happens before it is due, so in any interval T at most
// ⌈T/spacing⌉ + 1 leave. Timers fire late (Go's by up to about a
// millisecond), and spacing each release from the previous one forwarded
// 1000/s as about 750/s; instead a release made late lets the next follow
// sooner, though no sooner than minGap of its spacing while the schedule
// is within reach, and at once when it is overdue too. A queue more than a
// spacing (at least timerSlack) behind, a stall, restarts its schedule from
// now rather than bursting. Without a clock, each release is timed from the
// previous one.
type leakyQueue struct {
	sh      *shard
	clock   func() time.Time // nil: time each release from the previous one
	virtual bool             // no timer: advance releases (Options.VirtualQueues)
	timer   *time.Timer
	busy    bool  // timer armed
	gateAt  int64 // ns: when the exit reopens
	due     int64 // ns: when the next release is due on the schedule
	// pending is the sum of the spacing of the waiters (ns), in 128 bits
	// (pendingHi the high word): a saturated spacing is 2^63−1 ns, so the
	// sum can pass int64, and it must come back exactly as waiters leave.
	pending, pendingHi uint64
	n                  int64 // waiters
	head               *waiter
	tail               *waiter
	// desc is the queue as the limit's step last saw it (describe,
	// describeIdle): kept here, in memory the queue has anyway, since a
	// description the step reads through an interface would otherwise
	// be allocated at each decision.
	desc driver.Queue
}

// waiter is a request's place in a leakyQueue. Its fields are guarded by
// the shard's lock, except ready, which is closed once under it.
type waiter struct {
	q          *leakyQueue
	prev, next *waiter
	spacing    int64 // ns the exit stays closed after this request leaves
	ticket     uint64
	ready      chan struct{}
	released   bool
	removed    bool
}

// describe returns q as the limit's step sees it at instant t (Unix
// ns), for a limit whose queue holds queue requests: q.desc, valid until
// the next description. Requires sh.mu held.
func (q *leakyQueue) describe(t, queue int64) *driver.Queue {
	q.desc = driver.Queue{Busy: q.busy, Gate: time.Unix(0, q.gateAt), Waiting: q.n, Pending: time.Duration(q.pendingNs())}
	if q.busy && q.n >= queue {
		q.desc.FreeAt = time.Unix(0, q.departure(max(q.gateAt, t), q.n-queue))
	}
	return &q.desc
}

// describeIdle returns q, which is not busy, as the step sees a key at
// rest: when its exit reopened last, q.desc as describe. Requires sh.mu
// held.
func (q *leakyQueue) describeIdle() *driver.Queue {
	q.desc = driver.Queue{Gate: time.Unix(0, q.gateAt)}
	return &q.desc
}

// enqueue gives an admitted request of the key at position i of tab a
// place at the end of its queue, holding the exit for spacing once it
// leaves, and returns its ticket. t is now (Unix ns) and delay the
// step's Delay. Requires sh.mu held.
func (tab *table) enqueue(s *Store, sh *shard, i int, t int64, delay, spacing time.Duration) uint64 {
	q := tab.queues[i]
	if q == nil {
		q = &leakyQueue{sh: sh, clock: s.clock, virtual: s.virtualQ}
		tab.queues[i] = q
	}
	if !q.busy {
		// The exit reopens at the head's departure: a new schedule.
		gate := t + int64(delay)
		switch {
		case q.virtual:
		case q.timer == nil:
			q.timer = time.AfterFunc(time.Duration(gate-t), q.fire)
		default:
			q.timer.Reset(time.Duration(gate - t))
		}
		q.busy, q.gateAt, q.due = true, gate, gate
	} else {
		// A timer due but not run yet reopens the exit about now.
		q.gateAt = max(q.gateAt, t)
	}
	sh.nextTicket++
	w := &waiter{q: q, spacing: int64(spacing), ready: make(chan struct{}), ticket: sh.ticketBase | sh.nextTicket}
	if sh.waiters == nil {
		sh.waiters = map[uint64]*waiter{}
	}
	sh.waiters[w.ticket] = w
	q.push(w)
	return w.ticket
}

// departure returns when the i-th waiter (0 = head) is released, if the
// exit reopens at gate and nobody leaves.
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
	q.sh.mu.Lock()
	defer q.sh.mu.Unlock()
	var now int64
	if q.clock != nil {
		now = q.clock().UnixNano()
	}
	if next, ok := q.release(now); ok {
		q.timer.Reset(time.Duration(next))
	}
}

// advance releases, in a virtual queue (Options.VirtualQueues), what the
// timer would have released by t had it fired on time. Requires sh.mu.
func (q *leakyQueue) advance(t int64) {
	for q.busy && q.gateAt <= t {
		q.release(q.gateAt)
	}
}

// release releases the head as the gate opens at now (Unix ns; unused
// without a clock, except in a virtual queue, where it is the gate's own
// instant): it returns when the gate reopens after now, false when nobody
// waited and the queue is idle. Requires sh.mu.
func (q *leakyQueue) release(now int64) (int64, bool) {
	w := q.head
	if w == nil {
		q.busy = false
		return 0, false
	}
	q.unlink(w)
	delete(q.sh.waiters, w.ticket)
	w.released = true
	close(w.ready)
	next := w.spacing
	if q.clock != nil || q.virtual {
		due := satAdd(q.due, w.spacing)
		switch lag := now - due; {
		case lag > max(w.spacing, int64(timerSlack)): // a stall: the next at once, and a new schedule from it
			due, next = now, 0
		case lag >= 0: // overdue: at once
			next = 0
		default: // catch up, gently
			next = max(due-now, w.spacing/100*minGap+w.spacing%100*minGap/100) // minGap% of it, without overflow
		}
		q.due = due
		q.gateAt = satAdd(now, next)
	} else {
		q.gateAt = satAdd(q.gateAt, w.spacing)
	}
	return next, true
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
	var carry uint64
	q.pending, carry = bits.Add64(q.pending, uint64(w.spacing), 0)
	q.pendingHi += carry
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
	var borrow uint64
	q.pending, borrow = bits.Sub64(q.pending, uint64(w.spacing), 0)
	q.pendingHi -= borrow
}

// pendingNs returns the waiters' total spacing in ns, saturating at
// math.MaxInt64.
func (q *leakyQueue) pendingNs() int64 {
	if q.pendingHi != 0 || q.pending > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q.pending)
}

// Wait implements limiter.Store: for a Decision with a Ticket, until the
// queue releases its request; for one with only a Delay (the Redis store's
// fallback decides here), until the Delay has passed.
func (s *Store) Wait(ctx context.Context, d driver.Decision) error {
	if d.Ticket == 0 {
		return sleep(ctx, d.Delay)
	}
	sh := &s.shards[d.Ticket>>ticketShardShift]
	sh.mu.Lock()
	w, ok := sh.waiters[d.Ticket]
	sh.mu.Unlock()
	if !ok {
		return nil // released before anyone waited
	}
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	sh.mu.Lock()
	if !w.removed {
		w.q.unlink(w)
		delete(sh.waiters, w.ticket)
	}
	sh.mu.Unlock()
	// If the release raced with the cancellation, the place is spent, but
	// the client has gone: do not forward.
	return ctx.Err()
}

// ticketShardShift places a shard's index in the top bits of its tickets.
const ticketShardShift = 48

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
