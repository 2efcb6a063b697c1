package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/limitertest"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func tokenBucket(t testing.TB, store limiter.Store, policy string, burst int64, rate limiter.Rate) *limiter.Limiter {
	t.Helper()
	lim, err := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: rate, Burst: burst})
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(store, policy, lim)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestMaxKeys floods a small store with distinct keys: it never tracks more
// than MaxKeys, and each key it drops before its state was fresh is counted.
func TestMaxKeys(t *testing.T) {
	store := memstore.New(memstore.Options{MaxKeys: 1000})
	a := tokenBucket(t, store, "a", 5, limiter.Rate{N: 1, Per: time.Hour})
	b := tokenBucket(t, store, "b", 5, limiter.Rate{N: 1, Per: time.Hour})
	ctx := context.Background()
	for i := range 10_000 {
		l := a
		if i%3 == 0 {
			l = b
		}
		if d, _ := l.Allow(ctx, "client-"+strconv.Itoa(i), t0, 1); !d.Allowed {
			t.Fatalf("new key %d rejected", i)
		}
		if n := store.Len(); n > 1000 {
			t.Fatalf("after %d keys the store tracks %d, above MaxKeys 1000", i+1, n)
		}
	}
	if n := store.Len(); n < 900 {
		t.Errorf("store tracks %d keys at the end; expected close to the bound", n)
	}
	// Every key was used (not fresh), so every drop is an eviction.
	if ev, want := store.Evictions(), int64(10_000-store.Len()); ev != want {
		t.Errorf("evictions = %d, want %d (keys inserted − keys kept)", ev, want)
	}
}

// TestEvictionPrefersFresh checks that with the store full, keys whose
// state is fresh again go first, without counting as evictions.
func TestEvictionPrefersFresh(t *testing.T) {
	store := memstore.New(memstore.Options{MaxKeys: 64})
	l := tokenBucket(t, store, "p", 1, limiter.Rate{N: 1, Per: time.Second})
	ctx := context.Background()
	for i := range 64 {
		l.Allow(ctx, "old-"+strconv.Itoa(i), t0, 1)
	}
	// An hour later every bucket is full again: fresh.
	later := t0.Add(time.Hour)
	for i := range 64 {
		l.Allow(ctx, "new-"+strconv.Itoa(i), later, 1)
	}
	if ev := store.Evictions(); ev != 0 {
		t.Errorf("evictions = %d, want 0: only fresh keys needed to go", ev)
	}
	// The new keys kept their state: each is empty.
	for i := range 64 {
		if d, _ := l.Allow(ctx, "new-"+strconv.Itoa(i), later, 1); d.Allowed {
			t.Fatalf("new-%d was evicted in favour of a fresh key", i)
		}
	}
}

// TestSweep checks the janitor: keys are dropped once, and only once, their
// state equals a fresh key's; and Run returns when its context ends.
func TestSweep(t *testing.T) {
	store := memstore.New(memstore.Options{})
	ctx := context.Background()
	tb := tokenBucket(t, store, "tb", 10, limiter.Rate{N: 10, Per: time.Second}) // refills fully in 1s per 10 used
	fwLim, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 5, Window: time.Minute})
	fw, _ := limiter.New(store, "fw", fwLim)
	for i := range 100 {
		tb.Allow(ctx, "k"+strconv.Itoa(i), t0, int64(1+i%10))
		fw.Allow(ctx, "k"+strconv.Itoa(i), t0.Add(30*time.Second), 1)
	}
	if n := store.Len(); n != 200 {
		t.Fatalf("Len = %d, want 200", n)
	}
	// A token bucket that used n tokens is full n/10 s later; the windows
	// started at +30s end at +60s.
	for _, c := range []struct {
		at   time.Duration
		want int
	}{{0, 0}, {500 * time.Millisecond, 50}, {time.Second, 50}, {59 * time.Second, 0}, {time.Minute, 100}} {
		if n := store.Sweep(t0.Add(c.at)); n != c.want {
			t.Errorf("sweep at +%v dropped %d keys, want %d", c.at, n, c.want)
		}
	}
	if n := store.Len(); n != 0 {
		t.Errorf("Len = %d after sweeping everything", n)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- store.Run(runCtx) }()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v", err)
	}
}

// TestSweepKeepsBusyQueues checks that an idle leaky bucket is dropped (no
// queue, no timer left for it) but a busy one is not.
func TestSweepKeepsBusyQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New(memstore.Options{})
		lim, _ := limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Queue: 10, MaxWait: time.Minute})
		l, _ := limiter.New(store, "lb", lim)
		ctx := context.Background()
		var wg sync.WaitGroup
		for range 5 {
			d, _ := l.Allow(ctx, "k", time.Now(), 1)
			wg.Go(func() { l.Wait(ctx, d) })
		}
		if n := store.Sweep(time.Now().Add(time.Hour)); n != 0 {
			t.Fatalf("sweep dropped %d busy queues", n)
		}
		wg.Wait()                          // all released by +400ms
		time.Sleep(100 * time.Millisecond) // the last gate opens
		synctest.Wait()
		if n := store.Sweep(time.Now()); n != 1 {
			t.Fatalf("sweep of an idle queue dropped %d keys, want 1", n)
		}
	})
}

// TestKeyLength checks that a key's memory does not depend on its length:
// the store keeps a hash, never the key.
func TestKeyLength(t *testing.T) {
	perKey := func(keyLen int) float64 {
		store := memstore.New(memstore.Options{})
		l := tokenBucket(t, store, "p", 5, limiter.Rate{N: 1, Per: time.Second})
		pad := strings.Repeat("x", keyLen)
		before := heap()
		for i := range 20_000 {
			l.Allow(context.Background(), pad+strconv.Itoa(i), t0, 1)
		}
		after := heap()
		runtime.KeepAlive(store)
		return float64(after-before) / 20_000
	}
	short, long := perKey(8), perKey(4096)
	t.Logf("bytes per key: %.1f with 8-byte keys, %.1f with 4 KiB keys", short, long)
	if long > short*1.2+8 {
		t.Errorf("4 KiB keys cost %.1f bytes each against %.1f for 8-byte keys: the store keeps keys", long, short)
	}
}

func heap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestConcurrentKeysAndSweeps runs decisions on many keys from several
// goroutines while the janitor sweeps (for the race detector), then checks
// per-key exactness: each key admitted exactly its burst.
func TestConcurrentKeysAndSweeps(t *testing.T) {
	store := memstore.New(memstore.Options{MaxKeys: 100_000})
	l := tokenBucket(t, store, "p", 3, limiter.Rate{N: 1, Per: time.Hour})
	ctx := context.Background()
	const keys, workers = 500, 6
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				store.Sweep(t0)
			}
		}
	}()
	for w := range workers {
		wg.Go(func() {
			local := map[string]int{}
			for i := range keys * 2 {
				k := fmt.Sprintf("k%d", (i*7+w)%keys)
				if d, _ := l.Allow(ctx, k, t0, 1); d.Allowed {
					local[k]++
				}
			}
			mu.Lock()
			for k, v := range local {
				admitted[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	close(stop)
	for i := range keys {
		if n := admitted[fmt.Sprintf("k%d", i)]; n != 3 {
			t.Fatalf("key k%d admitted %d times, want exactly its burst 3", i, n)
		}
	}
}

// TestForget: forgetting a limit's name drops its keys at once and leaves
// other limits' alone; the name then starts fresh.
func TestForget(t *testing.T) {
	store := memstore.New(memstore.Options{})
	a := tokenBucket(t, store, "a", 1, limiter.Rate{N: 1, Per: time.Hour})
	b := tokenBucket(t, store, "b", 1, limiter.Rate{N: 1, Per: time.Hour})
	ctx := context.Background()
	for i := range 50 {
		a.Allow(ctx, strconv.Itoa(i), t0, 1)
		b.Allow(ctx, strconv.Itoa(i), t0, 1)
	}
	store.Forget(a.Limits()[0].Name())
	if n := store.Len(); n != 50 {
		t.Errorf("Len = %d after forgetting a, want b's 50", n)
	}
	if d, _ := a.Allow(ctx, "0", t0, 1); !d.Allowed {
		t.Error("a forgotten limit did not start fresh")
	}
	if d, _ := b.Allow(ctx, "0", t0, 1); d.Allowed {
		t.Error("forgetting a reset b")
	}
}

func TestSlots(t *testing.T) {
	limitertest.RunSlots(t, func(t *testing.T) limiter.Store { return memstore.New(memstore.Options{}) })
}
