package limiter

import (
	"time"

	"github.com/limitproxy/limitproxy/limiter/driver"
)

// Algorithm names one of the algorithms of docs/algorithms.md: the
// constants TokenBucket to SlidingWindow. The zero value is not an
// algorithm. Its String method returns the configuration's name
// ("token_bucket"), Takes and Requires the keys of a limit table it takes
// and needs. It is the driver package's type, so that a Store reads the
// same value.
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
// ("token_bucket", …), or an error naming them all.
func ParseAlgorithm(s string) (Algorithm, error) { return driver.ParseAlgorithm(s) }

// Algorithms returns every algorithm, TokenBucket first.
func Algorithms() []Algorithm { return driver.Algorithms() }

// Calendar is a unit of the calendar a fixed window can count in
// (FixedWindowParams.Calendar): its windows are then the days, weeks
// (ISO 8601, Monday to Sunday), months or years of a time zone, from the
// first instant of a period's first date to the next period's, so a day
// is 23 or 25 hours when the clocks change. The zero value is no
// calendar. Its String method returns the configuration's name
// ("month"), Nominal the unit's usual length. It is the driver package's
// type, which says where each window starts.
type Calendar = driver.Calendar

// The calendar units, with the names the configuration's window takes.
const (
	CalendarDay   = driver.CalendarDay   // "day"
	CalendarWeek  = driver.CalendarWeek  // "week": Monday to Sunday
	CalendarMonth = driver.CalendarMonth // "month"
	CalendarYear  = driver.CalendarYear  // "year"
)

// ParseCalendar returns the calendar unit named s ("day", "week", "month"
// or "year"), and false for anything else.
func ParseCalendar(s string) (Calendar, bool) { return driver.ParseCalendar(s) }

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
	// MaxWindowLimit bounds a fixed window's Limit (driver.MaxWindowLimit).
	MaxWindowLimit = driver.MaxWindowLimit
	// MaxSlidingLogLimit bounds a sliding log's Limit: it keeps one
	// timestamp (8 bytes) per admitted unit per key.
	MaxSlidingLogLimit = driver.MaxSlidingLogLimit
	// MaxSlots bounds a sliding window's Slots.
	MaxSlots = driver.MaxSlots
	// MaxQueue bounds a leaky bucket's Queue and Delay.
	MaxQueue = driver.MaxQueue
)

// The parameters of each algorithm, which its constructor takes and
// Limit.Params returns; driver documents their fields, bounds and
// memory per key. They are the driver package's types, so that a Store
// reads the same values.
type (
	// TokenBucketParams configures a token bucket: Burst tokens, refilled
	// continuously at Rate, Cost per request.
	TokenBucketParams = driver.TokenBucketParams
	// LeakyBucketParams configures a leaky bucket: a FIFO queue of up to
	// Queue requests per key leaving at Rate, none waiting longer than
	// MaxWait; its DrainTime is the natural MaxWait.
	LeakyBucketParams = driver.LeakyBucketParams
	// FixedWindowParams configures a fixed window: Limit units per window
	// of length Window aligned to the Unix epoch, or per calendar period
	// (Calendar) in a time zone (TimeZone).
	FixedWindowParams = driver.FixedWindowParams
	// SlidingLogParams configures a sliding log: exactly Limit units in
	// any Window, at 8 bytes per unit per key.
	SlidingLogParams = driver.SlidingLogParams
	// SlidingWindowParams configures a sliding window counter: about
	// Limit units in any Window, estimated over Slots slots.
	SlidingWindowParams = driver.SlidingWindowParams
)

// Spec is a limit as a configuration's limit table writes it: an
// Algorithm and the values of its keys (rate, burst, limit, window or
// its calendar unit, time_zone, slots, queue, max_wait, delay, cost),
// before the algorithm's defaults;
// NewLimit builds it. It is the driver package's type, which documents
// the defaults and when a zero key takes them.
type Spec = driver.Spec

// ParamError is a parameter of a limit that is out of range: its fields
// are Algorithm, Field (the configuration key, "rate", "burst", "slots",
// …, so that callers can point at the line that set it) and Msg, and its
// Error method returns "algorithm: field: message". The constructors
// return it, as do Limiter.Charge for a limit that cannot be charged and
// stores' own checks (redisstore.Check). It is the driver package's type,
// so that a Store returns the same one.
type ParamError = driver.ParamError

// Limit is one validated limit: an algorithm and its parameters, ready to
// be bound to a Store by New. Build it with NewLimit, NewTokenBucket,
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

// NewLimit returns the limit s describes, with its algorithm's defaults
// for the keys s leaves unset (Spec), or a *ParamError: what a
// configuration file or a per-key override builds its limits with.
func NewLimit(s Spec) (Limit, error) { return limit(driver.NewLimit(s)) }

// NewTokenBucket validates p and returns the limit, or a *ParamError.
func NewTokenBucket(p TokenBucketParams) (Limit, error) { return limit(driver.NewTokenBucket(p)) }

// NewLeakyBucket validates p and returns the limit, or a *ParamError.
func NewLeakyBucket(p LeakyBucketParams) (Limit, error) { return limit(driver.NewLeakyBucket(p)) }

// NewFixedWindow validates p and returns the limit, or a *ParamError.
func NewFixedWindow(p FixedWindowParams) (Limit, error) { return limit(driver.NewFixedWindow(p)) }

// NewSlidingLog validates p and returns the limit, or a *ParamError.
func NewSlidingLog(p SlidingLogParams) (Limit, error) { return limit(driver.NewSlidingLog(p)) }

// NewSlidingWindow validates p and returns the limit, or a *ParamError.
func NewSlidingWindow(p SlidingWindowParams) (Limit, error) {
	return limit(driver.NewSlidingWindow(p))
}

// Algorithm returns l's algorithm; 0 for the zero Limit.
func (l Limit) Algorithm() Algorithm { return l.d.Algorithm() }

// Params returns the parameters l was built from, as the …Params value
// its constructor took (TokenBucketParams, LeakyBucketParams, …), with
// Cost 0 replaced by 1; nil for the zero Limit. Change a copy and pass it
// to the constructor to derive a limit.
func (l Limit) Params() any { return l.d.Params() }

// Scaled returns l with its quota scaled by s, a finite number above
// zero (a client allowed s times a policy's rate): a bucket's rate and
// burst or a window's limit, each rounded to the nearest and kept within
// its bounds; a leaky bucket's rate, its queue as it is. Its cost and
// share stay; it is not bound. An error for a parameter out of range.
func (l Limit) Scaled(s float64) (Limit, error) { return limit(l.d.Scaled(s)) }

// Cost returns the units one request of weight 1 takes from l (at least
// 1).
func (l Limit) Cost() int64 { return l.d.Cost() }

// Quota returns the limit's quota and the time window it refers to, as
// the RateLimit-Policy header reports them (docs/responses.md, q and w):
// Burst over the time the burst takes to refill for a token bucket,
// Limit over Window for the window algorithms, and Queue+1+Delay over the
// time the queue takes to drain for a leaky bucket.
func (l Limit) Quota() (quota int64, window time.Duration) { return l.d.Quota() }

// Calendar returns the unit and time zone of l's windows when they are
// calendar periods (a fixed window with a Calendar), whose lengths vary:
// Quota's window is then the unit's nominal length. 0 and nil otherwise.
func (l Limit) Calendar() (Calendar, *time.Location) { return l.d.Calendar() }

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

// Accuracy is how exactly a store that many instances share keeps a
// limit: Exact (the zero value) or Bounded, decided on each instance from
// leases within a stated bound (package limiter/leases).
type Accuracy = driver.Accuracy

// The accuracies.
const (
	Exact   = driver.Exact   // "exact"
	Bounded = driver.Bounded // "bounded"
)

// WithAccuracy returns l kept with accuracy a by a leases.Store; other
// stores decide every limit exactly. A leaky bucket stays Exact.
func (l Limit) WithAccuracy(a Accuracy) Limit {
	l.d = l.d.WithAccuracy(a)
	return l
}

// Accuracy returns how exactly a shared store keeps l (WithAccuracy).
func (l Limit) Accuracy() Accuracy { return l.d.Accuracy() }

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
