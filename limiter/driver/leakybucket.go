package driver

import (
	"fmt"
	"math"
	"time"
)

// LeakyBucketParams configures a leaky bucket (docs/algorithms.md): a
// FIFO queue per key in front of the upstream. Requests leave one at a
// time, a request of cost c holding the exit for c intervals of 1/Rate
// (rounded up to the nanosecond, so the rate is never exceeded); an idle
// key lets the first request through at once. A request is rejected at
// once if Queue requests of its key are already waiting, or if its wait
// would exceed MaxWait; an admitted one carries its wait in
// Decision.Delay, and limiter.Limiter.Wait waits it out. Memory: 8 bytes
// of state per key, and the Store's queue while requests wait. The zero
// value is not valid (it has no rate).
//
// Delay is nginx's two-stage limit_req delay=: each request keeps its
// place on the schedule, but leaves Delay intervals before it, so the
// first Delay intervals' worth of a burst (Delay requests of cost 1) is
// forwarded at once and only the rest waits — nginx's burst=B delay=D is
// Queue = B − D, Delay = D. 0 is the plain leaky bucket.
type LeakyBucketParams struct {
	Rate    Rate          // departures per period; must be valid
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

// NewLeakyBucket validates p and returns the limit, or a *ParamError.
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
	return Limit{alg: LeakyBucket, cost: cost, a: &leakyBucket{p, interval, satMul(p.Delay, interval)}}, nil
}

func (*leakyBucket) name() string { return "leaky_bucket" }

func (*leakyBucket) keys() (takes, requires []string) {
	return []string{"rate", "queue", "max_wait", "delay", "cost"}, []string{"rate"}
}

// build defaults max_wait to the time the full queue takes to drain at
// the limit's cost (DrainTime), so that only queue bounds the wait.
func (*leakyBucket) build(s Spec) (Limit, error) {
	p := LeakyBucketParams{Rate: s.Rate, Queue: s.Queue, MaxWait: s.MaxWait, Delay: s.Delay, Cost: s.Cost}
	if s.unset("max_wait", int64(s.MaxWait)) {
		p.MaxWait = p.DrainTime()
	}
	return NewLeakyBucket(p)
}

func (b *leakyBucket) params() any { return b.LeakyBucketParams }

// quota is queue+1+delay requests of cost 1 over the time they take to
// leave at the rate.
func (b *leakyBucket) quota() (int64, time.Duration) {
	return b.Queue + 1 + b.Delay, time.Duration(mulDivCeil(b.Queue+1+b.Delay, int64(b.Rate.Per), b.Rate.N))
}

func (b *leakyBucket) describe() string {
	s := fmt.Sprintf("rate=%v queue=%d max_wait=%v", b.Rate, b.Queue, b.MaxWait)
	if b.Delay != 0 {
		s += fmt.Sprintf(" delay=%d", b.Delay)
	}
	return s
}

// stateName: a schedule means the same under any rate.
func (b *leakyBucket) stateName() string { return "" }

// scaled scales the rate; the queue stays.
func (b *leakyBucket) scaled(s float64) (Limit, error) {
	p := b.LeakyBucketParams
	p.Rate.N = scaleCount(p.Rate.N, s, MaxCount)
	return NewLeakyBucket(p)
}

// script returns the parameters of leaky_bucket in decide.lua: the
// interval between departures of cost 1 in µs (rounded up), queue,
// max_wait in µs, cost, and the lead (delay intervals) in µs.
func (b *leakyBucket) script() ([5]int64, error) {
	per, err := scriptMicros(LeakyBucket, b.Rate.Per, "the rate's period", "rate")
	if err != nil {
		return [5]int64{}, err
	}
	wait, err := scriptMicros(LeakyBucket, b.MaxWait, "max_wait", "max_wait")
	if err != nil {
		return [5]int64{}, err
	}
	interval := (per + b.Rate.N - 1) / b.Rate.N
	if b.Delay > 0 && interval > scriptExact/b.Delay {
		return [5]int64{}, scriptTooBig(LeakyBucket, "delay")
	}
	return [5]int64{interval, b.Queue, wait, b.Cost, b.Delay * interval}, nil
}

func (b *leakyBucket) queueSize() int64 { return b.Queue }

// spacing is the request's cost in intervals of 1/Rate (rounded up to
// the nanosecond, so that the rate is never exceeded).
func (b *leakyBucket) spacing(n int64) time.Duration {
	return time.Duration(satMul(satMul(n, b.Cost), b.interval))
}

// leakyBucketState is a leaky bucket's state of one key besides its
// queue: when the exit reopens after a request that left at once. 8
// bytes; its zero value is a fresh key.
type leakyBucketState struct {
	open uint64 // biased instant the exit reopens; 0 = fresh
}

func (b *leakyBucket) newStates(n int) States { return make(array[leakyBucketState], n) }

// idleAt is when the schedule of s, and of its queue q if it has one (not
// busy), is free again.
func (b *leakyBucket) idleAt(st States, i int, q *Queue) time.Time {
	var fresh leakyBucketState
	s := stateAt(st, i, &fresh)
	if s.open == 0 && (q == nil || q.Gate.IsZero()) {
		return time.Time{}
	}
	return instant(s.gate(q, b.lead))
}

// step decides a request of weight n at now, on state i of st (st nil: a
// fresh key's) and its queue q as the Store describes it (nil: the key
// has no queue). A
// request that finds the exit open and nobody waiting leaves at once,
// closing the exit for its spacing (s records when it reopens).
// Otherwise it is admitted with a Delay — its departure, one spacing
// after the requests ahead — if its queue has room and the wait is at
// most MaxWait; the Store then queues it (with spacing(n)) and releases
// it at that departure or, as waiters ahead leave, sooner. Rejections and
// queued admissions leave s unchanged; so does commit false.
//
// Memory: 8 bytes per key; the Store's queue while requests wait.
func (b *leakyBucket) step(st States, i int, q *Queue, now time.Time, n int64, commit bool) (d Decision) {
	var fresh leakyBucketState
	s := stateAt(st, i, &fresh)
	c, ok := weighted(n, b.Cost, MaxCount)
	if !ok {
		return never(b.Queue + 1)
	}
	spacing := satMul(c, b.interval)
	t := nanos(now)
	d = Decision{Limit: b.Queue + 1 + b.Delay}

	// gate is when the exit reopens for the next request, in real time: a
	// request's place on the schedule less the lead (Delay intervals).
	var gate, waiting, pending int64
	if q != nil && q.Busy {
		// A timer that is due but has not run yet reopens the exit about now.
		gate, waiting, pending = max(nanos(q.Gate), t), q.Waiting, int64(q.Pending)
	} else if place := s.gate(q, b.lead); place <= satAdd(t, b.lead) {
		// The exit is open (or within the lead) and nobody waits: leave at
		// once, taking the next place on the schedule.
		open := satAdd(max(place, t), spacing)
		d.Allowed = true
		// Requests of cost 1 that would still leave at once, then wait.
		var k int64
		if open-t <= b.lead {
			k = (t+b.lead-open)/b.interval + 1
		}
		d.Remaining = b.Queue + k
		d.ResetAt = instant(open)
		d.Next = time.Duration(satAdd(open-b.lead, satMul(k, b.interval)) - t)
		if commit {
			s.open = bias(open)
		}
		return d
	} else {
		gate = place - b.lead
	}

	leave := satAdd(gate, pending) // departure if admitted
	wait := leave - t
	if waiting >= b.Queue || wait > int64(b.MaxWait) {
		// Admissible once enough waiters have left for a free place and the
		// wait has shrunk to MaxWait.
		at := leave - int64(b.MaxWait)
		if waiting >= b.Queue {
			free := gate // no queue: the exit's reopening frees the one place
			if q != nil && q.Busy {
				free = nanos(q.FreeAt)
			}
			at = max(at, free)
		}
		d.RetryAfter = time.Duration(at - t)
		d.ResetAt = instant(satAdd(leave, b.lead))
		// A place frees when the head leaves (or the exit reopens), but
		// under max_wait the request may be admissible sooner.
		d.Next = time.Duration(min(gate, at) - t)
		return d
	}
	d.Allowed = true
	d.Delay = time.Duration(wait)
	d.Remaining = b.Queue - waiting - 1
	d.ResetAt = instant(satAdd(satAdd(leave, spacing), b.lead))
	d.Next = time.Duration(gate - t) // the head's departure frees a place
	return d
}

// gate returns the next place on the schedule of a key whose queue is not
// busy: when its exit reopens, lead (Delay intervals) later than the real
// time the queue last released at.
func (s *leakyBucketState) gate(q *Queue, lead int64) int64 {
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

func satMul(a, b int64) int64 {
	if a != 0 && b > (1<<63-1)/a {
		return 1<<63 - 1
	}
	return a * b
}
