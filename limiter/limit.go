package limiter

import (
	"time"

	"github.com/limitproxy/limitproxy/limiter/driver"
)

// Algorithm names one of the five algorithms of docs/algorithms.md: the
// constants TokenBucket to SlidingWindow. The zero value is not an
// algorithm. Its String method returns the configuration's name
// ("token_bucket"). It is the driver package's type, so that a Store
// reads the same value.
type Algorithm = driver.Algorithm

// The algorithms, with the names the configuration uses for them.
const (
	TokenBucket   = driver.TokenBucket   // "token_bucket"
	LeakyBucket   = driver.LeakyBucket   // "leaky_bucket"
	FixedWindow   = driver.FixedWindow   // "fixed_window"
	SlidingLog    = driver.SlidingLog    // "sliding_log"
	SlidingWindow = driver.SlidingWindow // "sliding_window"
)

// ParseAlgorithm returns the algorithm whose configuration name is s
// ("token_bucket", …), or an error naming the five.
func ParseAlgorithm(s string) (Algorithm, error) { return driver.ParseAlgorithm(s) }

// Rate is N events per Per, kept exactly as written (Rate{30, 5 *
// time.Minute} is "30/5m", not 0.1/s), so that no rounding happens
// before the algorithms see it. N is 1 to MaxCount; Per is positive. The
// zero value is not a valid rate: "unlimited" is not a rate. String
// formats it as the configuration writes it, "10/1s". It is the driver
// package's type, so that a Store reads the same value.
type Rate = driver.Rate

// Bounds of the parameters, chosen so that every product the algorithms
// form fits in their integer arithmetic and one key's state stays
// bounded.
const (
	// MaxCount bounds a rate's N, a burst, a limit and a cost.
	MaxCount = driver.MaxCount
	// MaxSlidingLogLimit bounds a sliding log's Limit: it keeps one
	// timestamp (8 bytes) per admitted unit per key.
	MaxSlidingLogLimit = driver.MaxSlidingLogLimit
	// MaxSlots bounds a sliding window's Slots.
	MaxSlots = driver.MaxSlots
	// MaxQueue bounds a leaky bucket's Queue and Delay.
	MaxQueue = driver.MaxQueue
)

// TokenBucketParams configures a token bucket (docs/algorithms.md): the
// bucket holds up to Burst tokens, starts full, and refills continuously
// at Rate. A request of cost c is admitted iff the bucket holds at least c
// tokens, which it then loses; otherwise RetryAfter is the exact time
// until it holds c. Memory: 16 bytes of state per key.
type TokenBucketParams struct {
	Rate  Rate  // refill rate, tokens per period; must be valid
	Burst int64 // capacity in tokens, 1..MaxCount
	Cost  int64 // tokens per request of weight 1; 0 means 1; at most Burst
}

// LeakyBucketParams configures a leaky bucket (docs/algorithms.md): a FIFO
// queue per key in front of the upstream. Requests leave one at a time, a
// request of cost c holding the exit for c intervals of 1/Rate (rounded
// up to the nanosecond, so the rate is never exceeded); an idle key lets
// the first request through at once. A request is rejected at once if
// Queue requests of its key are already waiting, or if its wait would
// exceed MaxWait; an admitted one carries its wait in Decision.Delay, and
// Limiter.Wait waits it out.
//
// Delay is nginx's two-stage limit_req delay=: the first Delay
// intervals' worth of a burst is forwarded at once and only the rest
// waits (nginx's burst=B delay=D is Queue = B − D, Delay = D). 0 is the
// plain leaky bucket.
type LeakyBucketParams struct {
	Rate    Rate          // departures per period; must be valid
	Queue   int64         // requests that may wait, 0..MaxQueue
	MaxWait time.Duration // longest admissible wait, ≥ 0
	Cost    int64         // intervals each request holds the exit; 0 means 1
	Delay   int64         // intervals of a burst forwarded at once, 0..MaxQueue
}

// DrainTime returns how long a full queue of requests of weight 1 takes
// to leave: Queue+1 requests of Cost intervals of 1/Rate each. It is the
// natural MaxWait, with which only Queue bounds the wait. 0 for an
// invalid Rate.
func (p LeakyBucketParams) DrainTime() time.Duration {
	return driver.LeakyBucketParams(p).DrainTime()
}

// FixedWindowParams configures a fixed window (docs/algorithms.md): time
// is cut into windows of length Window aligned to the Unix epoch (window k
// is [k·Window, (k+1)·Window)), and at most Limit units are admitted per
// window. Memory: 16 bytes of state per key.
type FixedWindowParams struct {
	Limit  int64         // units per window, 1..MaxCount
	Window time.Duration // must be positive
	Cost   int64         // units per request of weight 1; 0 means 1; at most Limit
}

// SlidingLogParams configures a sliding log (docs/algorithms.md): a
// request of cost c is admitted at t iff the units admitted in
// (t−Window, t] plus c are at most Limit. It is exact, and costs 8 bytes
// per unit in the window per key, hence MaxSlidingLogLimit; a sliding
// window approximates it in constant memory.
type SlidingLogParams struct {
	Limit  int64         // units per window, 1..MaxSlidingLogLimit
	Window time.Duration // must be positive
	Cost   int64         // units per request of weight 1; 0 means 1; at most Limit
}

// SlidingWindowParams configures a sliding window counter
// (docs/algorithms.md): the window is cut into Slots slots aligned to the
// Unix epoch, and the units admitted in (t−Window, t] are estimated from
// the slots it covers, the oldest one weighted by the part of it still
// inside. A request of cost c is admitted iff estimate + c ≤ Limit. Slots
// = 1 is the classic two-window approximation; more slots track the exact
// sliding log more closely (on even traffic it never admits more than
// Limit in any window; at worst, a burst at the very end of a slot, up to
// 2×Limit). Memory: 8 + 4·(Slots+1) bytes of state per key.
type SlidingWindowParams struct {
	Limit  int64         // units per window, 1..MaxCount
	Window time.Duration // must be positive and a whole multiple of Slots nanoseconds
	Slots  int           // 1..MaxSlots
	Cost   int64         // units per request of weight 1; 0 means 1; at most Limit
}

// ParamError is a parameter of a limit that is out of range: its fields
// are Algorithm, Field (the configuration key, "rate", "burst", "slots",
// …, so that callers can point at the line that set it) and Msg, and its
// Error method returns "algorithm: field: message". The constructors
// return it, as do Limiter.Charge for a limit that cannot be charged and
// stores' own checks (redisstore.Check). It is the driver package's type,
// so that a Store returns the same one.
type ParamError = driver.ParamError

// Limit is one validated limit: an algorithm and its parameters, ready to
// be bound to a Store by New. Build it with NewTokenBucket,
// NewLeakyBucket, NewFixedWindow, NewSlidingLog or NewSlidingWindow; the
// zero Limit is not usable. A Limit is an immutable value and safe to
// share between goroutines and Limiters.
type Limit struct {
	d driver.Limit
}

// limit wraps the result of a driver constructor.
func limit(d driver.Limit, err error) (Limit, error) {
	if err != nil {
		return Limit{}, err
	}
	return Limit{d: d}, nil
}

// NewTokenBucket validates p and returns the limit, or a *ParamError.
func NewTokenBucket(p TokenBucketParams) (Limit, error) {
	return limit(driver.NewTokenBucket(driver.TokenBucketParams(p)))
}

// NewLeakyBucket validates p and returns the limit, or a *ParamError.
func NewLeakyBucket(p LeakyBucketParams) (Limit, error) {
	return limit(driver.NewLeakyBucket(driver.LeakyBucketParams(p)))
}

// NewFixedWindow validates p and returns the limit, or a *ParamError.
func NewFixedWindow(p FixedWindowParams) (Limit, error) {
	return limit(driver.NewFixedWindow(driver.FixedWindowParams(p)))
}

// NewSlidingLog validates p and returns the limit, or a *ParamError.
func NewSlidingLog(p SlidingLogParams) (Limit, error) {
	return limit(driver.NewSlidingLog(driver.SlidingLogParams(p)))
}

// NewSlidingWindow validates p and returns the limit, or a *ParamError.
func NewSlidingWindow(p SlidingWindowParams) (Limit, error) {
	return limit(driver.NewSlidingWindow(driver.SlidingWindowParams(p)))
}

// Algorithm returns l's algorithm; 0 for the zero Limit.
func (l Limit) Algorithm() Algorithm { return l.d.Algorithm() }

// Params returns the parameters l was built from, as the …Params value
// its constructor took (TokenBucketParams, LeakyBucketParams, …), with
// Cost 0 replaced by 1; nil for the zero Limit. Change a copy and pass it
// to the constructor to derive a limit.
func (l Limit) Params() any {
	switch l.d.Algorithm() {
	case TokenBucket:
		return TokenBucketParams(l.d.TokenBucket())
	case LeakyBucket:
		return LeakyBucketParams(l.d.LeakyBucket())
	case FixedWindow:
		return FixedWindowParams(l.d.FixedWindow())
	case SlidingLog:
		return SlidingLogParams(l.d.SlidingLog())
	case SlidingWindow:
		return SlidingWindowParams(l.d.SlidingWindow())
	}
	return nil
}

// Cost returns the units one request of weight 1 takes from l (at least
// 1).
func (l Limit) Cost() int64 { return l.d.Cost() }

// Quota returns the limit's quota and the time window it refers to, as
// the RateLimit-Policy header reports them (docs/responses.md, q and w):
// Burst over the time the burst takes to refill for a token bucket,
// Limit over Window for the window algorithms, and Queue+1+Delay over the
// time the queue takes to drain for a leaky bucket.
func (l Limit) Quota() (quota int64, window time.Duration) { return l.d.Quota() }

// Shared returns l as the shared limit called name: every Limiter that
// binds a Limit shared under one name keeps its state in one place, so
// that the policies using it draw from one budget (nginx's zones). The
// Limits shared under a name should have the same parameters; the last
// bound one's apply. An empty name makes l a policy's own limit again.
func (l Limit) Shared(name string) Limit {
	l.d = l.d.Shared(name)
	return l
}

// Share returns the name l is shared under (Shared), "" for none.
func (l Limit) Share() string { return l.d.Share() }

// Name returns the name under which the Store keeps l's state, made of
// the policy name, the algorithm and the limit's place (see New). It is
// empty until New binds l; Limiter.Limits returns bound limits.
func (l Limit) Name() string { return l.d.Name() }

// String describes l in configuration terms, e.g.
// "token_bucket rate=10/1s burst=20".
func (l Limit) String() string { return l.d.String() }

// Driver returns l as package driver sees it: its steps, state and
// binding, for a Store's own checks (redisstore.Check) and for the
// conformance suite. Callers of Allow never need it.
func (l Limit) Driver() driver.Limit { return l.d }
