package limitertest

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
)

// RunLeakyQueue tests a store whose leaky bucket is a real queue (the memory
// store) inside testing/synctest bubbles, whose fake clock makes the
// release timers fire at exactly the instants docs/algorithms.md gives. The store is
// made inside each bubble.
func RunLeakyQueue(t *testing.T, newStore NewStore) {
	t.Run("FIFOAndSpacing", func(t *testing.T) { synctest.Test(t, func(t *testing.T) { leakyFIFO(t, newStore(t)) }) })
	t.Run("MaxWait", func(t *testing.T) { synctest.Test(t, func(t *testing.T) { leakyMaxWait(t, newStore(t)) }) })
	t.Run("Cancel", func(t *testing.T) { synctest.Test(t, func(t *testing.T) { leakyCancel(t, newStore(t)) }) })
	t.Run("Model", func(t *testing.T) { synctest.Test(t, func(t *testing.T) { leakyModel(t, newStore(t)) }) })
	t.Run("Boundary", func(t *testing.T) { synctest.Test(t, func(t *testing.T) { leakyBoundary(t, newStore(t)) }) })
	t.Run("Cost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { leakyCost(t, newStore(t), time.Now()) })
	})
	t.Run("TwoStage", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { leakyTwoStage(t, newStore(t), time.Now()) })
	})
}

// leakyTwoStage is nginx's two-stage limit_req (burst=12 delay=8 at 10/s,
// its documentation's example) as queue 4, delay 8: of 20 requests at one
// instant the first 9 are forwarded at once (the first, then the 8 of the
// delay), the next 4 wait 100..400ms, and the last 7 are rejected.
func leakyTwoStage(t *testing.T, store limiter.Store, now time.Time) {
	lim := must(t)(limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Queue: 4, Delay: 8, MaxWait: time.Minute}))
	l := mustNew(t, store, "leaky-two-stage", lim)
	ctx := context.Background()
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range 20 {
		d, err := l.Allow(ctx, "k", now, 1)
		if err != nil {
			t.Fatal(err)
		}
		var want time.Duration
		switch {
		case i < 9:
		case i < 13:
			want = time.Duration(i-8) * 100 * time.Millisecond
		default:
			if d.Allowed {
				t.Fatalf("request %d: %+v, want rejected", i, d)
			}
			continue
		}
		if !d.Allowed || d.Delay != want || d.Limit != 13 {
			t.Fatalf("request %d: %+v, want admitted with delay %v of a quota of 13", i, d, want)
		}
		wg.Go(func() { l.Wait(ctx, d) })
	}
}

// leakyCost is the queue with costs above 1: rate 10/s, queue 3, cost 2
// (each request holds the exit 200ms), five requests at one instant. One
// leaves at once, three wait 200, 400 and 600ms — the queue counts
// requests, not intervals — and the fifth finds the queue full.
func leakyCost(t *testing.T, store limiter.Store, now time.Time) {
	lim := must(t)(limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Queue: 3, MaxWait: time.Minute, Cost: 2}))
	l := mustNew(t, store, "leaky-cost", lim)
	ctx := context.Background()
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, want := range []time.Duration{0, 200 * time.Millisecond, 400 * time.Millisecond, 600 * time.Millisecond} {
		d, err := l.Allow(ctx, "k", now, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.Delay != want || d.Remaining != 3-int64(i) {
			t.Fatalf("request %d: %+v, want admitted with delay %v and %d places left", i, d, want, 3-i)
		}
		wg.Go(func() { l.Wait(ctx, d) })
	}
	d, err := l.Allow(ctx, "k", now, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The queue frees a place when the first waiter leaves, at 200ms.
	if d.Allowed || d.RetryAfter != 200*time.Millisecond || d.Next != 200*time.Millisecond {
		t.Fatalf("5th request: %+v, want rejected with Retry-After and Next 200ms", d)
	}
}

// leakyBoundary is RunBoundary's scenario for the leaky bucket: 1000/min
// with room for a minute of waiting (queue 1000, max_wait 1m). At 0:59 one
// request leaves and 999 wait, released 60ms apart; by 1:01, 34 have left
// (the last at 0:59 + 33 × 60ms = 1:00.98), so 34 places are free again.
func leakyBoundary(t *testing.T, store limiter.Store) {
	l := leaky(t, store, limiter.LeakyBucketParams{Rate: limiter.Rate{N: 1000, Per: time.Minute}, Queue: 1000, MaxWait: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Start at a whole minute of the bubble's clock plus 59s.
	minute := time.Now().Truncate(time.Minute).Add(time.Minute)
	time.Sleep(time.Until(minute.Add(59 * time.Second)))
	admitted := 0
	var wg sync.WaitGroup
	for round := range 2 {
		if round == 1 {
			time.Sleep(2 * time.Second)
			synctest.Wait()
		}
		for range 1000 {
			d, err := l.Allow(ctx, "k", time.Now(), 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
				wg.Go(func() { l.Wait(ctx, d) })
			}
		}
	}
	t.Logf("%v admitted %d of 2000 (34 left the queue in the 2s between the bursts)", must(t)(limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 1000, Per: time.Minute}, Queue: 1000, MaxWait: time.Minute})), admitted)
	if admitted != 1034 {
		t.Errorf("leaky bucket admitted %d, want 1034", admitted)
	}
	cancel()
	wg.Wait()
}

func leaky(t *testing.T, store limiter.Store, p limiter.LeakyBucketParams) *limiter.Limiter {
	return mustNew(t, store, "leaky", must(t)(limiter.NewLeakyBucket(p)))
}

// release records when each waiter was released, in order.
type release struct {
	mu    sync.Mutex
	order []int
	at    []time.Time
}

func (r *release) wait(t *testing.T, wg *sync.WaitGroup, ctx context.Context, l *limiter.Limiter, id int, d limiter.Decision) {
	wg.Go(func() {
		if err := l.Wait(ctx, d); err != nil {
			return
		}
		r.mu.Lock()
		r.order = append(r.order, id)
		r.at = append(r.at, time.Now())
		r.mu.Unlock()
	})
}

func leakyFIFO(t *testing.T, store limiter.Store) {
	l := leaky(t, store, limiter.LeakyBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Queue: 5, MaxWait: time.Minute})
	ctx := context.Background()
	start := time.Now()
	var r release
	var wg sync.WaitGroup
	for i := range 6 {
		d, err := l.Allow(ctx, "k", time.Now(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.Delay != time.Duration(i)*100*time.Millisecond {
			t.Fatalf("request %d: %+v, want admitted with delay %v", i, d, time.Duration(i)*100*time.Millisecond)
		}
		if want := int64(5 - i); d.Remaining != want || d.Limit != 6 {
			t.Errorf("request %d: remaining %d of %d, want %d of 6", i, d.Remaining, d.Limit, want)
		}
		r.wait(t, &wg, ctx, l, i, d)
	}
	// 1 leaving now + 5 waiting: the queue is full until the first waiter
	// leaves at +100ms.
	d, _ := l.Allow(ctx, "k", time.Now(), 1)
	if d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("7th request: %+v, want rejected with Retry-After 100ms", d)
	}
	wg.Wait()
	for i, id := range r.order {
		if id != i {
			t.Fatalf("release order %v, want FIFO", r.order)
		}
		if got, want := r.at[i].Sub(start), time.Duration(i)*100*time.Millisecond; got != want {
			t.Errorf("request %d released at +%v, want +%v", i, got, want)
		}
	}
	// Once the last release's interval has passed the key is idle: the
	// next request leaves at once.
	time.Sleep(time.Second)
	if d, _ := l.Allow(ctx, "k", time.Now(), 1); !d.Allowed || d.Delay != 0 {
		t.Fatalf("request on an idle key: %+v, want admitted at once", d)
	}
}

func leakyMaxWait(t *testing.T, store limiter.Store) {
	l := leaky(t, store, limiter.LeakyBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Queue: 100, MaxWait: 250 * time.Millisecond})
	ctx := context.Background()
	for i := range 3 {
		if d, _ := l.Allow(ctx, "k", time.Now(), 1); !d.Allowed {
			t.Fatalf("request %d rejected: %+v", i, d)
		}
	}
	// The 4th would wait 300ms > 250ms: rejected at once, admissible in 50ms.
	d, _ := l.Allow(ctx, "k", time.Now(), 1)
	if d.Allowed || d.RetryAfter != 50*time.Millisecond {
		t.Fatalf("4th request: %+v, want rejected with Retry-After 50ms", d)
	}
	time.Sleep(50 * time.Millisecond)
	synctest.Wait()
	if d, _ := l.Allow(ctx, "k", time.Now(), 1); !d.Allowed || d.Delay != 250*time.Millisecond {
		t.Fatalf("after Retry-After: %+v, want admitted with delay 250ms", d)
	}
}

func leakyCancel(t *testing.T, store limiter.Store) {
	l := leaky(t, store, limiter.LeakyBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Queue: 10, MaxWait: time.Minute})
	start := time.Now()
	var r release
	var wg sync.WaitGroup
	cancels := map[int]context.CancelFunc{}
	for i := range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		d, _ := l.Allow(ctx, "k", time.Now(), 1)
		if !d.Allowed {
			t.Fatalf("request %d rejected", i)
		}
		r.wait(t, &wg, ctx, l, i, d)
	}
	// 0 leaves at once; 1..4 are due at +100..+400ms. At +50ms the head
	// waiter (1) and a middle one (3) leave: 2 and 4 move up.
	time.Sleep(50 * time.Millisecond)
	cancels[1]()
	cancels[3]()
	wg.Wait()
	for _, c := range cancels {
		c()
	}
	wantOrder := []int{0, 2, 4}
	wantAt := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}
	if len(r.order) != len(wantOrder) {
		t.Fatalf("released %v, want %v: a cancelled waiter must never be released", r.order, wantOrder)
	}
	for i := range wantOrder {
		if r.order[i] != wantOrder[i] || r.at[i].Sub(start) != wantAt[i] {
			t.Errorf("release %d: request %d at +%v, want request %d at +%v", i, r.order[i], r.at[i].Sub(start), wantOrder[i], wantAt[i])
		}
	}
	// The places freed by leavers are reused: a newcomer now waits behind
	// nobody but the gate of request 4's release.
	d, _ := l.Allow(context.Background(), "k", time.Now(), 1)
	if !d.Allowed || d.Delay != 100*time.Millisecond {
		t.Fatalf("newcomer after the cancellations: %+v, want delay 100ms", d)
	}
}

// lbModel is docs/algorithms.md's leaky bucket as a list of departure times: a request
// arriving at t takes the place max(t, the previous place + its spacing)
// and leaves Delay intervals (the lead) before it, or at once; it is
// rejected if it would wait and Queue requests are waiting (departures
// after t) or its wait would exceed MaxWait.
type lbModel struct {
	p        limiter.LeakyBucketParams
	interval int64
	deps     []int64 // departure of each admitted request
	free     int64   // the next place on the schedule
}

func (m *lbModel) allow(now, c int64) (result, time.Duration) {
	var waiting []int64
	for _, d := range m.deps {
		if d > now {
			waiting = append(waiting, d)
		}
	}
	lead := m.p.Delay * m.interval
	place := max(now, m.free)
	leave := max(now, place-lead)
	// A place frees when the head waiter leaves or, with nobody waiting,
	// when the exit reopens: that is when Remaining grows (draft-10's t).
	head := m.free - lead
	if len(waiting) > 0 {
		head = waiting[0]
	}
	var r result
	if leave > now && (int64(len(waiting)) >= m.p.Queue || leave-now > int64(m.p.MaxWait)) {
		at := leave - int64(m.p.MaxWait)
		if int64(len(waiting)) >= m.p.Queue {
			free := leave
			if i := int64(len(waiting)) - m.p.Queue; i < int64(len(waiting)) {
				free = waiting[i]
			}
			at = max(at, free)
		}
		r.retry = time.Duration(at - now)
		r.next = time.Duration(min(head, at) - now)
		return r, 0
	}
	r.allowed = true
	m.deps = append(m.deps, leave)
	m.free = place + c*m.interval
	if leave > now {
		r.remaining = m.p.Queue - int64(len(waiting)) - 1 // it waits too
		if len(waiting) == 0 {
			head = leave
		}
		r.next = time.Duration(head - now)
	} else {
		// Left at once: count the requests of cost 1 that still would.
		var k int64
		for p := m.free; p-lead <= now; p += m.interval {
			k++
		}
		r.remaining = m.p.Queue + k
		r.next = time.Duration(m.free - lead + k*m.interval - now)
	}
	return r, time.Duration(leave - now)
}

// leakyParams draws a random leaky bucket, its max_wait a multiple of res,
// its cost 1 half the time and 2 to 4 otherwise, with a delay= of 1 to 6 a
// third of the time.
func leakyParams(rng *rand.Rand, res int64) limiter.LeakyBucketParams {
	cost := int64(1)
	if rng.IntN(2) == 0 {
		cost = 2 + rng.Int64N(3)
	}
	var delay int64 // nginx's delay= a third of the time
	if rng.IntN(3) == 0 {
		delay = 1 + rng.Int64N(6)
	}
	return limiter.LeakyBucketParams{
		Rate:    limiter.Rate{N: 1 + rng.Int64N(20), Per: []time.Duration{time.Second, 3 * time.Second, time.Minute}[rng.IntN(3)]},
		Queue:   rng.Int64N(8),
		MaxWait: time.Duration(rng.Int64N(int64(5*time.Second)) / res * res),
		Cost:    cost,
		Delay:   delay,
	}
}

// weight draws a request's weight: mostly 1, sometimes 2 or 3, so that
// waiters of different spacings share a queue.
func weight(rng *rand.Rand) int64 {
	if rng.IntN(4) == 0 {
		return 2 + rng.Int64N(2)
	}
	return 1
}

// leakyModel runs random arrivals through the store and the model, and also
// checks that every admitted request is released exactly at its departure.
func leakyModel(t *testing.T, store limiter.Store) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 6 {
		p := leakyParams(rng, 1)
		lim := must(t)(limiter.NewLeakyBucket(p))
		l := mustNew(t, store, "leaky-model-"+string(rune('a'+trial)), lim)
		interval := (int64(p.Rate.Per) + p.Rate.N - 1) / p.Rate.N
		m := &lbModel{p: p, interval: interval}
		var mu sync.Mutex
		var late []string
		var wg sync.WaitGroup
		for i := range 400 {
			time.Sleep(time.Duration(gap(rng, time.Now().UnixNano(), interval)))
			synctest.Wait() // let releases due now happen first
			now := time.Now()
			n := weight(rng)
			want, wantDelay := m.allow(now.UnixNano(), n*p.Cost)
			d, err := l.Allow(ctx, "k", now, n)
			if err != nil {
				t.Fatal(err)
			}
			got := result{d.Allowed, d.RetryAfter, d.Remaining, next(d, now.UnixNano())}
			if !got.allowed {
				got.remaining = want.remaining // not specified for rejections
			}
			if got != want || d.Delay != wantDelay {
				t.Fatalf("trial %d (%v) step %d at +%v: %+v delay %v, want %+v delay %v", trial, lim, i, now.Sub(time.Unix(946684800, 0)) /* synctest epoch */, got, d.Delay, want, wantDelay)
			}
			if d.Allowed {
				due := now.Add(d.Delay)
				wg.Go(func() {
					if err := l.Wait(ctx, d); err != nil {
						t.Error(err)
					}
					if !time.Now().Equal(due) {
						mu.Lock()
						late = append(late, time.Since(due).String())
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		if len(late) > 0 {
			t.Errorf("trial %d: %d releases off their departure: %v", trial, len(late), late)
		}
	}
}

// RunLeakyVirtual checks a store whose leaky bucket is virtual (Redis):
// each admitted request gets its departure delay at once, and nobody
// waits, so the same model as RunLeakyQueue's applies with the caller's
// instants (at resolution res) and no timers: every decision, delay and
// Retry-After must match it.
func RunLeakyVirtual(t *testing.T, newStore NewStore, o Options) {
	t.Run("Boundary", func(t *testing.T) { leakyVirtualBoundary(t, newStore(t)) })
	t.Run("Cost", func(t *testing.T) { leakyCost(t, newStore(t), time.Unix(0, base)) })
	t.Run("TwoStage", func(t *testing.T) { leakyTwoStage(t, newStore(t), time.Unix(0, base)) })
	store := newStore(t)
	res := int64(max(o.Resolution, 1))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 6 {
		p := leakyParams(rng, res)
		lim := must(t)(limiter.NewLeakyBucket(p))
		l := mustNew(t, store, "leaky-virtual-"+string(rune('a'+trial)), lim)
		// The store rounds the interval up to its resolution.
		interval := ceilTo((int64(p.Rate.Per)+p.Rate.N-1)/p.Rate.N, res)
		m := &lbModel{p: p, interval: interval}
		now := base
		for i := range 400 {
			now += gap(rng, now, interval)
			now -= now % res
			n := weight(rng)
			want, wantDelay := m.allow(now, n*p.Cost)
			want.retry = time.Duration(ceilTo(int64(want.retry), res))
			want.next = time.Duration(ceilTo(int64(want.next), res))
			d, err := l.Allow(ctx, "k", time.Unix(0, now), n)
			if err != nil {
				t.Fatal(err)
			}
			got := result{d.Allowed, d.RetryAfter, d.Remaining, next(d, now)}
			if !got.allowed {
				got.remaining = want.remaining
			}
			if got != want || d.Delay != wantDelay {
				t.Fatalf("trial %d (%v) step %d: %+v delay %v, want %+v delay %v", trial, lim, i, got, d.Delay, want, wantDelay)
			}
		}
	}
}

// leakyVirtualBoundary is leakyBoundary for a virtual queue, at the
// caller's instants: nobody waits, the store counts who would still be
// waiting at 1:01.
func leakyVirtualBoundary(t *testing.T, store limiter.Store) {
	lim := must(t)(limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 1000, Per: time.Minute}, Queue: 1000, MaxWait: time.Minute}))
	l := mustNew(t, store, "leaky-boundary", lim)
	start := base + int64(59*time.Second)
	admitted := 0
	for _, at := range []int64{start, start + int64(2*time.Second)} {
		for range 1000 {
			d, err := l.Allow(context.Background(), "k", time.Unix(0, at), 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
	}
	t.Logf("%v admitted %d of 2000 (34 left the queue in the 2s between the bursts)", lim, admitted)
	if admitted != 1034 {
		t.Errorf("leaky bucket admitted %d, want 1034", admitted)
	}
}
