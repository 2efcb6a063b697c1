package topk

import (
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestConcurrentUse updates every type from several goroutines while
// others read (run it with -race), then checks what must hold whatever the
// interleaving: the Sketch's counts sum to the total of all weights added.
func TestConcurrentUse(t *testing.T) {
	const workers, per = 4, 5_000
	s, _ := New(16)
	w, _ := NewWindowed(WindowedParams{K: 16, Period: time.Second})
	g, _ := NewGauge(GaugeParams{K: 16, MaxAge: time.Second})
	var wg sync.WaitGroup
	for id := range workers {
		wg.Go(func() {
			for i := range per {
				key := "k" + strconv.Itoa((id*7+i)%40)
				now := at(time.Duration(i) * time.Millisecond)
				s.Add(key, uint64(1+i%3))
				w.Add(key, 1, now)
				g.Observe(key, float64(i%100)/100, now)
				if i%500 == 0 {
					s.Top(5)
					w.Top(5, now)
					g.Top(5, now)
				}
			}
		})
	}
	wg.Wait()
	var want uint64
	for i := range per {
		want += uint64(1+i%3) * workers
	}
	if got := s.Total(); got != want {
		t.Errorf("Total() = %d, want %d", got, want)
	}
	var sum uint64
	for _, e := range s.Top(16) {
		sum += e.Count
	}
	if sum != want {
		t.Errorf("counts sum to %d, want %d", sum, want)
	}
}
