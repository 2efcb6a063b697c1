package topk

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestGaugeSteps(t *testing.T) {
	g, err := NewGauge(GaugeParams{K: 2, MaxAge: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const ns = time.Nanosecond
	s := time.Second
	type obs struct {
		key string
		v   float64
	}
	steps := []struct {
		obs []obs // observed at now, before Top
		now time.Time
		top []Reading
	}{
		{nil, at(0), nil},
		{[]obs{{"a", 0.5}, {"b", 0.7}}, at(0), []Reading{{"b", 0.7, at(0)}, {"a", 0.5, at(0)}}},
		// Full: c is not higher than the lowest (a 0.5), ties stay out,
		// and NaN is ignored.
		{[]obs{{"c", 0.4}, {"c", 0.5}, {"a", math.NaN()}}, at(s), []Reading{{"b", 0.7, at(0)}, {"a", 0.5, at(0)}}},
		// d beats the lowest (a) and takes its slot.
		{[]obs{{"d", 0.6}}, at(2 * s), []Reading{{"b", 0.7, at(0)}, {"d", 0.6, at(2 * s)}}},
		// A tracked key's value can fall; the latest counts, not the most.
		{[]obs{{"b", 0.1}}, at(3 * s), []Reading{{"d", 0.6, at(2 * s)}, {"b", 0.1, at(3 * s)}}},
		// Time going backwards: the observation is recorded at the newest
		// instant seen (3s); a read at an earlier instant reads at 3s too.
		{[]obs{{"d", 0.9}}, at(ns), []Reading{{"d", 0.9, at(3 * s)}, {"b", 0.1, at(3 * s)}}},
		// Both readings are from 3s: reported until 13s−1ns, gone at 13s.
		{nil, at(13*s - ns), []Reading{{"d", 0.9, at(3 * s)}, {"b", 0.1, at(3 * s)}}},
		{[]obs{{"b", 0.2}}, at(13*s - ns), []Reading{{"d", 0.9, at(3 * s)}, {"b", 0.2, at(13*s - ns)}}},
		// At 13s d has expired; e (lower than both values) takes the slot
		// of the oldest reading because it has expired.
		{[]obs{{"e", 0.05}}, at(13 * s), []Reading{{"b", 0.2, at(13*s - ns)}, {"e", 0.05, at(13 * s)}}},
		// +Inf ranks like any value: it evicts the lowest (e).
		{[]obs{{"f", math.Inf(1)}}, at(14 * s), []Reading{{"f", math.Inf(1), at(14 * s)}, {"b", 0.2, at(13*s - ns)}}},
		// e ties with the lowest (b) and stays out; f falls to b's value:
		// equal values order by key.
		{[]obs{{"e", 0.2}, {"f", 0.2}}, at(15 * s), []Reading{{"b", 0.2, at(13*s - ns)}, {"f", 0.2, at(15 * s)}}},
		// Top drops expired readings, forgetting them: the slots are free
		// again, so even low values take them.
		{nil, at(23*s - 2*ns), []Reading{{"b", 0.2, at(13*s - ns)}, {"f", 0.2, at(15 * s)}}},
		{nil, at(23*s - ns), []Reading{{"f", 0.2, at(15 * s)}}},
		{nil, at(25*s - ns), []Reading{{"f", 0.2, at(15 * s)}}},
		{nil, at(25 * s), nil},
		{[]obs{{"g", -1}, {"h", -2}}, at(25 * s), []Reading{{"g", -1, at(25 * s)}, {"h", -2, at(25 * s)}}},
	}
	for i, st := range steps {
		for _, o := range st.obs {
			g.Observe(o.key, o.v, st.now)
		}
		if got := g.Top(10, st.now); !slices.Equal(got, st.top) {
			t.Errorf("step %d: Top(10, %v) = %v, want %v", i, st.now.Sub(t0), got, st.top)
		}
	}
	if got, want := g.Top(1, at(25*s)), []Reading{{"g", -1, at(25 * s)}}; !slices.Equal(got, want) {
		t.Errorf("Top(1) = %v, want %v", got, want)
	}
	if got := g.Top(0, at(25*s)); got != nil {
		t.Errorf("Top(0) = %v, want nil", got)
	}
}

func TestNewGaugeRejects(t *testing.T) {
	for _, p := range []GaugeParams{{K: 0, MaxAge: time.Second}, {K: MaxK + 1, MaxAge: time.Second}, {K: 1}, {K: 1, MaxAge: -1}} {
		if _, err := NewGauge(p); err == nil {
			t.Errorf("NewGauge(%+v): no error", p)
		}
	}
}

// gaugeModel is the Gauge's rule written plainly, in O(K) per step, to
// compare the Gauge with on random streams.
type gaugeModel struct {
	k      int
	maxAge time.Duration
	last   time.Time
	seq    int
	m      map[string]modelReading
}

type modelReading struct {
	v   float64
	at  time.Time
	seq int // order of the latest observation
}

func (g *gaugeModel) clamp(now time.Time) time.Time {
	if now.Before(g.last) {
		return g.last
	}
	g.last = now
	return now
}

func (g *gaugeModel) observe(key string, v float64, now time.Time) {
	now = g.clamp(now)
	g.seq++
	if _, ok := g.m[key]; ok || len(g.m) < g.k {
		g.m[key] = modelReading{v, now, g.seq}
		return
	}
	oldest, lowest := "", ""
	for k, r := range g.m {
		if oldest == "" || r.seq < g.m[oldest].seq {
			oldest = k
		}
		if lowest == "" || r.v < g.m[lowest].v {
			lowest = k
		}
	}
	switch {
	case now.Sub(g.m[oldest].at) >= g.maxAge:
		delete(g.m, oldest)
	case v > g.m[lowest].v:
		delete(g.m, lowest)
	default:
		return
	}
	g.m[key] = modelReading{v, now, g.seq}
}

func (g *gaugeModel) top(n int, now time.Time) []Reading {
	now = g.clamp(now)
	var rs []Reading
	for k, r := range g.m {
		if now.Sub(r.at) >= g.maxAge {
			delete(g.m, k)
			continue
		}
		rs = append(rs, Reading{k, r.v, r.at})
	}
	slices.SortFunc(rs, func(a, b Reading) int {
		if c := cmp.Compare(b.Value, a.Value); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return rs[:min(n, len(rs))]
}

// TestGaugeAgainstModel compares the Gauge with gaugeModel on random
// streams: values distinct (so the lowest is unique, as the model assumes),
// times moving forward with jitter backwards, reads between.
func TestGaugeAgainstModel(t *testing.T) {
	for _, k := range []int{1, 3, 16} {
		t.Run(strconv.Itoa(k), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(k), 11))
			const maxAge = 50 * time.Millisecond
			g, _ := NewGauge(GaugeParams{K: k, MaxAge: maxAge})
			m := &gaugeModel{k: k, maxAge: maxAge, m: map[string]modelReading{}}
			now := t0
			evicted, expired := 0, 0
			for i := range 30_000 {
				now = now.Add(time.Duration(r.IntN(200)) * time.Microsecond)
				if r.IntN(500) == 0 {
					now = now.Add(60 * time.Millisecond) // everything expires
				}
				obsAt := now.Add(-time.Duration(r.IntN(3)) * time.Millisecond)
				key := "k" + strconv.Itoa(r.IntN(4*k))
				v := r.Float64()
				before := len(m.m)
				_, tracked := m.m[key]
				g.Observe(key, v, obsAt)
				m.observe(key, v, obsAt)
				if _, in := m.m[key]; !tracked && in && before == k {
					evicted++
				}
				if i%7 == 0 {
					n := 1 + r.IntN(k+1)
					tn := now.Add(time.Duration(r.IntN(30)) * time.Millisecond)
					tracked := len(m.m)
					want := m.top(n, tn)
					if len(m.m) < tracked {
						expired++
					}
					if got := g.Top(n, tn); !slices.Equal(got, want) {
						t.Fatalf("step %d: Top(%d, %v) = %v, want %v", i, n, tn.Sub(t0), got, want)
					}
				}
			}
			if evicted == 0 || expired == 0 {
				t.Errorf("stream too easy: %d replacements, %d reads shorter than tracked", evicted, expired)
			}
		})
	}
}
