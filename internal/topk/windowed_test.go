package topk

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

// t0 is on a 10 s boundary of Unix time, so epochs of 10 s start at t0,
// t0+10s, and so on.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestWindowedSteps(t *testing.T) {
	w, err := NewWindowed(WindowedParams{K: 2, Period: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const ns = time.Nanosecond
	s := time.Second
	type step struct {
		add   []update // added at now, before the reads
		now   time.Time
		total uint64
		top   []Entry
	}
	steps := []step{
		// Epoch 0: a 5, b 2, then c evicts b: c 3 (err 2).
		{[]update{{"a", 5}, {"b", 2}, {"c", 1}}, at(0), 8, []Entry{{"a", 5, 0}, {"c", 3, 2}}},
		{nil, at(10*s - ns), 8, []Entry{{"a", 5, 0}, {"c", 3, 2}}},
		// Epoch 1: the previous epoch (a 5, c 3 err 2: full, min 3) still
		// counts, and the current one fills up (a 1, d 4: min 1). a is in
		// both: 5+1. d is only in the current one, so it gains the previous
		// minimum as count and error: 4+3, err 0+3. c is only in the
		// previous one and gains the current minimum: 3+1, err 2+1.
		{[]update{{"a", 1}, {"d", 4}}, at(10 * s), 13, []Entry{{"d", 7, 3}, {"a", 6, 0}, {"c", 4, 3}}},
		// Time going backwards: counted in the newest epoch seen (1), whose
		// minimum becomes a's 2. Ties by key.
		{[]update{{"a", 1}}, at(9 * s), 14, []Entry{{"a", 7, 0}, {"d", 7, 3}, {"c", 5, 4}}},
		// e evicts a (2) from the current epoch: e 3 err 2, minimum 3. Now
		// a is only in the previous epoch: 5+3, err 0+3.
		{[]update{{"e", 1}}, at(19 * s), 15, []Entry{{"a", 8, 3}, {"d", 7, 3}, {"c", 6, 5}, {"e", 6, 5}}},
		// Epoch 2: epoch 0 is gone; epoch 1 (d 4, e 3 err 2) is previous.
		{nil, at(20 * s), 7, []Entry{{"d", 4, 0}, {"e", 3, 2}}},
		{[]update{{"d", 1}}, at(29*s + 999*time.Millisecond), 8, []Entry{{"d", 5, 0}, {"e", 3, 2}}},
		// Epoch 4 after a silent epoch 3: nothing is left.
		{nil, at(40 * s), 0, nil},
		{[]update{{"f", 2}}, at(41 * s), 2, []Entry{{"f", 2, 0}}},
	}
	for i, st := range steps {
		for _, u := range st.add {
			w.Add(u.key, u.w, st.now)
		}
		if got := w.Top(10, st.now); !slices.Equal(got, st.top) {
			t.Errorf("step %d: Top(10, %v) = %v, want %v", i, st.now.Sub(t0), got, st.top)
		}
		if got := w.Total(st.now); got != st.total {
			t.Errorf("step %d: Total(%v) = %d, want %d", i, st.now.Sub(t0), got, st.total)
		}
	}
	if got, want := w.Top(1, at(41*s)), []Entry{{"f", 2, 0}}; !slices.Equal(got, want) {
		t.Errorf("Top(1) = %v, want %v", got, want)
	}
	if got := w.Top(0, at(41*s)); got != nil {
		t.Errorf("Top(0) = %v, want nil", got)
	}
}

// TestWindowedReadRotates checks that a read alone rotates: after a silent
// epoch, Top and Total at a later instant see nothing.
func TestWindowedReadRotates(t *testing.T) {
	w, _ := NewWindowed(WindowedParams{K: 4, Period: time.Minute})
	w.Add("a", 1, at(0))
	if got := w.Total(at(119 * time.Second)); got != 1 {
		t.Errorf("Total(1m59s) = %d, want 1", got)
	}
	if got := w.Top(4, at(2*time.Minute)); got != nil {
		t.Errorf("Top(4, 2m) = %v, want nil", got)
	}
	// The read at 2m moved the window: an earlier instant stays there.
	if got := w.Total(at(0)); got != 0 {
		t.Errorf("Total(0) after reading at 2m = %d, want 0", got)
	}
}

func TestEpochOf(t *testing.T) {
	const p = int64(10 * time.Second)
	for _, c := range []struct {
		t    time.Time
		want int64
	}{
		{time.Unix(0, 0), 0},
		{time.Unix(9, 999_999_999), 0},
		{time.Unix(10, 0), 1},
		{time.Unix(0, -1), -1},
		{time.Unix(-10, 0), -1},
		{time.Unix(-10, -1), -2},
	} {
		if got := epochOf(c.t, p); got != c.want {
			t.Errorf("epochOf(%v) = %d, want %d", c.t.UTC(), got, c.want)
		}
	}
}

func TestNewWindowedRejects(t *testing.T) {
	for _, p := range []WindowedParams{{K: 0, Period: time.Second}, {K: 1, Period: 0}, {K: 1, Period: -time.Second}} {
		if _, err := NewWindowed(p); err == nil {
			t.Errorf("NewWindowed(%+v): no error", p)
		}
	}
}

// TestWindowedGuarantees runs a Zipf stream over several epochs and checks
// the merged bounds against exact counts over the last two epochs.
func TestWindowedGuarantees(t *testing.T) {
	const k = 20
	const period = time.Second
	r := rand.New(rand.NewPCG(8, 9))
	z := rand.NewZipf(r, 1.2, 1, 2_000)
	w, _ := NewWindowed(WindowedParams{K: k, Period: period})
	counts := map[int]map[string]uint64{} // epoch → key → weight
	var maxErr uint64
	heavy := 0
	for i := range 60_000 {
		now := t0.Add(time.Duration(i) * 100 * time.Microsecond) // 10,000 per epoch
		e := int(now.Sub(t0) / period)
		key := "k" + strconv.FormatUint(z.Uint64(), 10)
		wt := 1 + r.Uint64N(4)
		w.Add(key, wt, now)
		if counts[e] == nil {
			counts[e] = map[string]uint64{}
		}
		counts[e][key] += wt
		if i%1_009 != 0 {
			continue
		}
		exact := map[string]uint64{}
		var n uint64
		for _, ep := range []int{e - 1, e} {
			for key, c := range counts[ep] {
				exact[key] += c
				n += c
			}
		}
		if got := w.Total(now); got != n {
			t.Fatalf("update %d: Total = %d, want %d", i, got, n)
		}
		top := w.Top(2*k, now)
		in := map[string]bool{}
		for j, en := range top {
			in[en.Key] = true
			c := exact[en.Key]
			if en.Err > en.Count || en.Count-en.Err > c || c > en.Count {
				t.Fatalf("update %d: %v: true count %d not in [Count−Err, Count]", i, en, c)
			}
			if en.Err*k > n {
				t.Fatalf("update %d: %v: Err > N/k = %d/%d", i, en, n, k)
			}
			if j > 0 && (top[j-1].Count < en.Count || top[j-1].Count == en.Count && top[j-1].Key >= en.Key) {
				t.Fatalf("update %d: order: %v before %v", i, top[j-1], en)
			}
			maxErr = max(maxErr, en.Err)
		}
		for key, c := range exact {
			if c*k > n {
				heavy++
				if !in[key] {
					t.Fatalf("update %d: key %q with true count %d > N/k = %d/%d missing", i, key, c, n, k)
				}
			}
		}
	}
	if maxErr == 0 || heavy == 0 {
		t.Errorf("stream too easy: max Err %d, heavy keys seen %d", maxErr, heavy)
	}
}
