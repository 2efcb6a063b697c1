package driver

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Algorithm names one of the algorithms of docs/algorithms.md. The zero
// value is not an algorithm.
type Algorithm uint8

// The algorithms, with the names the configuration uses for them. Each is
// one file of this package (below), and one entry of algos.
const (
	TokenBucket   Algorithm = iota + 1 // "token_bucket", tokenbucket.go
	LeakyBucket                        // "leaky_bucket", leakybucket.go
	FixedWindow                        // "fixed_window", fixedwindow.go
	SlidingLog                         // "sliding_log", slidinglog.go
	SlidingWindow                      // "sliding_window", slidingcounter.go
)

// algos is the table of the algorithms, indexed by Algorithm: for each,
// the zero value of its compiled parameters, whose methods that read no
// parameters (name, keys, build) say what the algorithm is before any
// limit of it exists. Everything else that differs between algorithms is
// a method of a limit's own value (Limit.a), so that validation, Bind, the
// overrides, both stores and the conformance suite reach an algorithm
// only through algo.
//
// Adding an algorithm: a constant above, an entry here, and one file that
// defines its …Params, its New… constructor and its compiled parameters
// implementing algo (its per-key state, step, charge, the parameters of
// its step in limiter/redisstore/decide.lua); then its step in
// decide.lua (its entry in the steps table, and in charges if it can be
// charged, at the constant's number) and its model in
// limiter/limitertest (model.go, and modelsByAlgorithm). The
// configuration and the overrides need nothing more unless it takes a key
// no algorithm took before (a field of Spec, and of the configuration's
// limit table); package limiter adds its public constructor.
var algos = [...]algo{
	TokenBucket:   new(tokenBucket),
	LeakyBucket:   new(leakyBucket),
	FixedWindow:   new(fixedWindow),
	SlidingLog:    new(slidingLog),
	SlidingWindow: new(slidingWindow),
}

// algo is one algorithm, implemented by its compiled parameters (a
// pointer, never nil in a Limit, and never changed once built): the
// operations that differ between algorithms, and only those.
type algo interface {
	// name returns the algorithm's name in the configuration,
	// "token_bucket". It reads no parameters.
	name() string
	// keys returns the keys of a configuration's limit table the
	// algorithm takes and those of them it cannot do without, in Spec's
	// order. It reads no parameters.
	keys() (takes, requires []string)
	// build returns the limit s describes (s.Algorithm is this one), with
	// the algorithm's defaults for what s leaves unset, or a *ParamError.
	// It reads no parameters.
	build(s Spec) (Limit, error)

	// params returns the …Params value the limit was built from, with
	// Cost 0 replaced by 1.
	params() any
	// quota returns the limit's quota and the time window it refers to
	// (Limit.Quota).
	quota() (int64, time.Duration)
	// describe returns the parameters in configuration terms, without the
	// cost: "rate=10/1s burst=20".
	describe() string
	// stateName returns what of the parameters the meaning of a key's
	// state depends on, appended to the limit's state name by Bind ("" if
	// nothing): a limit whose state would mean something else under new
	// parameters starts fresh, and every Limit of one Name can read the
	// States another made.
	stateName() string
	// scaled returns the limit with its quota scaled by s > 0
	// (Limit.Scaled).
	scaled(s float64) (Limit, error)
	// script returns the five parameters of the algorithm's step in a
	// script store (Limit.ScriptParams), or a *ParamError.
	script() ([5]int64, error)

	// newStates returns an array of n fresh per-key states.
	newStates(n int) States
	// step decides a request of weight n at now on state i of st, a
	// States newStates made; st nil is a fresh key's state, which is then
	// only read. With commit, an admitted request consumes from the
	// state; without, nothing changes. q describes the key's queue to a
	// queued algorithm (nil: none); the others ignore it.
	step(st States, i int, q *Queue, now time.Time, n int64, commit bool) Decision
	// idleAt returns when state i of st, and its queue q if any (not
	// busy), is a fresh key's again if nothing arrives; the zero Time for
	// a fresh state.
	idleAt(st States, i int, q *Queue) time.Time
}

// chargeable is implemented by the algorithms that can be charged after
// the fact (Charger): all but those that schedule each request as it is
// admitted (the leaky bucket).
type chargeable interface {
	// charge charges (n > 0) or refunds (n < 0) n units to state i of st
	// at now, for a request reserved at reservedAt, and returns the
	// state's decision after it (Limit.Charge). st is nil only for n ≤ 0:
	// a fresh key's state, which a refund leaves as it is.
	charge(st States, i int, now, reservedAt time.Time, n int64) Decision
}

// windowed is implemented by the algorithms whose windows can be
// calendar periods (Calendar), and so take a time_zone: the fixed window.
type windowed interface {
	// calendar returns the unit and zone of the limit's windows, if they
	// are calendar periods; 0 and nil otherwise.
	calendar() (Calendar, *time.Location)
	// scriptGrid returns what a script store passes with a decision at
	// now beside the limit's script parameters, for windows its script
	// cannot compute (Limit.ScriptGrid); false for none.
	scriptGrid(now time.Time) ([5]int64, bool)
}

// queued is implemented by the algorithms whose admitted requests may
// wait, in a per-key queue the Store keeps and describes to the step
// (Queue): the leaky bucket.
type queued interface {
	// queueSize returns the most requests of one key that may wait.
	queueSize() int64
	// spacing returns how long a request of weight n holds the queue's
	// exit once it leaves.
	spacing(n int64) time.Duration
}

// ErrUnknownAlgorithm is returned by ParseAlgorithm for a name that is not
// one of the algorithms.
var ErrUnknownAlgorithm = errors.New("unknown algorithm")

// Algorithms returns every algorithm, in the order of their constants.
func Algorithms() []Algorithm {
	out := make([]Algorithm, len(algos)-1)
	for i := range out {
		out[i] = Algorithm(i + 1)
	}
	return out
}

// Valid reports whether a is one of the algorithms.
func (a Algorithm) Valid() bool { return a != 0 && int(a) < len(algos) }

// String returns the configuration name of a, e.g. "token_bucket".
func (a Algorithm) String() string {
	if !a.Valid() {
		return "algorithm(" + strconv.Itoa(int(a)) + ")"
	}
	return algos[a].name()
}

// Takes returns the keys of a configuration's limit table algorithm a
// takes, in Spec's order ("rate", "burst", "cost" for a token bucket);
// nil for an invalid a.
func (a Algorithm) Takes() []string {
	if !a.Valid() {
		return nil
	}
	takes, _ := algos[a].keys()
	return slices.Clone(takes)
}

// Requires returns the keys of Takes that a limit of algorithm a cannot
// do without ("rate" for a token bucket); nil for an invalid a.
func (a Algorithm) Requires() []string {
	if !a.Valid() {
		return nil
	}
	_, requires := algos[a].keys()
	return slices.Clone(requires)
}

// calendarAlgorithms returns the names of the algorithms whose windows
// can be calendar periods.
func calendarAlgorithms() []string {
	var names []string
	for _, a := range Algorithms() {
		if _, ok := algos[a].(windowed); ok {
			names = append(names, a.String())
		}
	}
	return names
}

// ParseAlgorithm returns the algorithm with configuration name s.
func ParseAlgorithm(s string) (Algorithm, error) {
	var names []string
	for _, a := range Algorithms() {
		if a.String() == s {
			return a, nil
		}
		names = append(names, a.String())
	}
	last := len(names) - 1
	return 0, fmt.Errorf("%w %q (want %s or %s)", ErrUnknownAlgorithm, s, strings.Join(names[:last], ", "), names[last])
}

// Spec is a limit as a configuration's limit table writes it: its
// algorithm and the values of its keys (its fields, in the order the
// configuration lists them: rate, burst, limit, window, time_zone, slots,
// queue, max_wait, delay, cost), before the algorithm's defaults.
// Keys the algorithm does not take are ignored (the configuration refuses
// them itself, naming them). A key is unset when its value is zero and Set
// does not name it; an unset key takes its algorithm's default: a token
// bucket's burst one period's worth of its rate (Rate.N), a leaky
// bucket's max_wait the time its full queue takes to drain (DrainTime), a
// sliding window's slots 1, every cost 1. It is a plain value; the zero
// Spec has no algorithm.
type Spec struct {
	Algorithm Algorithm
	Rate      Rate          // rate: token and leaky buckets
	Burst     int64         // burst: token bucket
	Limit     int64         // limit: fixed window, sliding log and window
	Window    time.Duration // window: fixed window, sliding log and window
	// Calendar is a window written as a calendar unit ("month") rather
	// than a length (Window then 0): the fixed window's only, the
	// algorithms that take time_zone.
	Calendar Calendar
	TimeZone *time.Location // time_zone: a calendar window's; nil means UTC
	Slots    int64          // slots: sliding window
	Queue    int64          // queue: leaky bucket
	MaxWait  time.Duration  // max_wait: leaky bucket
	Delay    int64          // delay: leaky bucket
	Cost     int64          // cost: every algorithm
	// Set names the keys ("max_wait") the configuration wrote, so that
	// one written as 0 (max_wait = "0s": no waiting) is 0 rather than
	// its default. Overrides leave it nil: there a zero is the default.
	Set []string
}

// unset reports whether key, whose value is v, takes its default.
func (s *Spec) unset(key string, v int64) bool {
	return v == 0 && !slices.Contains(s.Set, key)
}

// NewLimit returns the limit s describes, with its algorithm's defaults
// for the keys s leaves unset, or a *ParamError for a parameter out of
// range (an error for an invalid Algorithm).
func NewLimit(s Spec) (Limit, error) {
	if !s.Algorithm.Valid() {
		return Limit{}, fmt.Errorf("%w %v", ErrUnknownAlgorithm, s.Algorithm)
	}
	if takes, _ := algos[s.Algorithm].keys(); s.Calendar != 0 && !slices.Contains(takes, "time_zone") {
		// Not a silent zero window: the calendar names what is wrong.
		return Limit{}, paramErr(s.Algorithm, "window", "%q is a calendar window, which only %s counts in; %v takes a length such as \"24h\"",
			s.Calendar, strings.Join(calendarAlgorithms(), " and "), s.Algorithm)
	}
	return algos[s.Algorithm].build(s)
}
