package concurrency

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// acquireAsync starts an Acquire for key and returns where its result
// arrives.
type result struct {
	t   Ticket
	err error
	at  time.Time
}

func acquireAsync(ctx context.Context, l *Limiter, key string) chan result {
	ch := make(chan result, 1)
	go func() {
		t, _, err := l.Acquire(ctx, key, 0)
		ch <- result{t, err, time.Now()}
	}()
	return ch
}

func shedReason(err error) Reason {
	var s *Shed
	if errors.As(err, &s) {
		return s.Reason
	}
	return ""
}

// TestFixedLimit: a fixed limit of 2 with a queue of 1 and max_wait 1 s
// lets two through, queues the third, sheds the fourth at once (queue
// full), hands the third the first slot released, and sheds a waiter that
// waited max_wait exactly then.
func TestFixedLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Params{Limit: 2, Queue: 1, MaxWait: time.Second}, time.Now)
		ctx := context.Background()
		a, _, err := l.Acquire(ctx, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := l.Acquire(ctx, "", 0); err != nil {
			t.Fatal(err)
		}
		third := acquireAsync(ctx, l, "")
		synctest.Wait()
		if s := l.Stats(); s.InFlight != 2 || s.Queued != 1 {
			t.Fatalf("stats %+v, want 2 in flight and 1 queued", s)
		}
		start := time.Now()
		if _, _, err := l.Acquire(ctx, "", 0); shedReason(err) != ReasonQueueFull {
			t.Fatalf("fourth: %v, want shed queue_full", err)
		}
		if !time.Now().Equal(start) {
			t.Fatal("the shed waited")
		}
		time.Sleep(300 * time.Millisecond)
		a.Release(Good, 0)
		r := <-third
		if r.err != nil || r.at.Sub(start) != 300*time.Millisecond {
			t.Fatalf("third: %v after %v, want a slot after 300ms", r.err, r.at.Sub(start))
		}
		// Full again: the next waits max_wait, then is shed.
		start = time.Now()
		fifth := acquireAsync(ctx, l, "")
		r = <-fifth
		if shedReason(r.err) != ReasonTimeout || r.at.Sub(start) != time.Second {
			t.Fatalf("fifth: %v after %v, want shed timeout after 1s", r.err, r.at.Sub(start))
		}
		var s *Shed
		if errors.As(r.err, &s); s.RetryAfter < time.Second {
			t.Fatalf("Retry-After %v", s.RetryAfter)
		}
		if st := l.Stats(); st.Shed[ReasonQueueFull] != 1 || st.Shed[ReasonTimeout] != 1 || st.Waited != 1 || st.InFlight != 2 || st.Queued != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestCancelledWaiter: a waiter whose client leaves is gone from the
// queue; the slot released later goes to the next one.
func TestCancelledWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Params{Limit: 1, Queue: 10, MaxWait: time.Minute}, time.Now)
		held, _, _ := l.Acquire(context.Background(), "", 0)
		ctx, cancel := context.WithCancel(context.Background())
		first := acquireAsync(ctx, l, "")
		synctest.Wait()
		second := acquireAsync(context.Background(), l, "")
		synctest.Wait()
		cancel()
		if r := <-first; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v", r.err)
		}
		held.Release(Good, 0)
		r := <-second
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.t.Release(Good, 0)
		if s := l.Stats(); s.InFlight != 0 || s.Queued != 0 || len(l.keys) != 0 {
			t.Fatalf("stats %+v, keys %d: want nothing left", s, len(l.keys))
		}
	})
}

// TestFairShare: one key holding every slot with more waiting cannot
// keep them from another key: the slot released next goes to the other.
func TestFairShare(t *testing.T) {
	for _, fair := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			l := New(Params{Limit: 4, Queue: 100, MaxWait: time.Minute, FairShare: fair}, time.Now)
			ctx, cancel := context.WithCancel(context.Background())
			var held []Ticket
			for range 4 {
				tk, _, _ := l.Acquire(ctx, "greedy", 0)
				held = append(held, tk)
			}
			var greedy []chan result
			for range 3 {
				greedy = append(greedy, acquireAsync(ctx, l, "greedy"))
				synctest.Wait()
			}
			other := acquireAsync(ctx, l, "other")
			synctest.Wait()
			held[0].Release(Good, 0)
			synctest.Wait()
			select {
			case r := <-other:
				if !fair {
					t.Fatal("without fair_share the other key went before the greedy one's earlier waiters")
				}
				r.t.Release(Good, 0)
			default:
				if fair {
					t.Fatal("with fair_share the other key did not get the slot released")
				}
				(<-greedy[0]).t.Release(Good, 0)
				greedy = greedy[1:]
				greedy = append(greedy, other)
			}
			cancel()
			for _, ch := range greedy {
				(<-ch).t.Release(Good, 0)
			}
			for _, tk := range held[1:] {
				tk.Release(Good, 0)
			}
			if s := l.Stats(); s.InFlight != 0 || s.Queued != 0 || len(l.keys) != 0 || len(l.classes[0].rr) != 0 {
				t.Fatalf("stats %+v, %d keys, %d in rotation: want nothing left", s, len(l.keys), len(l.classes[0].rr))
			}
		})
	}
}

// TestShadow: a shadow limit lets everything through at once and counts
// what it would have done.
func TestShadow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Params{Limit: 1, Queue: 1, MaxWait: time.Second, Shadow: true}, time.Now)
		var waited []bool
		for range 3 {
			_, w, err := l.Acquire(context.Background(), "", 0)
			if err != nil {
				t.Fatal(err)
			}
			waited = append(waited, w)
		}
		if s := l.Stats(); s.InFlight != 3 || waited[0] || !waited[1] || s.Shed[ReasonQueueFull] != 0 {
			t.Fatalf("stats %+v waited %v", s, waited)
		}
	})
}

// backend is an upstream of workers that each take service per request,
// the rest waiting inside it, FIFO: its latency grows past its capacity.
type backend struct {
	mu      sync.Mutex
	failing bool // answers 503 in 1 ms
	workers int
	busy    int
	wait    []chan struct{}
	service time.Duration
}

func (b *backend) serve() Outcome {
	b.mu.Lock()
	if b.failing {
		b.mu.Unlock()
		time.Sleep(time.Millisecond)
		return Overload
	}
	service := b.service
	if b.busy >= b.workers {
		ch := make(chan struct{})
		b.wait = append(b.wait, ch)
		b.mu.Unlock()
		<-ch
	} else {
		b.busy++
		b.mu.Unlock()
	}
	time.Sleep(service)
	b.mu.Lock()
	if len(b.wait) == 0 || b.busy > b.workers {
		b.busy--
	} else {
		close(b.wait[0]) // the worker goes on to the next
		b.wait = b.wait[1:]
	}
	b.mu.Unlock()
	return Good
}

func (b *backend) set(f func(b *backend)) {
	b.mu.Lock()
	f(b)
	b.mu.Unlock()
}

func (b *backend) setWorkers(n int) {
	b.mu.Lock()
	b.workers = n
	b.mu.Unlock()
}

// run offers rate requests a second (evenly spaced) for d through l to
// b, and returns per second of the run the requests answered and the
// slowest admitted latency (queue wait included), and the limit sampled
// every 100 ms.
type runStats struct {
	good     []int
	p99      []time.Duration
	limits   []int
	sheds    int
	slowShed time.Duration
}

func offer(l *Limiter, b *backend, rate int, d time.Duration, at func(time.Duration)) runStats {
	var mu sync.Mutex
	secs := int(d / time.Second)
	st := runStats{good: make([]int, secs)}
	lat := make([][]time.Duration, secs)
	start := time.Now()
	var wg sync.WaitGroup
	gap := time.Second / time.Duration(rate)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
				mu.Lock()
				st.limits = append(st.limits, l.Stats().Learned)
				mu.Unlock()
			}
		}
	}()
	for i := 0; time.Since(start) < d; i++ {
		if at != nil {
			at(time.Since(start))
		}
		wg.Go(func() {
			sent := time.Now()
			tk, _, err := l.Acquire(context.Background(), "", 0)
			if err != nil {
				mu.Lock()
				st.sheds++
				st.slowShed = max(st.slowShed, time.Since(sent))
				mu.Unlock()
				return
			}
			served := time.Now()
			o := b.serve()
			tk.Release(o, time.Since(served))
			if o != Good {
				return
			}
			total := time.Since(sent)
			sec := int(sent.Sub(start) / time.Second)
			mu.Lock()
			if sec < secs && total < 2*time.Second {
				st.good[sec]++
				lat[sec] = append(lat[sec], total)
			}
			mu.Unlock()
		})
		time.Sleep(gap)
	}
	wg.Wait()
	close(done)
	for _, ls := range lat {
		st.p99 = append(st.p99, p99(ls))
	}
	return st
}

func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	c := append([]time.Duration(nil), d...)
	median(c) // sorts
	return c[min(len(c)-1, len(c)*99/100)]
}

// TestAdaptiveLoads offers a backend of 8 workers at 50 ms (160/s) 0.5 to
// 10 times its capacity through an adaptive limit with its defaults:
// the adaptive limit's goals, in simulated time — goodput at least 90% of what can
// be served, admitted p99 at most twice the unloaded one (50 ms), sheds
// answered at once; past capacity, the limit stays within 2 of the knee.
func TestAdaptiveLoads(t *testing.T) {
	for _, x := range []float64{0.5, 1, 1.5, 2, 4, 10} {
		synctest.Test(t, func(t *testing.T) {
			l := New(Params{Limit: 4, Adaptive: true, MinLimit: 1, MaxLimit: 1000, Queue: 1000, MaxWait: time.Second, FairShare: true}, time.Now)
			b := &backend{workers: 8, service: 50 * time.Millisecond}
			rate := int(160 * x)
			st := offer(l, b, rate, 30*time.Second, nil)
			good, worst := 0, time.Duration(0)
			for s := 10; s < 30; s++ {
				good += st.good[s]
				worst = max(worst, st.p99[s])
			}
			goodput := float64(good) / 20
			lim := st.limits[len(st.limits)/3:]
			t.Logf("%.1fx: goodput %.1f/s, worst p99 %v, sheds %d (slowest %v), limit %v..%v", x, goodput, worst, st.sheds, st.slowShed, slicesMin(lim), slicesMax(lim))
			if want := 0.9 * min(float64(rate), 160); goodput < want {
				t.Errorf("%.1fx: goodput %.1f/s, want at least %.1f", x, goodput, want)
			}
			if worst > 100*time.Millisecond {
				t.Errorf("%.1fx: admitted p99 %v, want at most 100ms", x, worst)
			}
			if st.slowShed > 5*time.Millisecond {
				t.Errorf("%.1fx: a shed took %v", x, st.slowShed)
			}
			if x >= 1.5 && slicesMax(lim) > 10 {
				// The knee is 8: a limit of 11 queues three requests
				// inside the backend on every round.
				t.Errorf("%.1fx: the limit reached %d, want it at most 2 above the knee (8)", x, slicesMax(lim))
			}
		})
	}
}

// TestAdaptiveHalving: at twice the capacity, the backend's workers go
// from 8 to 4 after 10 s; the limit settles within 10 s near the new
// knee, and goodput follows.
func TestAdaptiveHalving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Params{Limit: 4, Adaptive: true, MinLimit: 1, MaxLimit: 1000, Queue: 1000, MaxWait: time.Second, FairShare: true}, time.Now)
		b := &backend{workers: 8, service: 50 * time.Millisecond}
		halved := false
		st := offer(l, b, 320, 40*time.Second, func(d time.Duration) {
			if !halved && d >= 10*time.Second {
				b.setWorkers(4)
				halved = true
			}
		})
		settle, med := settleTime(st.limits, 100)
		t.Logf("limits %v", st.limits)
		t.Logf("settled after %v at %d; goodput/s %v", settle, med, st.good)
		if settle > 10*time.Second || med < 4 || med > 7 {
			t.Errorf("limit settled after %v at %d, want within 10s at 4-7", settle, med)
		}
		for s := 25; s < 40; s++ {
			if st.good[s] < 72 {
				t.Errorf("second %d: goodput %d, want at least 72 (90%% of 80)", s, st.good[s])
			}
		}
	})
}

// settleTime returns, for limits sampled every 100 ms with the change at
// sample from, how long after it the limit entered and stayed within 25%
// of its median over the last 10 s, and that median.
func settleTime(limits []int, from int) (time.Duration, int) {
	last := append([]int(nil), limits[len(limits)-100:]...)
	slicesSort(last)
	med := last[len(last)/2]
	lo, hi := float64(med)*0.75, float64(med)*1.25
	settled := len(limits)
	for i := len(limits) - 1; i >= from; i-- {
		if v := float64(limits[i]); v < lo || v > hi {
			break
		}
		settled = i
	}
	return time.Duration(settled-from) * 100 * time.Millisecond, med
}

func slicesMin(s []int) int { return slices.Min(s) }
func slicesMax(s []int) int { return slices.Max(s) }
func slicesSort(s []int)    { slices.Sort(s) }

// TestAdaptiveOutage: an upstream answering 503 in a millisecond for 10 s
// is not taken for a fast one — the limit falls instead of rising — and
// once it recovers the limit is back near the knee within 5 s.
func TestAdaptiveOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Params{Limit: 4, Adaptive: true, MinLimit: 1, MaxLimit: 1000, Queue: 1000, MaxWait: time.Second}, time.Now)
		b := &backend{workers: 8, service: 50 * time.Millisecond}
		st := offer(l, b, 320, 35*time.Second, func(d time.Duration) {
			b.set(func(b *backend) { b.failing = d >= 10*time.Second && d < 20*time.Second })
		})
		t.Logf("limits %v", st.limits)
		if peak := slices.Max(st.limits[100:200]); peak > slices.Max(st.limits[50:100]) {
			t.Errorf("the limit rose to %d during the outage", peak)
		}
		if low := slices.Min(st.limits[190:200]); low > 3 {
			t.Errorf("the limit was still %d at the end of the outage", low)
		}
		if back := slices.Min(st.limits[250:350]); back < 7 {
			t.Errorf("the limit fell to %d 5-15 s after recovery, want at least 7", back)
		}
		for s := 25; s < 35; s++ {
			if st.good[s] < 144 {
				t.Errorf("second %d after recovery: goodput %d, want at least 144", s, st.good[s])
			}
		}
	})
}

// TestAdaptiveSlowerBackend: the upstream gets slower for good (50 ms to
// 80 ms a request, still 8 workers): the baseline is learned again and
// the limit stays at the knee instead of falling with the latency.
func TestAdaptiveSlowerBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Params{Limit: 4, Adaptive: true, MinLimit: 1, MaxLimit: 1000, Queue: 1000, MaxWait: time.Second}, time.Now)
		b := &backend{workers: 8, service: 50 * time.Millisecond}
		st := offer(l, b, 200, 30*time.Second, func(d time.Duration) {
			if d >= 10*time.Second {
				b.set(func(b *backend) { b.service = 80 * time.Millisecond })
			}
		})
		t.Logf("limits %v, goodput %v, baseline %v", st.limits, st.good, l.Stats().Baseline)
		if low := slices.Min(st.limits[150:]); low < 7 {
			t.Errorf("the limit fell to %d with the slower upstream, want at least 7", low)
		}
		if b := l.Stats().Baseline; b < 75*time.Millisecond || b > 90*time.Millisecond {
			t.Errorf("baseline %v, want about 80ms", b)
		}
		// A probe costs a dip of about a tenth of a second's goodput
		// every 8-12 s: each second at least 80, all together at least
		// 90% of the 100/s possible.
		sum := 0
		for s := 15; s < 30; s++ {
			sum += st.good[s]
			if st.good[s] < 80 {
				t.Errorf("second %d: goodput %d of 100 possible", s, st.good[s])
			}
		}
		if mean := float64(sum) / 15; mean < 90 {
			t.Errorf("goodput %.1f/s over seconds 15-30, want at least 90", mean)
		}
	})
}

func acquireClass(ctx context.Context, l *Limiter, key string, class int) chan result {
	ch := make(chan result, 1)
	go func() {
		t, _, err := l.Acquire(ctx, key, class)
		ch <- result{t, err, time.Now()}
	}()
	return ch
}

// got returns ch's result if it has arrived.
func got(ch chan result) (result, bool) {
	select {
	case r := <-ch:
		return r, true
	default:
		return result{}, false
	}
}

// TestClassReserve: with a limit of 10 and 20% reserved for "critical",
// the default class gets 8 slots and waits for a ninth while two stay free;
// critical takes those two at once, then waits like anyone; a default
// slot released goes to the waiting default request, not to critical's
// waiter beyond its reserve... and a critical slot released goes to the
// critical waiter first (priority).
func TestClassReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Params{Limit: 10, Queue: 10, MaxWait: time.Minute, Classes: []Class{{Name: "critical", Reserve: 0.2}, {Name: "default"}}}, time.Now)
		ctx := context.Background()
		var dflt []Ticket
		for range 8 {
			tk, waited, err := l.Acquire(ctx, "", 1)
			if err != nil || waited {
				t.Fatalf("default request: waited %v, %v", waited, err)
			}
			dflt = append(dflt, tk)
		}
		ninth := acquireClass(ctx, l, "", 1)
		synctest.Wait()
		if _, ok := got(ninth); ok {
			t.Fatal("the default class took a slot reserved for critical")
		}
		var crit []Ticket
		for range 2 {
			tk, waited, err := l.Acquire(ctx, "", 0)
			if err != nil || waited {
				t.Fatalf("critical request within its reserve: waited %v, %v", waited, err)
			}
			crit = append(crit, tk)
		}
		third := acquireClass(ctx, l, "", 0)
		synctest.Wait()
		if _, ok := got(third); ok {
			t.Fatal("a critical request went past the limit")
		}
		s := l.Stats()
		if s.InFlight != 10 || s.Queued != 2 || s.Classes[0].InFlight != 2 || s.Classes[0].Reserved != 2 || s.Classes[1].Queued != 1 {
			t.Fatalf("stats %+v", s)
		}
		// A default slot frees: critical waits, and ranks first.
		dflt[0].Release(Good, 0)
		synctest.Wait()
		r, ok := got(third)
		if !ok {
			t.Fatal("the critical waiter did not get the slot freed")
		}
		if _, ok := got(ninth); ok {
			t.Fatal("the default waiter got a slot before the critical one")
		}
		// Critical now has 3: above its reserve, so a critical slot that
		// frees goes to the default waiter.
		r.t.Release(Good, 0)
		synctest.Wait()
		r, ok = got(ninth)
		if !ok {
			t.Fatal("the default waiter did not get the slot freed")
		}
		r.t.Release(Good, 0)
		for _, tk := range append(dflt[1:], crit...) {
			tk.Release(Good, 0)
		}
		if s := l.Stats(); s.InFlight != 0 || s.Queued != 0 || len(l.keys) != 0 {
			t.Fatalf("stats %+v, %d keys: want nothing left", s, len(l.keys))
		}
	})
}

// TestClassPriority: waiters of a higher class go first, whenever they
// came; a higher class pushes the newest waiter of the key with the most
// waiting (the first in rotation of those tied) in the lowest class out
// of a full queue (queue_full), and the lowest class cannot push anyone.
func TestClassPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Params{Limit: 1, Queue: 3, MaxWait: time.Minute, Classes: []Class{{Name: "hi"}, {Name: "mid"}, {Name: "lo"}}}, time.Now)
		ctx := context.Background()
		held, _, _ := l.Acquire(ctx, "", 2)
		lo1 := acquireClass(ctx, l, "a", 2)
		synctest.Wait()
		lo2 := acquireClass(ctx, l, "b", 2)
		synctest.Wait()
		lo3 := acquireClass(ctx, l, "b", 2)
		synctest.Wait()
		if _, _, err := l.Acquire(ctx, "c", 2); shedReason(err) != ReasonQueueFull {
			t.Fatalf("a fourth low waiter: %v, want shed queue_full", err)
		}
		mid := acquireClass(ctx, l, "", 1)
		synctest.Wait()
		r, ok := got(lo3)
		if !ok || shedReason(r.err) != ReasonQueueFull {
			t.Fatalf("the newest low waiter of key b: %+v (arrived %v), want pushed out (queue_full)", r, ok)
		}
		hi := acquireClass(ctx, l, "", 0)
		synctest.Wait()
		if r, ok := got(lo1); !ok || shedReason(r.err) != ReasonQueueFull {
			t.Fatalf("with one waiter each, the first key in rotation's: %+v (arrived %v), want pushed out", r, ok)
		}
		if s := l.Stats(); s.Queued != 3 || s.Classes[2].Shed[ReasonQueueFull] != 3 || s.Shed[ReasonQueueFull] != 3 {
			t.Fatalf("stats %+v", s)
		}
		for i, ch := range []chan result{hi, mid, lo2} {
			held.Release(Good, 0)
			synctest.Wait()
			r, ok := got(ch)
			if !ok || r.err != nil {
				t.Fatalf("waiter %d in priority order: %+v (arrived %v)", i, r, ok)
			}
			held = r.t
		}
		held.Release(Good, 0)
		if s := l.Stats(); s.InFlight != 0 || s.Queued != 0 || len(l.keys) != 0 {
			t.Fatalf("stats %+v, %d keys: want nothing left", s, len(l.keys))
		}
		for c := range l.classes {
			if n := len(l.classes[c].rr); n != 0 {
				t.Fatalf("class %d: %d keys left in rotation", c, n)
			}
		}
	})
}

// TestAdaptiveClasses: a backend of 8 workers at 50 ms, offered 4 times
// its capacity by the default class while a critical class with 20%
// reserved sends 16 requests a second: the critical requests are all
// served, at the unloaded latency (none waits more than a request's
// time), and the default class still gets at least 85% of the rest.
func TestAdaptiveClasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Params{Limit: 4, Adaptive: true, MinLimit: 1, MaxLimit: 1000, Queue: 1000, MaxWait: time.Second, FairShare: true,
			Classes: []Class{{Name: "critical", Reserve: 0.2}, {Name: "default"}}}, time.Now)
		b := &backend{workers: 8, service: 50 * time.Millisecond}
		var mu sync.Mutex
		good := [2]int{}
		shed := [2]int{}
		var critWorst time.Duration
		var wg sync.WaitGroup
		const d = 30 * time.Second
		start := time.Now()
		for class, rate := range []int{16, 640} {
			wg.Go(func() {
				for time.Since(start) < d {
					wg.Go(func() {
						sent := time.Now()
						tk, _, err := l.Acquire(context.Background(), "", class)
						measured := sent.Sub(start) >= 10*time.Second
						if err != nil {
							mu.Lock()
							if measured {
								shed[class]++
							}
							mu.Unlock()
							return
						}
						served := time.Now()
						o := b.serve()
						tk.Release(o, time.Since(served))
						mu.Lock()
						if measured {
							good[class]++
							if class == 0 {
								critWorst = max(critWorst, time.Since(sent))
							}
						}
						mu.Unlock()
					})
					time.Sleep(time.Second / time.Duration(rate))
				}
			})
		}
		wg.Wait()
		t.Logf("critical: %d served, %d shed, slowest %v; default: %d/s served, %d shed; limit %d", good[0], shed[0], critWorst, good[1]/20, shed[1], l.Stats().Learned)
		if shed[0] > 0 || good[0] < 16*20-2 {
			t.Errorf("critical: %d served and %d shed of %d", good[0], shed[0], 16*20)
		}
		if critWorst > 2*b.service+10*time.Millisecond {
			t.Errorf("a critical request took %v", critWorst)
		}
		if rest := 0.85 * (160 - 16) * 20; float64(good[1]) < rest {
			t.Errorf("default: %d served in 20 s, want at least %.0f", good[1], rest)
		}
	})
}

// TestProbeForesight: while a probe halves the limit, a request's wait is
// foreseen at the limit learned, so the probe sheds nobody by itself:
// four requests' worth of 50 ms at a limit of 10 is 20 ms, within the
// bound of 0.4 × 50 ms; at the probe's 5 it would be 40 ms.
func TestProbeForesight(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newController(Params{Limit: 10, Adaptive: true, MinLimit: 1, MaxLimit: 1000}, now)
	c.base, c.rLast = 50*time.Millisecond, 50*time.Millisecond
	if r, _ := c.admit(3, 5, time.Second, now); r != ReasonWait {
		t.Fatalf("no probe, limit 5: %q, want shed (wait)", r)
	}
	c.startProbe(10, now)
	if c.limit(now, 10) != 5 {
		t.Fatalf("probe limit %d, want 5", c.limit(now, 10))
	}
	if r, wait := c.admit(3, 5, time.Second, now); r != "" || wait < 40*time.Millisecond {
		t.Fatalf("during the probe: %q (wait %v), want admitted", r, wait)
	}
}
