package limitertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/perkey"
)

// NewOverrides prepares override stores for one subtest and returns a
// function that opens one. Every store it opens is over the same persisted
// data: the first is empty, and each later one starts from what the
// earlier ones persisted, as after a restart (the memory store: a new
// store loading the same file; Redis: a new store on the same server and
// prefix). A store it opens must be ready (its overrides loaded) and hold
// at most OverridesBound overrides. It may register cleanups on t.
type NewOverrides func(t *testing.T) (open func() perkey.Overrides)

// OverridesBound is the bound on the number of overrides that the stores
// RunOverrides opens must have, so that it can check Set at the bound.
const OverridesBound = 20

// RunOverrides checks an override store (perkey.Overrides): Set, Get,
// Remove and List exactly, both forms of an override, policies and keys
// kept apart, validation at and past every bound, copies, the bound on
// their number (an error, never an eviction), a restart (a new store over
// the same persisted data), concurrent use, and a Get that does not
// allocate.
func RunOverrides(t *testing.T, newStore NewOverrides) {
	one := func(f func(*testing.T, perkey.Overrides)) func(*testing.T) {
		return func(t *testing.T) { f(t, newStore(t)()) }
	}
	t.Run("SetGet", one(runOverrideSetGet))
	t.Run("Replace", one(runOverrideReplace))
	t.Run("Remove", one(runOverrideRemove))
	t.Run("List", one(runOverrideList))
	t.Run("Invalid", one(runOverrideInvalid))
	t.Run("AtBounds", one(runOverrideAtBounds))
	t.Run("Copies", one(runOverrideCopies))
	t.Run("Full", one(runOverrideFull))
	t.Run("Restart", func(t *testing.T) { runOverrideRestart(t, newStore(t)) })
	t.Run("Concurrent", one(runOverrideConcurrent))
	t.Run("GetAllocs", one(runOverrideGetAllocs))
}

// ovT0 is the instant the suite's overrides are set at: a whole day, plus
// nanoseconds that a store must keep.
var ovT0 = time.Unix(0, base+123_456_789)

// tier is a limits-form override: two limits of every field kind.
func tier(policy, key string) perkey.Override {
	return perkey.Override{Policy: policy, Key: key, SetAt: ovT0, Note: "gold tier",
		Limits: []perkey.LimitSpec{
			{Algorithm: limiter.TokenBucket, Rate: limiter.Rate{N: 500, Per: time.Second}, Burst: 1000, Cost: 2},
			{Algorithm: limiter.LeakyBucket, Rate: limiter.Rate{N: 30, Per: 5 * time.Minute}, Queue: 10, MaxWait: 1500 * time.Millisecond, Delay: 3},
		}}
}

// scaled is a scale-form override.
func scaled(policy, key string, scale float64) perkey.Override {
	return perkey.Override{Policy: policy, Key: key, Scale: scale, SetAt: ovT0.Add(time.Minute)}
}

func mustSet(t *testing.T, s perkey.Overrides, o perkey.Override) {
	t.Helper()
	if err := s.Set(context.Background(), o); err != nil {
		t.Fatalf("Set(%s): %v", showOverride(o), err)
	}
}

// sameOverride compares two overrides field by field, instants with
// Equal.
func sameOverride(a, b perkey.Override) bool {
	return a.Policy == b.Policy && a.Key == b.Key && slices.Equal(a.Limits, b.Limits) &&
		(a.Scale == b.Scale || math.IsNaN(a.Scale) && math.IsNaN(b.Scale)) && a.Note == b.Note && a.SetAt.Equal(b.SetAt)
}

func showOverride(o perkey.Override) string {
	return fmt.Sprintf("{%q/%q limits=%+v scale=%v note=%q set_at=%s}", o.Policy, o.Key, o.Limits, o.Scale, o.Note, o.SetAt.UTC().Format(time.RFC3339Nano))
}

// checkGet checks that Get(policy, key) is want (ok) or nothing (!ok),
// and that a found override's SetAt is in UTC.
func checkGet(t *testing.T, s perkey.Overrides, policy, key string, want perkey.Override, ok bool) {
	t.Helper()
	got, found := s.Get(policy, key)
	switch {
	case found != ok:
		t.Fatalf("Get(%q, %q) = %s, %v; want %v", policy, key, showOverride(got), found, ok)
	case ok && !sameOverride(got, want):
		t.Fatalf("Get(%q, %q) = %s, want %s", policy, key, showOverride(got), showOverride(want))
	case ok && got.SetAt.Location() != time.UTC:
		t.Fatalf("Get(%q, %q): SetAt in %v, want UTC", policy, key, got.SetAt.Location())
	}
}

// listed returns List's answer as "policy/key" words.
func listed(t *testing.T, s perkey.Overrides, policy string, max int) string {
	t.Helper()
	l, err := s.List(context.Background(), policy, max)
	if err != nil {
		t.Fatalf("List(%q, %d): %v", policy, max, err)
	}
	var w []string
	for _, o := range l {
		w = append(w, o.Policy+"/"+o.Key)
	}
	return strings.Join(w, " ")
}

// runOverrideSetGet: both forms come back exactly; other keys and
// policies, and names a careless encoding would confuse, have none.
func runOverrideSetGet(t *testing.T, s perkey.Overrides) {
	checkGet(t, s, "api", "k", perkey.Override{}, false) // an empty store
	a, b := tier("api", "k"), scaled("api", "partner", 10)
	mustSet(t, s, a)
	mustSet(t, s, b)
	checkGet(t, s, "api", "k", a, true)
	checkGet(t, s, "api", "partner", b, true)
	checkGet(t, s, "api", "other", perkey.Override{}, false)
	checkGet(t, s, "web", "k", perkey.Override{}, false)
	checkGet(t, s, "ap", "ik", perkey.Override{}, false)
	c := scaled("a:b", "c", 0.5)
	mustSet(t, s, c)
	checkGet(t, s, "a", "b:c", perkey.Override{}, false)
	checkGet(t, s, "a:b", "c", c, true)
	// Keys and notes of any UTF-8, newlines and JSON's specials included.
	odd := scaled("api", "k\n\"\\ <&> é 🙂 \x00", 2)
	odd.Note = "line 1\nline 2 <b>&</b>"
	mustSet(t, s, odd)
	checkGet(t, s, "api", odd.Key, odd, true)
	// The zero SetAt (unknown) is kept as such.
	zero := scaled("api", "no-time", 3)
	zero.SetAt = time.Time{}
	mustSet(t, s, zero)
	checkGet(t, s, "api", "no-time", zero, true)
}

// runOverrideReplace: a second Set of a key replaces its override, form
// included.
func runOverrideReplace(t *testing.T, s perkey.Overrides) {
	mustSet(t, s, scaled("api", "k", 10))
	b := tier("api", "k")
	b.SetAt = ovT0.Add(time.Hour)
	mustSet(t, s, b)
	checkGet(t, s, "api", "k", b, true)
	c := scaled("api", "k", 0.25)
	mustSet(t, s, c)
	checkGet(t, s, "api", "k", c, true)
	if got := listed(t, s, "", 10); got != "api/k" {
		t.Fatalf("List after replacing = %q, want one override", got)
	}
}

// runOverrideRemove: Remove deletes one override and reports whether
// there was one.
func runOverrideRemove(t *testing.T, s perkey.Overrides) {
	ctx := context.Background()
	mustSet(t, s, tier("api", "k"))
	mustSet(t, s, tier("web", "k"))
	mustSet(t, s, tier("api", "k2"))
	if ok, err := s.Remove(ctx, "api", "k"); err != nil || !ok {
		t.Fatalf("Remove(api, k) = %v, %v; want true", ok, err)
	}
	checkGet(t, s, "api", "k", perkey.Override{}, false)
	checkGet(t, s, "web", "k", tier("web", "k"), true)
	checkGet(t, s, "api", "k2", tier("api", "k2"), true)
	for _, pk := range [][2]string{{"api", "k"}, {"api", "never"}, {"nobody", "k"}} {
		if ok, err := s.Remove(ctx, pk[0], pk[1]); err != nil || ok {
			t.Fatalf("Remove(%s, %s) = %v, %v; want false", pk[0], pk[1], ok, err)
		}
	}
	mustSet(t, s, scaled("api", "k", 4))
	checkGet(t, s, "api", "k", scaled("api", "k", 4), true)
	if got := listed(t, s, "", 10); got != "api/k api/k2 web/k" {
		t.Fatalf("List = %q", got)
	}
}

// runOverrideList: sorted by policy then key (bytes), per policy or all,
// at most max.
func runOverrideList(t *testing.T, s perkey.Overrides) {
	for _, pk := range [][2]string{{"b", "k1"}, {"a", "z"}, {"a", "B"}, {"b", "k0"}, {"a", "a"}, {"ab", "k"}, {"a", "a "}} {
		mustSet(t, s, scaled(pk[0], pk[1], 2))
	}
	for _, c := range []struct {
		policy string
		max    int
		want   string
	}{
		{"", 100, "a/B a/a a/a  a/z ab/k b/k0 b/k1"},
		{"", 3, "a/B a/a a/a "},
		{"", 0, ""},
		{"", -1, ""},
		{"a", 100, "a/B a/a a/a  a/z"},
		{"a", 1, "a/B"},
		{"b", 100, "b/k0 b/k1"},
		{"ab", 100, "ab/k"},
		{"nobody", 100, ""},
	} {
		if got := listed(t, s, c.policy, c.max); got != c.want {
			t.Errorf("List(%q, %d) = %q, want %q", c.policy, c.max, got, c.want)
		}
	}
	// List returns whole overrides.
	mustSet(t, s, tier("b", "k0"))
	l, err := s.List(context.Background(), "b", 1)
	if err != nil || len(l) != 1 || !sameOverride(l[0], tier("b", "k0")) {
		t.Fatalf("List(b, 1) = %v, %v; want %s", l, err, showOverride(tier("b", "k0")))
	}
}

// runOverrideInvalid: every structural error and bound is refused with
// ErrInvalidOverride, and stores nothing.
func runOverrideInvalid(t *testing.T, s perkey.Overrides) {
	spec := perkey.LimitSpec{Algorithm: limiter.FixedWindow, Limit: 10, Window: time.Second}
	with := func(f func(*perkey.Override)) perkey.Override {
		o := tier("api", "k")
		f(&o)
		return o
	}
	withSpec := func(f func(*perkey.LimitSpec)) perkey.Override {
		return with(func(o *perkey.Override) {
			l := spec
			f(&l)
			o.Limits = []perkey.LimitSpec{l}
		})
	}
	for _, c := range []struct {
		name string
		o    perkey.Override
	}{
		{"zero", perkey.Override{}},
		{"no policy", with(func(o *perkey.Override) { o.Policy = "" })},
		{"no key", with(func(o *perkey.Override) { o.Key = "" })},
		{"long policy", with(func(o *perkey.Override) { o.Policy = strings.Repeat("p", perkey.MaxOverridePolicy+1) })},
		{"long key", with(func(o *perkey.Override) { o.Key = strings.Repeat("k", perkey.MaxOverrideKey+1) })},
		{"long note", with(func(o *perkey.Override) { o.Note = strings.Repeat("n", perkey.MaxOverrideNote+1) })},
		{"key not UTF-8", with(func(o *perkey.Override) { o.Key = "k\xff" })},
		{"policy not UTF-8", with(func(o *perkey.Override) { o.Policy = "\xc3" })},
		{"note not UTF-8", with(func(o *perkey.Override) { o.Note = "\xed\xa0\x80" })},
		{"both forms", with(func(o *perkey.Override) { o.Scale = 2 })},
		{"neither form", with(func(o *perkey.Override) { o.Limits = nil })},
		{"empty limits", with(func(o *perkey.Override) { o.Limits = []perkey.LimitSpec{} })},
		{"too many limits", with(func(o *perkey.Override) {
			o.Limits = slices.Repeat([]perkey.LimitSpec{spec}, perkey.MaxOverrideLimits+1)
		})},
		{"negative scale", scaled("api", "k", -2)},
		{"NaN scale", scaled("api", "k", math.NaN())},
		{"infinite scale", scaled("api", "k", math.Inf(1))},
		{"huge scale", scaled("api", "k", perkey.MaxOverrideScale*1.0000001)},
		{"no algorithm", withSpec(func(l *perkey.LimitSpec) { l.Algorithm = 0 })},
		{"unknown algorithm", withSpec(func(l *perkey.LimitSpec) { l.Algorithm = 6 })},
		{"negative rate", withSpec(func(l *perkey.LimitSpec) { l.Rate = limiter.Rate{N: -1, Per: time.Second} })},
		{"negative period", withSpec(func(l *perkey.LimitSpec) { l.Rate = limiter.Rate{N: 1, Per: -time.Second} })},
		{"negative burst", withSpec(func(l *perkey.LimitSpec) { l.Burst = -1 })},
		{"negative limit", withSpec(func(l *perkey.LimitSpec) { l.Limit = -1 })},
		{"negative window", withSpec(func(l *perkey.LimitSpec) { l.Window = -time.Second })},
		{"negative slots", withSpec(func(l *perkey.LimitSpec) { l.Slots = -1 })},
		{"negative queue", withSpec(func(l *perkey.LimitSpec) { l.Queue = -1 })},
		{"negative max_wait", withSpec(func(l *perkey.LimitSpec) { l.MaxWait = -time.Nanosecond })},
		{"negative delay", withSpec(func(l *perkey.LimitSpec) { l.Delay = -1 })},
		{"negative cost", withSpec(func(l *perkey.LimitSpec) { l.Cost = -1 })},
		{"year 10000", with(func(o *perkey.Override) { o.SetAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) })},
		{"year -1", with(func(o *perkey.Override) { o.SetAt = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC) })},
	} {
		err := s.Set(context.Background(), c.o)
		if !errors.Is(err, perkey.ErrInvalidOverride) {
			t.Errorf("%s: Set = %v, want ErrInvalidOverride", c.name, err)
		}
		if v := c.o.Validate(); !errors.Is(v, perkey.ErrInvalidOverride) {
			t.Errorf("%s: Validate = %v, want ErrInvalidOverride", c.name, v)
		}
	}
	if got := listed(t, s, "", 100); got != "" {
		t.Fatalf("refused overrides were stored: %q", got)
	}
	checkGet(t, s, "api", "k", perkey.Override{}, false)
}

// runOverrideAtBounds: every bound is inclusive, and extreme values come
// back exactly.
func runOverrideAtBounds(t *testing.T, s perkey.Overrides) {
	all := make([]perkey.LimitSpec, perkey.MaxOverrideLimits)
	for i := range all {
		all[i] = perkey.LimitSpec{Algorithm: limiter.Algorithm(1 + i%5), Rate: limiter.Rate{N: math.MaxInt64, Per: math.MaxInt64},
			Burst: math.MaxInt64, Limit: int64(i), Window: time.Duration(i)*time.Hour + 1, Slots: 60, Queue: 1 << 40,
			MaxWait: math.MaxInt64, Delay: 7, Cost: 1}
	}
	for _, o := range []perkey.Override{
		{Policy: strings.Repeat("p", perkey.MaxOverridePolicy), Key: strings.Repeat("é", perkey.MaxOverrideKey/2),
			Note: strings.Repeat("n", perkey.MaxOverrideNote), Limits: all, SetAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)},
		{Policy: "p", Key: "max", Scale: perkey.MaxOverrideScale, SetAt: time.Date(0, 1, 1, 0, 0, 0, 1, time.UTC)},
		{Policy: "p", Key: "tiny", Scale: math.SmallestNonzeroFloat64, SetAt: ovT0},
		{Policy: "p", Key: "third", Scale: 1.0 / 3, SetAt: ovT0},
		{Policy: "p", Key: "zero-spec", Limits: []perkey.LimitSpec{{Algorithm: limiter.SlidingWindow}}, SetAt: ovT0},
	} {
		mustSet(t, s, o)
		checkGet(t, s, o.Policy, o.Key, o, true)
	}
}

// runOverrideCopies: the store keeps its own copy of Set's Limits, and
// List's results are the caller's to modify.
func runOverrideCopies(t *testing.T, s perkey.Overrides) {
	o := tier("api", "k")
	mustSet(t, s, o)
	o.Limits[0].Burst = 1
	checkGet(t, s, "api", "k", tier("api", "k"), true)
	l, err := s.List(context.Background(), "", 10)
	if err != nil || len(l) != 1 {
		t.Fatalf("List = %v, %v", l, err)
	}
	l[0].Limits[1].Queue = 99
	checkGet(t, s, "api", "k", tier("api", "k"), true)
}

// runOverrideFull: a store at its bound refuses a new key with
// ErrTooManyOverrides (evicting nothing), and still replaces and removes;
// a removal makes room.
func runOverrideFull(t *testing.T, s perkey.Overrides) {
	ctx := context.Background()
	for i := range OverridesBound {
		mustSet(t, s, scaled("p"+strconv.Itoa(i%3), "k"+strconv.Itoa(i), 2))
	}
	extra := scaled("p0", "extra", 2)
	if err := s.Set(ctx, extra); !errors.Is(err, perkey.ErrTooManyOverrides) {
		t.Fatalf("Set of override %d = %v, want ErrTooManyOverrides", OverridesBound+1, err)
	}
	checkGet(t, s, "p0", "extra", perkey.Override{}, false)
	l, err := s.List(ctx, "", 2*OverridesBound)
	if err != nil || len(l) != OverridesBound {
		t.Fatalf("List after the refusal: %d overrides, %v; want %d", len(l), err, OverridesBound)
	}
	for i := range OverridesBound {
		checkGet(t, s, "p"+strconv.Itoa(i%3), "k"+strconv.Itoa(i), scaled("p"+strconv.Itoa(i%3), "k"+strconv.Itoa(i), 2), true)
	}
	// Replacing a key at the bound is no new key.
	mustSet(t, s, tier("p0", "k0"))
	checkGet(t, s, "p0", "k0", tier("p0", "k0"), true)
	if ok, err := s.Remove(ctx, "p1", "k1"); err != nil || !ok {
		t.Fatalf("Remove = %v, %v", ok, err)
	}
	mustSet(t, s, extra)
	checkGet(t, s, "p0", "extra", extra, true)
	if err := s.Set(ctx, scaled("p0", "extra2", 2)); !errors.Is(err, perkey.ErrTooManyOverrides) {
		t.Fatalf("Set past the bound again = %v, want ErrTooManyOverrides", err)
	}
}

// runOverrideRestart: a new store over the same persisted data has every
// override set, replaced or removed before, exactly.
func runOverrideRestart(t *testing.T, open func() perkey.Overrides) {
	ctx := context.Background()
	s := open()
	want := map[[2]string]perkey.Override{}
	set := func(o perkey.Override) {
		t.Helper()
		mustSet(t, s, o)
		want[[2]string{o.Policy, o.Key}] = o
	}
	set(tier("api", "k"))
	set(scaled("api", "partner", 10))
	set(scaled("web", "k\n\"é🙂 <&>", 1.0/3))
	set(scaled("web", "gone", 2))
	b := tier("api", "replaced")
	set(b)
	b.Limits = b.Limits[:1]
	b.Note = ""
	set(b)
	if ok, err := s.Remove(ctx, "web", "gone"); err != nil || !ok {
		t.Fatalf("Remove = %v, %v", ok, err)
	}
	delete(want, [2]string{"web", "gone"})
	check := func(s perkey.Overrides, when string) {
		t.Helper()
		for pk, o := range want {
			checkGet(t, s, pk[0], pk[1], o, true)
		}
		checkGet(t, s, "web", "gone", perkey.Override{}, false)
		l, err := s.List(ctx, "", 100)
		if err != nil || len(l) != len(want) {
			t.Fatalf("%s: List = %d overrides, %v; want %d", when, len(l), err, len(want))
		}
		for _, o := range l {
			if !sameOverride(o, want[[2]string{o.Policy, o.Key}]) {
				t.Fatalf("%s: List has %s", when, showOverride(o))
			}
		}
	}
	check(s, "before the restart")
	s2 := open()
	check(s2, "after a restart")
	// Changes after the restart persist too.
	if ok, err := s2.Remove(ctx, "api", "k"); err != nil || !ok {
		t.Fatalf("Remove after the restart = %v, %v", ok, err)
	}
	delete(want, [2]string{"api", "k"})
	s = s2
	set(scaled("new", "k", 5))
	check(open(), "after a second restart")
}

// runOverrideConcurrent: Set, Remove, Get and List from many goroutines,
// on keys of their own and on one shared key; afterwards each goroutine's
// keys hold what it left, and the shared key one of the values written.
func runOverrideConcurrent(t *testing.T, s perkey.Overrides) {
	ctx := context.Background()
	const workers, rounds = 8, 10
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			mine := "k" + strconv.Itoa(w)
			for r := range rounds {
				o := scaled("p", mine, float64(r+1))
				if err := s.Set(ctx, o); err != nil {
					t.Error(err)
					return
				}
				if got, ok := s.Get("p", mine); !ok || !sameOverride(got, o) {
					t.Errorf("worker %d: Get after its Set = %s, %v", w, showOverride(got), ok)
					return
				}
				if err := s.Set(ctx, scaled("p", "shared", float64(w+1))); err != nil {
					t.Error(err)
					return
				}
				s.Get("p", "shared")
				if r%3 == 2 {
					if ok, err := s.Remove(ctx, "p", mine); err != nil || !ok {
						t.Errorf("worker %d: Remove = %v, %v", w, ok, err)
						return
					}
				}
				if _, err := s.List(ctx, "p", 100); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// rounds-1 = 9: the last round (r = 9) is not one that removes.
	for w := range workers {
		checkGet(t, s, "p", "k"+strconv.Itoa(w), scaled("p", "k"+strconv.Itoa(w), rounds), true)
	}
	got, ok := s.Get("p", "shared")
	if !ok || got.Scale < 1 || got.Scale > workers || got.Scale != math.Trunc(got.Scale) {
		t.Fatalf("shared key after the race: %s, %v", showOverride(got), ok)
	}
	if n := strings.Count(listed(t, s, "p", 100), " ") + 1; n != workers+1 {
		t.Fatalf("List holds %d overrides, want %d", n, workers+1)
	}
}

// runOverrideGetAllocs: Get allocates nothing, found or not, in an empty
// store or a busy one.
func runOverrideGetAllocs(t *testing.T, s perkey.Overrides) {
	check := func(what, policy, key string) {
		t.Helper()
		if n := testing.AllocsPerRun(100, func() { s.Get(policy, key) }); n != 0 {
			t.Errorf("Get %s: %v allocations, want 0", what, n)
		}
	}
	check("in an empty store", "api", "k")
	for i := range 10 {
		mustSet(t, s, tier("api", "k"+strconv.Itoa(i)))
	}
	check("found", "api", "k3")
	check("missing", "api", "k10")
	check("under another policy", "web", "k3")
}
