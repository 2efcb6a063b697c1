package driver

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Limit is one validated limit: an algorithm and its parameters, ready to be
// bound to a Store by New. Build it with NewTokenBucket, NewLeakyBucket,
// NewFixedWindow, NewSlidingLog or NewSlidingWindow; the zero Limit is not
// usable. A Limit is an immutable value and safe to share.
//
// Stores read a Limit through its accessors; the memory store applies the
// Step… methods to the state it keeps, and the Redis store sends the
// parameters to its scripts.
type Limit struct {
	alg     Algorithm
	name    string // state namespace, set by New
	id      int32  // dense number of name (stateID), set by New
	binding uint64 // unique to the New call that bound it; 0 before
	cost    int64  // per request, ≥ 1
	share   string // shared limit's name; "" for a policy's own

	tb tokenBucket
	lb leakyBucket
	fw FixedWindowParams
	sl SlidingLogParams
	sw slidingWindow
}

// Maximum sizes, chosen so that every product the algorithms form fits in
// their integer arithmetic, and so that one key's state stays bounded.
const (
	// MaxCount bounds burst, limit and cost.
	MaxCount = 1_000_000_000
	// MaxSlidingLogLimit bounds a sliding log's limit: it keeps one
	// timestamp (8 bytes) per admitted unit per key.
	MaxSlidingLogLimit = 100_000
	// MaxSlots bounds a sliding window's slots.
	MaxSlots = 64
	// MaxQueue bounds a leaky bucket's queue per key.
	MaxQueue = 100_000
)

// Algorithm returns l's algorithm.
func (l *Limit) Algorithm() Algorithm { return l.alg }

// Name returns the name under which a Store keeps l's state. It is empty
// until New binds l into a Limiter.
func (l *Limit) Name() string { return l.name }

// StateID returns a small number, from 0 up, that stands for Name() in
// this process: the same for every Limit bound under that name, across
// reloads, so that a Store may index its state by it rather than look the
// name up. -1 before New binds the limit.
func (l *Limit) StateID() int {
	if l.name == "" {
		return -1
	}
	return int(l.id)
}

// Binding returns a number unique to the Limiter l was bound into (New),
// 0 before: a Store may cache under it what it derives from l's parameters,
// which a later Limiter of the same name may change.
func (l *Limit) Binding() uint64 { return l.binding }

// StateIDOf returns the StateID of the limits bound under name, if any
// ever was.
func StateIDOf(name string) (int, bool) {
	stateIDs.mu.Lock()
	defer stateIDs.mu.Unlock()
	id, ok := stateIDs.m[name]
	return int(id), ok
}

// stateIDs numbers the state names of every limit ever bound in this
// process. They are few (one per configured limit, over all reloads), so
// the table is never trimmed.
var stateIDs struct {
	mu sync.Mutex
	m  map[string]int32
}

// bindings counts the New calls that bound limits.
var bindings atomic.Uint64

func stateID(name string) int32 {
	stateIDs.mu.Lock()
	defer stateIDs.mu.Unlock()
	if id, ok := stateIDs.m[name]; ok {
		return id
	}
	if stateIDs.m == nil {
		stateIDs.m = map[string]int32{}
	}
	id := int32(len(stateIDs.m))
	stateIDs.m[name] = id
	return id
}

// Shared returns l as the shared limit called name: every Limiter that
// binds a Limit shared under one name keeps its state in one place, so
// that the policies using it draw from one budget (nginx's zones). The
// Limits shared under a name should have the same parameters; the last
// bound one's apply. An empty name makes l a policy's own limit again.
func (l Limit) Shared(name string) Limit {
	l.share = name
	return l
}

// Share returns the name l is shared under (Shared), "" for none.
func (l *Limit) Share() string { return l.share }

// Cost returns the units one request of weight 1 consumes from l.
func (l *Limit) Cost() int64 { return l.cost }

// TokenBucket returns l's parameters; valid when Algorithm is TokenBucket.
func (l *Limit) TokenBucket() TokenBucketParams { return l.tb.TokenBucketParams }

// LeakyBucket returns l's parameters; valid when Algorithm is LeakyBucket.
func (l *Limit) LeakyBucket() LeakyBucketParams { return l.lb.LeakyBucketParams }

// FixedWindow returns l's parameters; valid when Algorithm is FixedWindow.
func (l *Limit) FixedWindow() FixedWindowParams { return l.fw }

// SlidingLog returns l's parameters; valid when Algorithm is SlidingLog.
func (l *Limit) SlidingLog() SlidingLogParams { return l.sl }

// SlidingWindow returns l's parameters; valid when Algorithm is SlidingWindow.
func (l *Limit) SlidingWindow() SlidingWindowParams { return l.sw.SlidingWindowParams }

// Quota returns the limit's quota and the time window it refers to, as
// docs/responses.md's RateLimit-Policy reports them (q and w): burst over the time the
// burst takes to refill for a token bucket, limit over window for the window
// algorithms, and queue+1+delay over the time that many requests of cost 1
// take to leave at the rate for a leaky bucket.
func (l *Limit) Quota() (quota int64, window time.Duration) {
	switch l.alg {
	case TokenBucket:
		p := l.tb.TokenBucketParams
		return p.Burst, time.Duration(mulDivCeil(p.Burst, int64(p.Rate.Per), p.Rate.N))
	case LeakyBucket:
		p := l.lb.LeakyBucketParams
		return p.Queue + 1 + p.Delay, time.Duration(mulDivCeil(p.Queue+1+p.Delay, int64(p.Rate.Per), p.Rate.N))
	case FixedWindow:
		return l.fw.Limit, l.fw.Window
	case SlidingLog:
		return l.sl.Limit, l.sl.Window
	case SlidingWindow:
		return l.sw.Limit, l.sw.Window
	}
	return 0, 0
}

// String describes l in configuration terms, e.g.
// "token_bucket rate=10/1s burst=20".
func (l Limit) String() string {
	var s string
	switch l.alg {
	case TokenBucket:
		s = fmt.Sprintf("rate=%v burst=%d", l.tb.Rate, l.tb.Burst)
	case LeakyBucket:
		s = fmt.Sprintf("rate=%v queue=%d max_wait=%v", l.lb.Rate, l.lb.Queue, l.lb.MaxWait)
		if l.lb.Delay != 0 {
			s += fmt.Sprintf(" delay=%d", l.lb.Delay)
		}
	case FixedWindow:
		s = fmt.Sprintf("limit=%d window=%v", l.fw.Limit, l.fw.Window)
	case SlidingLog:
		s = fmt.Sprintf("limit=%d window=%v", l.sl.Limit, l.sl.Window)
	case SlidingWindow:
		s = fmt.Sprintf("limit=%d window=%v slots=%d", l.sw.Limit, l.sw.Window, l.sw.Slots)
	}
	if l.cost != 1 {
		s += fmt.Sprintf(" cost=%d", l.cost)
	}
	if l.share != "" {
		s += fmt.Sprintf(" shared=%s", l.share)
	}
	return l.alg.String() + " " + s
}

// ParamError is a parameter of a limit that is out of range. Field is the
// configuration key ("rate", "burst", "slots", …) so that callers can point
// at the line that set it.
type ParamError struct {
	Algorithm Algorithm
	Field     string
	Msg       string
}

// Error returns "algorithm: field: message".
func (e *ParamError) Error() string { return e.Algorithm.String() + ": " + e.Field + ": " + e.Msg }

func paramErr(a Algorithm, field, format string, args ...any) error {
	return &ParamError{Algorithm: a, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// checkCost validates a cost against the most one request may ever take.
func checkCost(a Algorithm, cost, capacity int64, capName string) (int64, error) {
	switch {
	case cost < 0:
		return 0, paramErr(a, "cost", "must be at least 1")
	case cost == 0:
		cost = 1
	}
	if capName != "" && cost > capacity {
		return 0, paramErr(a, "cost", "%d is above %s %d, so no request could ever be admitted", cost, capName, capacity)
	}
	return cost, nil
}

// checkCount validates a burst or limit.
func checkCount(a Algorithm, field string, n, maxN int64) error {
	switch {
	case n < 1:
		return paramErr(a, field, "must be at least 1")
	case n > maxN:
		return paramErr(a, field, "%d is above the maximum of %d", n, maxN)
	}
	return nil
}

// checkWindow validates a window length.
func checkWindow(a Algorithm, w time.Duration) error {
	if w <= 0 {
		return paramErr(a, "window", "must be greater than zero")
	}
	return nil
}

// weighted returns n × cost, the units a request of weight n takes, and
// whether that stays within capacity (a request above it can never pass).
func weighted(n, cost, capacity int64) (int64, bool) {
	if n > capacity/cost {
		return 0, false
	}
	return n * cost, true
}

func nanos(t time.Time) int64 { return t.UnixNano() }

func instant(ns int64) time.Time { return time.Unix(0, ns) }
