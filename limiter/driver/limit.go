package driver

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Limit is one validated limit: an algorithm and its parameters, ready to
// be bound to a Store by Bind. Build it with NewLimit or an algorithm's
// constructor (NewTokenBucket, NewLeakyBucket, NewFixedWindow,
// NewSlidingLog, NewSlidingWindow); the zero Limit is not usable. A Limit
// is an immutable value and safe to share.
//
// A Store keeps each key's state of a limit in States the Limit makes
// (NewStates) and applies requests to it with Step, Peek and Charge; a
// store that runs the algorithms as scripts (the Redis store) sends
// ScriptParams instead.
type Limit struct {
	alg     Algorithm
	a       algo   // the algorithm, with its compiled parameters
	name    string // state namespace, set by Bind
	id      int32  // dense number of name (stateID), set by Bind
	binding uint64 // unique to the Bind call that bound it; 0 before
	cost    int64  // per request, ≥ 1
	share   string // shared limit's name; "" for a policy's own
	acc     Accuracy
}

// Accuracy is how exactly a Store that many instances share keeps a
// limit (docs/algorithms.md#bounded-limits): Exact, the zero value, has
// every decision made by the shared store; Bounded lets each instance
// decide a key with heavy traffic from a lease of units taken from the
// shared store ahead of time (limiter/leases), admitting at most a
// stated bound more than Exact would. A store that is not shared ignores
// it.
type Accuracy uint8

// The accuracies, with the names the configuration's accuracy key uses.
const (
	Exact   Accuracy = iota // "exact"
	Bounded                 // "bounded"
)

// String returns the configuration's name of a, "exact" or "bounded".
func (a Accuracy) String() string {
	if a == Bounded {
		return "bounded"
	}
	return "exact"
}

// WithAccuracy returns l kept with accuracy a. A queued limit (a leaky
// bucket: one queue cannot be split between instances) stays Exact
// whatever a says; the configuration refuses to ask for it.
func (l Limit) WithAccuracy(a Accuracy) Limit {
	if l.Queued() {
		a = Exact
	}
	l.acc = a
	return l
}

// Accuracy returns how exactly a shared store keeps l (WithAccuracy).
func (l *Limit) Accuracy() Accuracy { return l.acc }

// Maximum sizes, chosen so that every product the algorithms form fits in
// their integer arithmetic, and so that one key's state stays bounded.
const (
	// MaxCount bounds burst, limit and cost; but a fixed window's limit,
	// MaxWindowLimit.
	MaxCount = 1_000_000_000
	// MaxWindowLimit bounds a fixed window's limit (and its cost): 2^32,
	// above the 4294967295 of envoyproxy/ratelimit's requests_per_unit (a
	// uint32), which an RLS policy's limit may be, and which the RLS
	// service's counters of every hit (a fixed window of this limit, a
	// threshold applied after) must count past. A fixed window's
	// arithmetic stays far inside int64 (count + n·cost ≤ limit with
	// n·cost bounded by weighted; a charge's debt up to 2·limit), and
	// inside decide.lua's doubles: exact integers to 2^53, and Redis's Lua
	// writes a number with 14 significant digits (2·2^32 has 10). The
	// other algorithms keep MaxCount: a token or leaky bucket's rate
	// products (N × the period in ns) and the sliding window's weighted
	// counts are sized for it.
	MaxWindowLimit = 1 << 32
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
// until Bind binds l (limiter.New calls it).
func (l *Limit) Name() string { return l.name }

// StateID returns a small number, from 0 up, that stands for Name() in
// this process: the same for every Limit bound under that name, across
// reloads, so that a Store may index its state by it rather than look the
// name up. -1 before Bind binds the limit.
func (l *Limit) StateID() int {
	if l.name == "" {
		return -1
	}
	return int(l.id)
}

// Binding returns a number unique to the Limiter l was bound into (Bind),
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

// bindings counts the Bind calls that bound limits.
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

// Params returns the parameters l was built from, as the …Params value
// its constructor took (TokenBucketParams, LeakyBucketParams, …), with
// Cost 0 replaced by 1; nil for the zero Limit.
func (l *Limit) Params() any {
	if l.a == nil {
		return nil
	}
	return l.a.params()
}

// Quota returns the limit's quota and the time window it refers to, as
// docs/responses.md's RateLimit-Policy reports them (q and w): burst over
// the time the burst takes to refill for a token bucket, limit over
// window for the window algorithms (for a calendar window, whose periods
// vary in length, the unit's nominal length, Calendar.Nominal: see
// Calendar), and queue+1+delay over the time that many requests of cost
// 1 take to leave at the rate for a leaky bucket. 0, 0 for the zero
// Limit.
func (l *Limit) Quota() (quota int64, window time.Duration) {
	if l.a == nil {
		return 0, 0
	}
	return l.a.quota()
}

// Calendar returns the unit and time zone of l's windows when they are
// calendar periods (a fixed window with FixedWindowParams.Calendar): its
// windows are then as long as the periods are, and Quota's window is only
// their nominal length. 0 and nil for any other limit.
func (l *Limit) Calendar() (Calendar, *time.Location) {
	if w, ok := l.a.(windowed); ok {
		return w.calendar()
	}
	return 0, nil
}

// String describes l in configuration terms, e.g.
// "token_bucket rate=10/1s burst=20".
func (l Limit) String() string {
	var s string
	if l.a != nil {
		s = l.a.describe()
	}
	if l.cost != 1 {
		s += fmt.Sprintf(" cost=%d", l.cost)
	}
	if l.share != "" {
		s += fmt.Sprintf(" shared=%s", l.share)
	}
	if l.acc != Exact {
		s += " accuracy=" + l.acc.String()
	}
	return l.alg.String() + " " + s
}

// Scaled returns l with its quota scaled by s, which must be a finite
// number above zero, for a client allowed s times the policy's rate (a
// per-key override's scale): a bucket's rate and burst, or a window's
// limit, each rounded to the nearest and at least 1, at most MaxCount
// (MaxSlidingLogLimit for a sliding log's); a leaky bucket's rate only,
// its queue staying as it is. Its cost and share stay; it is not bound
// (bind it anew). An error for a parameter out of range.
func (l Limit) Scaled(s float64) (Limit, error) {
	if l.a == nil {
		return Limit{}, errors.New("limiter: limit was not built by a New… constructor")
	}
	if !(s > 0) || math.IsInf(s, 1) {
		return Limit{}, fmt.Errorf("limiter: scale %v is not a finite number above zero", s)
	}
	sl, err := l.a.scaled(s)
	if err != nil {
		return Limit{}, err
	}
	sl.share = l.share
	sl.acc = l.acc
	return sl, nil
}

// scaleCount multiplies a count by s, rounding to the nearest, at least
// 1 and at most maxN.
func scaleCount(n int64, s float64, maxN int64) int64 {
	return max(1, int64(min(math.Round(float64(n)*s), float64(maxN))))
}

// NewStates returns an array of n fresh per-key states of l's algorithm,
// in which a Store keeps l's state (see States). Every Limit bound under
// l's Name reads the states of one array alike: what their layout depends
// on is part of the name.
func (l *Limit) NewStates(n int) States { return l.a.newStates(n) }

// Step applies a request of weight n at now to state i of st, l's state
// for one client key, and returns the decision; an admitted request
// consumes from the state, a rejected one changes nothing a later request
// would see. q describes the key's queue to a queued algorithm (Queued;
// nil: the key has no queue); the others ignore it. A queued algorithm's
// admitted request with a Delay is then the Store's to queue. The caller
// must serialise calls on one state.
func (l *Limit) Step(st States, i int, q *Queue, now time.Time, n int64) Decision {
	return l.a.step(st, i, q, now, n, true)
}

// Peek returns the decision Step would return, changing nothing: a Store
// checks every limit of a policy this way before it consumes from any. A
// nil st is a fresh key's state (a key the Store does not hold).
func (l *Limit) Peek(st States, i int, q *Queue, now time.Time, n int64) Decision {
	return l.a.step(st, i, q, now, n, false)
}

// IdleAt returns when state i of st, and its queue q if it has one (not
// busy: a key with requests waiting is never idle), will be a fresh key's
// again if nothing arrives: from then on a Store may forget it. A fresh
// state returns the zero Time.
func (l *Limit) IdleAt(st States, i int, q *Queue) time.Time { return l.a.idleAt(st, i, q) }

// Queued reports whether l's admitted requests may wait in a per-key
// queue that the Store keeps (the leaky bucket): the Store then describes
// the queue to Step (Queue) and queues each request admitted with a
// Delay, holding the exit for Spacing once it leaves.
func (l *Limit) Queued() bool {
	_, ok := l.a.(queued)
	return ok
}

// QueueSize returns the most requests of one key that may wait in a
// queued limit's queue (a leaky bucket's Queue); 0 for a limit that does
// not queue.
func (l *Limit) QueueSize() int64 {
	if q, ok := l.a.(queued); ok {
		return q.queueSize()
	}
	return 0
}

// Spacing returns how long a request of weight n holds the exit of a
// queued limit's queue once it leaves: its cost in intervals of 1/Rate
// (rounded up to the nanosecond, so that the rate is never exceeded); 0
// for a limit that does not queue.
func (l *Limit) Spacing(n int64) time.Duration {
	if q, ok := l.a.(queued); ok {
		return q.spacing(n)
	}
	return 0
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
