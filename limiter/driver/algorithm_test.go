package driver

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

// TestAlgorithmTable: every algorithm is in the table, in the order of
// its constant, named as the configuration names it, and its keys are
// what its limit table takes.
func TestAlgorithmTable(t *testing.T) {
	want := []struct {
		alg             Algorithm
		name            string
		takes, requires []string
	}{
		{TokenBucket, "token_bucket", []string{"rate", "burst", "cost"}, []string{"rate"}},
		{LeakyBucket, "leaky_bucket", []string{"rate", "queue", "max_wait", "delay", "cost"}, []string{"rate"}},
		{FixedWindow, "fixed_window", []string{"limit", "window", "time_zone", "cost"}, []string{"limit", "window"}},
		{SlidingLog, "sliding_log", []string{"limit", "window", "cost"}, []string{"limit", "window"}},
		{SlidingWindow, "sliding_window", []string{"limit", "window", "slots", "cost"}, []string{"limit", "window"}},
	}
	algs := Algorithms()
	if len(algs) != len(want) {
		t.Fatalf("Algorithms() = %v, want %d", algs, len(want))
	}
	for i, w := range want {
		a := algs[i]
		if a != w.alg || !a.Valid() || a.String() != w.name || !slices.Equal(a.Takes(), w.takes) || !slices.Equal(a.Requires(), w.requires) {
			t.Errorf("algorithm %d: %d %q valid %v takes %v requires %v, want %d %q %v %v",
				i, a, a, a.Valid(), a.Takes(), a.Requires(), w.alg, w.name, w.takes, w.requires)
		}
		if p, err := ParseAlgorithm(w.name); p != w.alg || err != nil {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", w.name, p, err)
		}
	}
	// Takes returns a copy: changing it changes nothing.
	TokenBucket.Takes()[0] = "x"
	if TokenBucket.Takes()[0] != "rate" {
		t.Error("Takes shares its slice")
	}
	for _, a := range []Algorithm{0, SlidingWindow + 1, 255} {
		if a.Valid() || a.Takes() != nil || a.Requires() != nil {
			t.Errorf("Algorithm(%d): valid %v, takes %v, requires %v", a, a.Valid(), a.Takes(), a.Requires())
		}
	}
	if s := Algorithm(9).String(); s != "algorithm(9)" {
		t.Errorf("Algorithm(9).String() = %q", s)
	}
	_, err := ParseAlgorithm("sliding_windows")
	if !errors.Is(err, ErrUnknownAlgorithm) || err.Error() != `unknown algorithm "sliding_windows" (want token_bucket, leaky_bucket, fixed_window, sliding_log or sliding_window)` {
		t.Errorf("ParseAlgorithm(sliding_windows): %v", err)
	}
	if _, err := ParseAlgorithm(""); err == nil {
		t.Error(`ParseAlgorithm("") accepted`)
	}
}

// TestNewLimitDefaults: an unset key takes its algorithm's default, a key
// Set names keeps its value, 0 included, and keys the algorithm does not
// take are ignored.
func TestNewLimitDefaults(t *testing.T) {
	r := Rate{10, time.Second}
	for _, c := range []struct {
		name string
		spec Spec
		want any
		err  string
	}{
		{"burst: one period", Spec{Algorithm: TokenBucket, Rate: r, Limit: 99, Slots: 7}, TokenBucketParams{Rate: r, Burst: 10, Cost: 1}, ""},
		{"burst written", Spec{Algorithm: TokenBucket, Rate: r, Burst: 3, Cost: 2}, TokenBucketParams{Rate: r, Burst: 3, Cost: 2}, ""},
		{"burst written as 0", Spec{Algorithm: TokenBucket, Rate: r, Set: []string{"rate", "burst"}}, nil, "token_bucket: burst: must be at least 1"},
		{"max_wait: drain time", Spec{Algorithm: LeakyBucket, Rate: r, Queue: 3, Cost: 2}, LeakyBucketParams{Rate: r, Queue: 3, MaxWait: 800 * time.Millisecond, Cost: 2}, ""},
		{"max_wait written as 0", Spec{Algorithm: LeakyBucket, Rate: r, Queue: 3, Delay: 1, Set: []string{"max_wait"}}, LeakyBucketParams{Rate: r, Queue: 3, Delay: 1, Cost: 1}, ""},
		{"max_wait written", Spec{Algorithm: LeakyBucket, Rate: r, MaxWait: time.Second}, LeakyBucketParams{Rate: r, MaxWait: time.Second, Cost: 1}, ""},
		{"fixed window", Spec{Algorithm: FixedWindow, Limit: 5, Window: time.Minute, Burst: 9}, FixedWindowParams{Limit: 5, Window: time.Minute, Cost: 1}, ""},
		{"sliding log", Spec{Algorithm: SlidingLog, Limit: 5, Window: time.Minute, Cost: 5}, SlidingLogParams{Limit: 5, Window: time.Minute, Cost: 5}, ""},
		{"slots: one", Spec{Algorithm: SlidingWindow, Limit: 5, Window: time.Minute}, SlidingWindowParams{Limit: 5, Window: time.Minute, Slots: 1, Cost: 1}, ""},
		{"slots written", Spec{Algorithm: SlidingWindow, Limit: 5, Window: time.Minute, Slots: 6}, SlidingWindowParams{Limit: 5, Window: time.Minute, Slots: 6, Cost: 1}, ""},
		{"slots written as 0", Spec{Algorithm: SlidingWindow, Limit: 5, Window: time.Minute, Set: []string{"slots"}}, nil, "sliding_window: slots: must be at least 1 (1 is the two-window approximation)"},
		{"slots past an int", Spec{Algorithm: SlidingWindow, Limit: 5, Window: time.Minute, Slots: 1 << 40}, nil, "sliding_window: slots: 65 is above the maximum of 64"},
		{"out of range", Spec{Algorithm: FixedWindow, Limit: 5}, nil, "fixed_window: window: must be greater than zero"},
		{"no algorithm", Spec{Limit: 5, Window: time.Minute}, nil, "unknown algorithm algorithm(0)"},
	} {
		l, err := NewLimit(c.spec)
		switch {
		case c.err != "" && (err == nil || err.Error() != c.err):
			t.Errorf("%s: %v, want %q", c.name, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "" && (l.Params() != c.want || l.Algorithm() != c.spec.Algorithm):
			t.Errorf("%s: %v %+v, want %+v", c.name, l.Algorithm(), l.Params(), c.want)
		}
	}
}

// TestScaled: each algorithm scales its quota, rounding to the nearest
// and staying within its bounds; cost and share stay.
func TestScaled(t *testing.T) {
	must := mustLimit(t)
	r := Rate{10, time.Second}
	for _, c := range []struct {
		l    Limit
		s    float64
		want any
	}{
		{must(NewTokenBucket(TokenBucketParams{Rate: r, Burst: 20, Cost: 2})), 2.5, TokenBucketParams{Rate: Rate{25, time.Second}, Burst: 50, Cost: 2}},
		{must(NewTokenBucket(TokenBucketParams{Rate: r, Burst: 20})), 0.01, TokenBucketParams{Rate: Rate{1, time.Second}, Burst: 1, Cost: 1}},
		{must(NewTokenBucket(TokenBucketParams{Rate: r, Burst: 20})), 1e12, TokenBucketParams{Rate: Rate{MaxCount, time.Second}, Burst: MaxCount, Cost: 1}},
		{must(NewLeakyBucket(LeakyBucketParams{Rate: r, Queue: 4, MaxWait: time.Second})), 3, LeakyBucketParams{Rate: Rate{30, time.Second}, Queue: 4, MaxWait: time.Second, Cost: 1}},
		{must(NewFixedWindow(FixedWindowParams{Limit: 7, Window: time.Minute})), 1.5, FixedWindowParams{Limit: 11, Window: time.Minute, Cost: 1}},
		{must(NewSlidingLog(SlidingLogParams{Limit: 7, Window: time.Minute})), 1e9, SlidingLogParams{Limit: MaxSlidingLogLimit, Window: time.Minute, Cost: 1}},
		{must(NewSlidingWindow(SlidingWindowParams{Limit: 7, Window: time.Minute, Slots: 3})), 2, SlidingWindowParams{Limit: 14, Window: time.Minute, Slots: 3, Cost: 1}},
	} {
		l := c.l.Shared("s")
		got, err := l.Scaled(c.s)
		if err != nil || got.Params() != c.want || got.Share() != "s" || got.Name() != "" {
			t.Errorf("%v scaled by %g: %v %+v (%v), want %+v", c.l, c.s, got, got.Params(), err, c.want)
		}
	}
	tb := must(NewTokenBucket(TokenBucketParams{Rate: r, Burst: 20}))
	for _, s := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if _, err := tb.Scaled(s); err == nil {
			t.Errorf("scale %v accepted", s)
		}
	}
	if _, err := (Limit{}).Scaled(2); err == nil {
		t.Error("the zero Limit scaled")
	}
	// A scaled cost above the scaled-down burst is out of range.
	if _, err := must(NewTokenBucket(TokenBucketParams{Rate: r, Burst: 20, Cost: 20})).Scaled(0.5); err == nil {
		t.Error("cost 20 over a burst of 10 accepted")
	}
}

// TestScriptParams: what the Redis store's decide.lua gets for each
// algorithm (its number first), and the parameters it refuses.
func TestScriptParams(t *testing.T) {
	must := mustLimit(t)
	for _, c := range []struct {
		l    Limit
		want [6]int64
	}{
		// 10/s is 10⁷ millionths per 10⁶ µs: 10 every µs, in lowest terms.
		{must(NewTokenBucket(TokenBucketParams{Rate: Rate{10, time.Second}, Burst: 20, Cost: 2})), [6]int64{1, 10, 1, 20, 2, 0}},
		{must(NewTokenBucket(TokenBucketParams{Rate: Rate{3, 7 * time.Second}, Burst: 5})), [6]int64{1, 3, 7, 5, 1, 0}},
		// 3/s: 333,334 µs apart (rounded up); delay 2 leads by 2 of them.
		{must(NewLeakyBucket(LeakyBucketParams{Rate: Rate{3, time.Second}, Queue: 4, MaxWait: 1500 * time.Millisecond, Cost: 2, Delay: 2})), [6]int64{2, 333334, 4, 1500000, 2, 666668}},
		{must(NewFixedWindow(FixedWindowParams{Limit: 7, Window: time.Minute, Cost: 3})), [6]int64{3, 7, 60000000, 3, 0, 0}},
		{must(NewSlidingLog(SlidingLogParams{Limit: 8, Window: time.Hour})), [6]int64{4, 8, 3600000000, 1, 0, 0}},
		{must(NewSlidingWindow(SlidingWindowParams{Limit: 9, Window: time.Minute, Slots: 6, Cost: 2})), [6]int64{5, 9, 60000000, 6, 2, 0}},
	} {
		if got, err := c.l.ScriptParams(); got != c.want || err != nil {
			t.Errorf("%v: %v (%v), want %v", c.l, got, err, c.want)
		}
	}
	for _, c := range []struct {
		l     Limit
		field string
	}{
		{must(NewTokenBucket(TokenBucketParams{Rate: Rate{1, time.Second + 1}, Burst: 1})), "rate"},
		{must(NewTokenBucket(TokenBucketParams{Rate: Rate{MaxCount, 1 << 40 * time.Microsecond}, Burst: 1})), "rate"},
		{must(NewTokenBucket(TokenBucketParams{Rate: Rate{1, 1 << 30 * time.Microsecond}, Burst: MaxCount})), "rate"},
		{must(NewLeakyBucket(LeakyBucketParams{Rate: Rate{1, time.Second + 1}})), "rate"},
		{must(NewLeakyBucket(LeakyBucketParams{Rate: Rate{1, time.Second}, MaxWait: 1})), "max_wait"},
		{must(NewLeakyBucket(LeakyBucketParams{Rate: Rate{1, 1 << 40 * time.Microsecond}, Delay: MaxQueue})), "delay"},
		{must(NewFixedWindow(FixedWindowParams{Limit: 1, Window: 1500})), "window"},
		{must(NewSlidingLog(SlidingLogParams{Limit: 1, Window: 1500})), "window"},
		{must(NewSlidingWindow(SlidingWindowParams{Limit: 1, Window: 1500, Slots: 1})), "window"},
		{must(NewSlidingWindow(SlidingWindowParams{Limit: 1, Window: 3 * time.Microsecond, Slots: 2})), "slots"}, // slots of 1.5 µs
		{must(NewSlidingWindow(SlidingWindowParams{Limit: MaxCount, Window: 24 * time.Hour, Slots: 1})), "limit"},
	} {
		_, err := c.l.ScriptParams()
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Field != c.field || pe.Algorithm != c.l.Algorithm() {
			t.Errorf("%v: %v, want a ParamError at %s", c.l, err, c.field)
		}
	}
	if _, err := (&Limit{}).ScriptParams(); err == nil {
		t.Error("the zero Limit has script parameters")
	}
	// The bounds themselves: each product at 2^53 exactly passes, one
	// more does not.
	const µs = time.Microsecond
	for _, c := range []struct {
		l  Limit
		ok bool
	}{
		// 1750/5146971µs earns p = 1.75·10⁹ every q = 5146971 µs:
		// p·q just below 2^53, p = ⌊2^53/q⌋.
		{must(NewTokenBucket(TokenBucketParams{Rate: Rate{1750, 5146971 * µs}, Burst: 1})), true},
		{must(NewTokenBucket(TokenBucketParams{Rate: Rate{MaxCount, 11 * µs}, Burst: 1})), false},
		// burst·10⁶·q: 1/11µs earns 10⁶ every 11 µs; ⌊2^53/10⁶/11⌋ = 818836295.
		{must(NewTokenBucket(TokenBucketParams{Rate: Rate{1, 11 * µs}, Burst: 818836295})), true},
		{must(NewTokenBucket(TokenBucketParams{Rate: Rate{1, 11 * µs}, Burst: 818836296})), false},
		// A leaky bucket's lead, delay·interval: 2^53 µs passes.
		{must(NewLeakyBucket(LeakyBucketParams{Rate: Rate{1, 1 << 53 * µs}, Delay: 1})), true},
		{must(NewLeakyBucket(LeakyBucketParams{Rate: Rate{1, (1<<53 + 1) * µs}, Delay: 1})), false},
		{must(NewLeakyBucket(LeakyBucketParams{Rate: Rate{1, 1 << 53 * µs}, Delay: 2})), false},
		{must(NewLeakyBucket(LeakyBucketParams{Rate: Rate{1, 1 << 62 / 1000 * µs}})), true}, // no delay: no lead
		// A sliding window's (limit+1)·window: 2^23 · 2^30 µs passes.
		{must(NewSlidingWindow(SlidingWindowParams{Limit: 1<<23 - 1, Window: 1 << 30 * µs, Slots: 1})), true},
		{must(NewSlidingWindow(SlidingWindowParams{Limit: 1 << 23, Window: 1 << 30 * µs, Slots: 1})), false},
	} {
		if _, err := c.l.ScriptParams(); (err == nil) != c.ok {
			t.Errorf("%v: %v, want accepted %v", c.l, err, c.ok)
		}
	}
	// A leaky bucket's interval is rounded up, not past the next µs.
	lb := must(NewLeakyBucket(LeakyBucketParams{Rate: Rate{10, time.Second}}))
	if p, _ := lb.ScriptParams(); p[1] != 100000 {
		t.Errorf("10/s: interval %d µs, want 100000", p[1])
	}
}

// TestDescribe: a limit in configuration terms, the optional parts only
// when set, and the zero Limit's quota.
func TestDescribe(t *testing.T) {
	must := mustLimit(t)
	r := Rate{10, time.Second}
	for _, c := range []struct {
		l    Limit
		want string
	}{
		{must(NewTokenBucket(TokenBucketParams{Rate: r, Burst: 20})), "token_bucket rate=10/1s burst=20"},
		{must(NewLeakyBucket(LeakyBucketParams{Rate: r, Queue: 3, MaxWait: time.Second})), "leaky_bucket rate=10/1s queue=3 max_wait=1s"},
		{must(NewLeakyBucket(LeakyBucketParams{Rate: r, Queue: 3, MaxWait: time.Second, Delay: 2, Cost: 2})).Shared("z"), "leaky_bucket rate=10/1s queue=3 max_wait=1s delay=2 cost=2 shared=z"},
		{must(NewFixedWindow(FixedWindowParams{Limit: 7, Window: time.Minute})), "fixed_window limit=7 window=1m0s"},
		{must(NewSlidingLog(SlidingLogParams{Limit: 8, Window: time.Hour})), "sliding_log limit=8 window=1h0m0s"},
		{must(NewSlidingWindow(SlidingWindowParams{Limit: 9, Window: time.Minute, Slots: 6})), "sliding_window limit=9 window=1m0s slots=6"},
	} {
		if got := c.l.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
	if q, w := (&Limit{}).Quota(); q != 0 || w != 0 {
		t.Errorf("the zero Limit's quota: %d over %v", q, w)
	}
}

// TestStates: a Store's moves keep each state whole, and leave fresh
// ones behind.
func TestStates(t *testing.T) {
	must := mustLimit(t)
	for _, l := range []Limit{
		must(NewTokenBucket(TokenBucketParams{Rate: Rate{1, time.Minute}, Burst: 3})),
		must(NewLeakyBucket(LeakyBucketParams{Rate: Rate{1, time.Minute}})),
		must(NewFixedWindow(FixedWindowParams{Limit: 3, Window: time.Minute})),
		must(NewSlidingLog(SlidingLogParams{Limit: 3, Window: time.Minute})),
		must(NewSlidingWindow(SlidingWindowParams{Limit: 3, Window: time.Minute, Slots: 1})),
		must(NewSlidingWindow(SlidingWindowParams{Limit: 3, Window: 56 * time.Second, Slots: 7})),
		must(NewSlidingWindow(SlidingWindowParams{Limit: 3, Window: 56 * time.Second, Slots: 8})),
	} {
		st := l.NewStates(3)
		// A sliding window's counters are inline, in the smallest of
		// three sizes that holds Slots+1 of them.
		if p, ok := l.Params().(SlidingWindowParams); ok {
			var fits bool
			switch k := p.Slots + 1; {
			case k <= 2:
				_, fits = st.(array[swCounts2])
			case k <= 8:
				_, fits = st.(array[swCounts8])
			default:
				_, fits = st.(array[swCounts65])
			}
			if !fits {
				t.Errorf("%v: states %T", l, st)
			}
		}
		l.Step(st, 1, nil, at(0), 1)
		used := l.IdleAt(st, 1, nil)
		if used.IsZero() || !l.IdleAt(st, 0, nil).IsZero() {
			t.Fatalf("%v: state 1 idle at %v, state 0 at %v", l, used, l.IdleAt(st, 0, nil))
		}
		st.Move(2, 1)
		if !l.IdleAt(st, 1, nil).IsZero() || !l.IdleAt(st, 2, nil).Equal(used) {
			t.Errorf("%v: Move left state 1 idle at %v, moved 2 at %v", l, l.IdleAt(st, 1, nil), l.IdleAt(st, 2, nil))
		}
		bigger := st.Make(5)
		bigger.Copy(4, st, 2)
		if !l.IdleAt(bigger, 4, nil).Equal(used) || !l.IdleAt(bigger, 2, nil).IsZero() {
			t.Errorf("%v: Copy into a new array: idle at %v", l, l.IdleAt(bigger, 4, nil))
		}
		st.Clear(2)
		if !l.IdleAt(st, 2, nil).IsZero() || !l.IdleAt(bigger, 4, nil).Equal(used) {
			t.Errorf("%v: Clear left state 2 idle at %v, or changed the copy", l, l.IdleAt(st, 2, nil))
		}
	}
}

// TestEpochGrid: windows aligned to the epoch, before it too, and an
// end that saturates rather than wraps.
func TestEpochGrid(t *testing.T) {
	g := epochGrid(10)
	for _, c := range []struct{ t, k, start, end int64 }{
		{0, 0, 0, 10}, {9, 0, 0, 10}, {10, 1, 10, 20}, {-1, -1, -10, 0}, {-10, -1, -10, 0}, {-11, -2, -20, -10},
	} {
		k := g.index(c.t)
		start, end := g.bounds(k)
		if k != c.k || start != c.start || end != c.end {
			t.Errorf("instant %d: window %d [%d, %d), want %d [%d, %d)", c.t, k, start, end, c.k, c.start, c.end)
		}
	}
	if _, end := epochGrid(1 << 62).bounds(1); end != math.MaxInt64 {
		t.Errorf("the last window ends at %d, want the largest instant", end)
	}
}
