package driver

import (
	"math"
	"time"
)

// LeakyBucketParams configures a leaky bucket (docs/algorithms.md): a FIFO queue per key
// in front of the upstream. Requests leave one at a time, a request of cost
// c holding the exit for c intervals of 1/Rate (rounded up to the
// nanosecond, so the rate is never exceeded); an idle key lets the first
// request through at once. A request is rejected at once if Queue requests
// of its key are already waiting or if its wait would exceed MaxWait.
//
// Delay is nginx's two-stage limit_req delay=: each request keeps its
// place on the schedule, but leaves Delay intervals before it, so the
// first Delay intervals' worth of a burst (Delay requests of cost 1) is
// forwarded at once and only the rest waits — nginx's burst=B delay=D is
// Queue = B − D, Delay = D. 0 is the plain leaky bucket.
type LeakyBucketParams struct {
	Rate    Rate          // departures per period; must be positive
	Queue   int64         // requests that may wait, 0..MaxQueue
	MaxWait time.Duration // longest admissible wait, ≥ 0
	Cost    int64         // intervals each request holds the exit; 0 means 1
	Delay   int64         // intervals of a burst forwarded at once, 0..MaxQueue
}

type leakyBucket struct {
	LeakyBucketParams
	interval int64 // ns between departures of cost 1
	lead     int64 // ns a request leaves before its place: Delay intervals
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
	case p.Delay < 0:
		return Limit{}, paramErr(LeakyBucket, "delay", "must not be negative")
	case p.Delay > MaxQueue:
		return Limit{}, paramErr(LeakyBucket, "delay", "%d is above the maximum of %d", p.Delay, MaxQueue)
	}
	cost, err := checkCost(LeakyBucket, p.Cost, MaxCount, "the maximum")
	if err != nil {
		return Limit{}, err
	}
	p.Cost = cost
	interval := p.Rate.interval()
	return Limit{alg: LeakyBucket, cost: cost, lb: leakyBucket{p, interval, satMul(p.Delay, interval)}}, nil
}

// LeakyBucketState is what a Store keeps per key for a leaky bucket
// besides its queue: when the exit reopens after a request that left at
// once. 8 bytes; its zero value is a fresh key.
type LeakyBucketState struct {
	open uint64 // biased instant the exit reopens; 0 = fresh
}

// LeakyQueue is what a Store tells the leaky bucket's step about the
// requests of one key waiting in its queue. The Store keeps the queue
// itself (its FIFO, its release timer, its clock); the step only decides.
// The zero value is a key with no queue.
type LeakyQueue struct {
	// Busy: the queue's release timer runs (requests wait, or the last
	// release holds the exit closed for its spacing).
	Busy bool
	// Gate is when the exit reopens for the next release; for a queue that
	// is not busy, when it reopened last (zero: never).
	Gate time.Time
	// Waiting is how many requests wait; Pending the exit time they hold
	// together (the sum of their spacings).
	Waiting int64
	Pending time.Duration
	// FreeAt is when a place frees in a full queue: the release of waiter
	// Waiting − Queue (0 = the head) if nobody leaves early. Read only
	// when Waiting ≥ Queue.
	FreeAt time.Time
}

// StepLeakyBucket decides a request of weight n at now, the state s of
// limit l and its queue q as the Store describes it (nil: the key has no
// queue). A request that finds
// the exit open and nobody waiting leaves at once, closing the exit for
// its spacing (s records when it reopens). Otherwise it is admitted with a
// Delay — its departure, one spacing after the requests ahead — if its
// queue has room and the wait is at most MaxWait; the Store then queues it
// (with LeakyBucketSpacing(n)) and releases it at that departure or, as
// waiters ahead leave, sooner. Rejections and queued admissions leave s
// unchanged.
//
// Memory: 8 bytes per key; the Store's queue while requests wait.
func (l *Limit) StepLeakyBucket(s *LeakyBucketState, q *LeakyQueue, now time.Time, n int64) Decision {
	return l.stepLeakyBucket(s, q, now, n, true)
}

// PeekLeakyBucket returns the decision StepLeakyBucket would return,
// leaving s unchanged.
func (l *Limit) PeekLeakyBucket(s *LeakyBucketState, q *LeakyQueue, now time.Time, n int64) Decision {
	return l.stepLeakyBucket(s, q, now, n, false)
}

func (l *Limit) stepLeakyBucket(s *LeakyBucketState, q *LeakyQueue, now time.Time, n int64, commit bool) Decision {
	p := &l.lb
	c, ok := weighted(n, l.cost, MaxCount)
	if !ok {
		return never(p.Queue + 1)
	}
	spacing := satMul(c, p.interval)
	t := nanos(now)
	d := Decision{Limit: p.Queue + 1 + p.Delay}

	// gate is when the exit reopens for the next request, in real time: a
	// request's place on the schedule less the lead (Delay intervals).
	var gate, waiting, pending int64
	if q != nil && q.Busy {
		// A timer that is due but has not run yet reopens the exit about now.
		gate, waiting, pending = max(nanos(q.Gate), t), q.Waiting, int64(q.Pending)
	} else if place := s.gate(q, p.lead); place <= satAdd(t, p.lead) {
		// The exit is open (or within the lead) and nobody waits: leave at
		// once, taking the next place on the schedule.
		open := satAdd(max(place, t), spacing)
		d.Allowed = true
		// Requests of cost 1 that would still leave at once, then wait.
		var k int64
		if open-t <= p.lead {
			k = (t+p.lead-open)/p.interval + 1
		}
		d.Remaining = p.Queue + k
		d.ResetAt = instant(open)
		d.Next = time.Duration(satAdd(open-p.lead, satMul(k, p.interval)) - t)
		if commit {
			s.open = bias(open)
		}
		return d
	} else {
		gate = place - p.lead
	}

	leave := satAdd(gate, pending) // departure if admitted
	wait := leave - t
	if waiting >= p.Queue || wait > int64(p.MaxWait) {
		// Admissible once enough waiters have left for a free place and the
		// wait has shrunk to MaxWait.
		at := leave - int64(p.MaxWait)
		if waiting >= p.Queue {
			free := gate // no queue: the exit's reopening frees the one place
			if q != nil && q.Busy {
				free = nanos(q.FreeAt)
			}
			at = max(at, free)
		}
		d.RetryAfter = time.Duration(at - t)
		d.ResetAt = instant(satAdd(leave, p.lead))
		// A place frees when the head leaves (or the exit reopens), but
		// under max_wait the request may be admissible sooner.
		d.Next = time.Duration(min(gate, at) - t)
		return d
	}
	d.Allowed = true
	d.Delay = time.Duration(wait)
	d.Remaining = p.Queue - waiting - 1
	d.ResetAt = instant(satAdd(satAdd(leave, spacing), p.lead))
	d.Next = time.Duration(gate - t) // the head's departure frees a place
	return d
}

// gate returns the next place on the schedule of a key whose queue is not
// busy: when its exit reopens, lead (Delay intervals) later than the real
// time the queue last released at.
func (s *LeakyBucketState) gate(q *LeakyQueue, lead int64) int64 {
	g := int64(math.MinInt64)
	if s.open != 0 {
		g = unbias(s.open)
	}
	if q != nil && !q.Gate.IsZero() {
		g = max(g, satAdd(nanos(q.Gate), lead))
	}
	return g
}

// DrainTime returns how long a full queue of requests of weight 1 takes
// to leave: Queue+1 requests (the one leaving and those waiting) of Cost
// intervals of 1/Rate each, an interval rounded up to the nanosecond as
// the bucket spaces them. It is the default max_wait, with which only
// Queue bounds the wait. Cost 0 counts as 1.
func (p LeakyBucketParams) DrainTime() time.Duration {
	if p.Rate.validate() != nil {
		return 0
	}
	return time.Duration(satMul(satMul(p.Queue+1, max(p.Cost, 1)), p.Rate.interval()))
}

// LeakyBucketSpacing returns how long a request of weight n holds the exit
// of leaky bucket l: its cost in intervals of 1/Rate (rounded up to the
// nanosecond, so that the rate is never exceeded).
func (l *Limit) LeakyBucketSpacing(n int64) time.Duration {
	return time.Duration(satMul(satMul(n, l.cost), l.lb.interval))
}

// LeakyBucketReopensAt returns when the schedule of s, and of its queue q
// if it has one (not busy), is free again: from then on the key is a fresh
// one and a Store may forget it. A fresh state returns the zero Time.
func (l *Limit) LeakyBucketReopensAt(s *LeakyBucketState, q *LeakyQueue) time.Time {
	if s.open == 0 && (q == nil || q.Gate.IsZero()) {
		return time.Time{}
	}
	return instant(s.gate(q, l.lb.lead))
}

func satMul(a, b int64) int64 {
	if a != 0 && b > (1<<63-1)/a {
		return 1<<63 - 1
	}
	return a * b
}
