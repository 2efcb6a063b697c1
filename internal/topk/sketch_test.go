package topk

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// TestSketchSteps works Space-Saving by hand on k = 2, with each eviction's
// minimum unique, so that every count and error is pinned down: a variant
// that gave the newcomer count w instead of m+w, error 0, or evicted the
// wrong counter fails here.
func TestSketchSteps(t *testing.T) {
	s, err := New(2)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		key   string
		w     uint64
		total uint64
		top   []Entry
	}{
		{"a", 3, 3, []Entry{{"a", 3, 0}}},
		{"b", 1, 4, []Entry{{"a", 3, 0}, {"b", 1, 0}}},
		{"c", 1, 5, []Entry{{"a", 3, 0}, {"c", 2, 1}}},  // evicts b (1)
		{"c", 2, 7, []Entry{{"c", 4, 1}, {"a", 3, 0}}},  // tracked: +2
		{"d", 1, 8, []Entry{{"c", 4, 1}, {"d", 4, 3}}},  // evicts a (3); tie by key
		{"x", 0, 8, []Entry{{"c", 4, 1}, {"d", 4, 3}}},  // weight 0: nothing
		{"d", 2, 10, []Entry{{"d", 6, 3}, {"c", 4, 1}}}, // tracked: +2
		{"a", 1, 11, []Entry{{"d", 6, 3}, {"a", 5, 4}}}, // evicts c (4)
	}
	for i, st := range steps {
		s.Add(st.key, st.w)
		if got := s.Total(); got != st.total {
			t.Errorf("step %d: Add(%q, %d): Total() = %d, want %d", i, st.key, st.w, got, st.total)
		}
		if got := s.Top(10); !slices.Equal(got, st.top) {
			t.Errorf("step %d: Add(%q, %d): Top(10) = %v, want %v", i, st.key, st.w, got, st.top)
		}
	}
	if got, want := s.Top(1), []Entry{{"d", 6, 3}}; !slices.Equal(got, want) {
		t.Errorf("Top(1) = %v, want %v", got, want)
	}
	if got := s.Top(0); got != nil {
		t.Errorf("Top(0) = %v, want nil", got)
	}
	if got := s.Top(-1); got != nil {
		t.Errorf("Top(-1) = %v, want nil", got)
	}
}

func TestNewRejectsK(t *testing.T) {
	for _, k := range []int{-1, 0, MaxK + 1} {
		if _, err := New(k); err == nil {
			t.Errorf("New(%d): no error", k)
		}
	}
	for _, k := range []int{1, MaxK} {
		if _, err := New(k); err != nil {
			t.Errorf("New(%d): %v", k, err)
		}
	}
}

// TestSketchK1 checks the degenerate sketch: one counter, which every new
// key takes over, inheriting the whole total as error.
func TestSketchK1(t *testing.T) {
	s, _ := New(1)
	s.Add("a", 5)
	s.Add("b", 2)
	s.Add("b", 1)
	if got, want := s.Top(3), []Entry{{"b", 8, 5}}; !slices.Equal(got, want) {
		t.Errorf("Top(3) = %v, want %v", got, want)
	}
}

func TestSketchSaturates(t *testing.T) {
	s, _ := New(2)
	s.Add("a", math.MaxUint64-1)
	s.Add("a", 5)
	s.Add("b", 7)
	if got := s.Total(); got != math.MaxUint64 {
		t.Errorf("Total() = %d, want MaxUint64", got)
	}
	if got, want := s.Top(2), []Entry{{"a", math.MaxUint64, 0}, {"b", 7, 0}}; !slices.Equal(got, want) {
		t.Errorf("Top(2) = %v, want %v", got, want)
	}
}

// update is one weighted occurrence of a key in a test stream.
type update struct {
	key string
	w   uint64
}

// streams returns the test streams, each from a fixed seed, with the k to
// run them at.
func streams() []struct {
	name string
	k    int
	ups  []update
} {
	name := func(i uint64) string { return "k" + strconv.FormatUint(i, 10) }
	unit := func(keys []uint64) []update {
		ups := make([]update, len(keys))
		for i, k := range keys {
			ups[i] = update{name(k), 1}
		}
		return ups
	}
	var out []struct {
		name string
		k    int
		ups  []update
	}
	add := func(n string, k int, ups []update) {
		out = append(out, struct {
			name string
			k    int
			ups  []update
		}{n, k, ups})
	}

	// Zipf, unit and weighted.
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.1, 1, 10_000)
	var keys []uint64
	for range 50_000 {
		keys = append(keys, z.Uint64())
	}
	add("zipf", 50, unit(keys))
	var wz []update
	for _, k := range keys {
		wz = append(wz, update{name(k), 1 + r.Uint64N(10)})
	}
	add("zipf-weighted", 50, wz)

	// Uniform over more keys than counters: constant churn, few heavy.
	keys = keys[:0]
	for range 30_000 {
		keys = append(keys, r.Uint64N(300))
	}
	add("uniform", 64, unit(keys))

	// Adversarial: round robin over k+1 keys, which evicts on every update
	// (each newcomer takes the smallest count), then heavy keys that arrive
	// late, interleaved with a flood of distinct keys.
	keys = keys[:0]
	for i := range 10_000 {
		keys = append(keys, uint64(i%11))
	}
	add("round-robin", 10, unit(keys))
	var adv []update
	for i := range 20_000 {
		adv = append(adv, update{"flood" + strconv.Itoa(i), 1})
		if i >= 15_000 && i%4 == 0 {
			adv = append(adv, update{"late" + strconv.Itoa(i%3), 3})
		}
	}
	add("late-heavy", 20, adv)

	// Adversarial weights: one key with a huge weight among unit ones.
	var huge []update
	for i := range 5_000 {
		huge = append(huge, update{name(uint64(i % 97)), 1})
		if i == 2_500 {
			huge = append(huge, update{"whale", 10_000})
		}
	}
	add("whale", 8, huge)
	return out
}

// TestSketchGuarantees runs every stream against an exact count and checks
// Space-Saving's bounds at checkpoints along the way.
func TestSketchGuarantees(t *testing.T) {
	for _, st := range streams() {
		t.Run(st.name, func(t *testing.T) {
			s, err := New(st.k)
			if err != nil {
				t.Fatal(err)
			}
			exact := map[string]uint64{}
			var n uint64
			var maxErr uint64
			heavy := 0
			for i, u := range st.ups {
				s.Add(u.key, u.w)
				exact[u.key] += u.w
				n += u.w
				if i%997 == 0 || i == len(st.ups)-1 {
					top := s.Top(st.k)
					if err := checkSpaceSaving(top, exact, n, st.k); err != nil {
						t.Fatalf("after update %d: %v", i, err)
					}
					if got := s.Total(); got != n {
						t.Fatalf("after update %d: Total() = %d, want %d", i, got, n)
					}
					for _, e := range top {
						maxErr = max(maxErr, e.Err)
					}
					for _, c := range exact {
						if c*uint64(st.k) > n {
							heavy++
						}
					}
				}
			}
			// The checks above must have had something to check: evictions
			// (errors) and keys above N/k.
			if maxErr == 0 || heavy == 0 {
				t.Errorf("stream too easy: max Err %d, heavy keys seen %d", maxErr, heavy)
			}
		})
	}
}

// checkSpaceSaving checks a full Top(k) of a Space-Saving sketch against the
// exact counts of the stream it summarises, of total n.
func checkSpaceSaving(top []Entry, exact map[string]uint64, n uint64, k int) error {
	want := min(k, len(exact))
	if len(top) != want {
		return fmt.Errorf("len(Top) = %d, want %d", len(top), want)
	}
	var sum uint64
	in := map[string]bool{}
	for i, e := range top {
		if in[e.Key] {
			return fmt.Errorf("key %q twice", e.Key)
		}
		in[e.Key] = true
		sum += e.Count
		if i > 0 {
			p := top[i-1]
			if p.Count < e.Count || p.Count == e.Count && p.Key >= e.Key {
				return fmt.Errorf("order: %v before %v", p, e)
			}
		}
		c := exact[e.Key]
		if e.Err > e.Count || e.Count-e.Err > c || c > e.Count {
			return fmt.Errorf("%v: true count %d not in [Count−Err, Count]", e, c)
		}
		if e.Err*uint64(k) > n {
			return fmt.Errorf("%v: Err > N/k = %d/%d", e, n, k)
		}
	}
	if sum != n {
		return fmt.Errorf("counts sum to %d, want N = %d", sum, n)
	}
	for key, c := range exact {
		if c*uint64(k) > n && !in[key] {
			return fmt.Errorf("key %q with true count %d > N/k = %d/%d missing", key, c, n, k)
		}
	}
	return nil
}

// TestCheckSpaceSavingFails shows that checkSpaceSaving, the oracle of
// TestSketchGuarantees, fails broken sketches: each case breaks one
// property of a correct result.
func TestCheckSpaceSavingFails(t *testing.T) {
	exact := map[string]uint64{"a": 6, "b": 3, "c": 1}
	good := []Entry{{"a", 6, 0}, {"b", 4, 1}}
	if err := checkSpaceSaving(good, exact, 10, 2); err != nil {
		t.Fatalf("good result: %v", err)
	}
	for _, c := range []struct {
		name string
		top  []Entry
	}{
		{"count below true", []Entry{{"a", 5, 0}, {"b", 5, 1}}},
		{"error too small", []Entry{{"a", 6, 0}, {"b", 4, 0}}},
		{"heavy key missing", []Entry{{"b", 5, 2}, {"c", 5, 4}}},
		{"sum not N", []Entry{{"a", 6, 0}, {"b", 3, 0}}},
		{"order", []Entry{{"b", 4, 1}, {"a", 6, 0}}},
		{"too few", []Entry{{"a", 10, 0}}},
		{"duplicate", []Entry{{"a", 6, 0}, {"a", 4, 4}}},
		{"err above N/k", []Entry{{"a", 6, 0}, {"b", 4, 6}}},
	} {
		if err := checkSpaceSaving(c.top, exact, 10, 2); err == nil {
			t.Errorf("%s: %v passed", c.name, c.top)
		}
	}
}

// TestSketchMinNeverDecreases checks the invariant the bounds rest on, and
// that Top(n) is a prefix of Top(k).
func TestSketchMinNeverDecreases(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	s, _ := New(16)
	var last uint64
	for i := range 20_000 {
		s.Add("k"+strconv.Itoa(int(r.Uint64N(200))), 1+r.Uint64N(3))
		s.mu.Lock()
		m := s.s.floor()
		s.mu.Unlock()
		if m < last {
			t.Fatalf("update %d: minimum %d < %d", i, m, last)
		}
		last = m
		if i%1000 == 0 {
			all := s.Top(16)
			if got := s.Top(5); !slices.Equal(got, all[:min(5, len(all))]) {
				t.Fatalf("update %d: Top(5) = %v, not a prefix of Top(16) = %v", i, got, all)
			}
		}
	}
}
