package topk

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// benchK is the k of the benchmarks: an admin view of the top hundred.
const benchK = 100

// benchKeys returns n distinct keys shaped like client keys (IPv6
// addresses), built once so that the loops allocate nothing themselves.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "2001:db8::" + strconv.FormatInt(int64(i), 16)
	}
	return keys
}

// TestNoAllocs checks that updates in the steady state allocate nothing:
// adding to a tracked key, evicting (long enough to churn the key table
// through many times over), rotating a Windowed, and every kind of Gauge
// update. testing.AllocsPerRun averages over runs, so a long run reporting
// 0 means not one allocation.
func TestNoAllocs(t *testing.T) {
	keys := benchKeys(1 << 14)
	s, _ := New(benchK)
	for _, k := range keys[:benchK] {
		s.Add(k, 1)
	}
	w, _ := NewWindowed(WindowedParams{K: benchK, Period: time.Second})
	g, _ := NewGauge(GaugeParams{K: benchK, MaxAge: time.Second})
	i := 0
	for _, c := range []struct {
		name  string
		setup func()
		runs  int
		f     func()
	}{
		{"Sketch.Add tracked", nil, 200_000, func() { s.Add(keys[i%benchK], 1); i++ }},
		{"Sketch.Add evicting", nil, 200_000, func() { s.Add(keys[benchK+i%(len(keys)-benchK)], 2); i++ }},
		{"Windowed.Add", nil, 200_000, func() { w.Add(keys[i%len(keys)], 1, at(time.Duration(i)*time.Millisecond)); i++ }},
		// New keys replace expired readings and low values.
		{"Gauge.Observe", nil, 200_000, func() {
			g.Observe(keys[i%len(keys)], float64(i%1000)/1000, at(time.Duration(i)*time.Millisecond))
			i++
		}},
		// Top forgets every reading; new keys take the freed slots.
		{"Gauge.Observe into freed slots", func() { g.Top(1, at(time.Hour)) }, benchK - 1, func() {
			g.Observe(keys[i%len(keys)], 0.5, at(time.Hour))
			i++
		}},
	} {
		if c.setup != nil {
			c.setup()
		}
		if n := testing.AllocsPerRun(c.runs, c.f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", c.name, n)
		}
	}
	if n := len(g.Top(2*benchK, at(time.Hour))); n != benchK {
		t.Errorf("Gauge holds %d readings after filling freed slots, want %d", n, benchK)
	}
}

func BenchmarkSketchAddTracked(b *testing.B) {
	keys := benchKeys(benchK)
	s, _ := New(benchK)
	for _, k := range keys {
		s.Add(k, 1)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Add(keys[i%benchK], 1)
		i++
	}
}

// BenchmarkSketchAddEvict adds keys the sketch does not track, so each Add
// replaces the smallest counter.
func BenchmarkSketchAddEvict(b *testing.B) {
	keys := benchKeys(1 << 16)
	s, _ := New(benchK)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Add(keys[i&(1<<16-1)], 1)
		i++
	}
}

// BenchmarkSketchAddParallel has every goroutine add to one sketch, keys
// mostly tracked with some churn (1 in 8 not tracked), as rejected clients
// of one policy would. Run with -cpu 1,2 to see the lock's contention.
func BenchmarkSketchAddParallel(b *testing.B) {
	keys := benchKeys(8 * benchK)
	s, _ := New(benchK)
	for _, k := range keys[:benchK] {
		s.Add(k, 1)
	}
	var g atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(g.Add(1)) * 7919
		for pb.Next() {
			k := keys[i%benchK]
			if i%8 == 0 {
				k = keys[i%len(keys)]
			}
			s.Add(k, 1)
			i++
		}
	})
}

func BenchmarkWindowedAdd(b *testing.B) {
	keys := benchKeys(8 * benchK)
	w, _ := NewWindowed(WindowedParams{K: benchK, Period: time.Minute})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := keys[i%benchK]
		if i%8 == 0 {
			k = keys[i%len(keys)]
		}
		w.Add(k, 1, at(time.Duration(i)*time.Microsecond)) // rotates every 60M
		i++
	}
}

func BenchmarkGaugeObserve(b *testing.B) {
	keys := benchKeys(8 * benchK)
	g, _ := NewGauge(GaugeParams{K: benchK, MaxAge: time.Minute})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		g.Observe(keys[i%len(keys)], float64(i*7919%1000)/1000, at(time.Duration(i)*time.Microsecond))
		i++
	}
}

func BenchmarkGaugeObserveParallel(b *testing.B) {
	keys := benchKeys(8 * benchK)
	g, _ := NewGauge(GaugeParams{K: benchK, MaxAge: time.Minute})
	var n atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(n.Add(1)) * 7919
		for pb.Next() {
			g.Observe(keys[i%len(keys)], float64(i*7919%1000)/1000, at(time.Duration(i)*time.Microsecond))
			i++
		}
	})
}

// BenchmarkSketchTop is the admin read: copy under the lock, sort after.
func BenchmarkSketchTop(b *testing.B) {
	keys := benchKeys(1 << 12)
	s, _ := New(benchK)
	for i := range 1 << 16 {
		s.Add(keys[i*7919%len(keys)], uint64(1+i%5))
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Top(20)
	}
}
