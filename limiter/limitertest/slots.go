package limitertest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/perkey"
)

// RunSlots checks a store's concurrency-limit slots (perkey.Slots):
// limit slots per key and limit name, no more; a slot given back is
// taken again; keys and names count apart; and many goroutines taking and
// giving on a few keys never hold more than the limit at once, and leave
// every slot free at the end. newStore's store must implement
// perkey.Slots.
func RunSlots(t *testing.T, newStore NewStore) {
	store, ok := newStore(t).(perkey.Slots)
	if !ok {
		t.Fatal("the store does not implement perkey.Slots")
	}
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	take := func(name, key string, limit int64) (perkey.Slot, bool) {
		t.Helper()
		s, ok, err := store.Take(ctx, name, key, limit, now)
		if err != nil {
			t.Fatal(err)
		}
		return s, ok
	}
	a, ok1 := take("n", "k", 2)
	_, ok2 := take("n", "k", 2)
	if _, ok3 := take("n", "k", 2); !ok1 || !ok2 || ok3 {
		t.Fatalf("limit 2: took %v %v %v, want true true false", ok1, ok2, ok3)
	}
	if _, ok := take("n", "other", 2); !ok {
		t.Fatal("another key shares the first's slots")
	}
	if _, ok := take("other", "k", 1); !ok {
		t.Fatal("another limit shares the first's slots")
	}
	store.Give(a)
	if _, ok := take("n", "k", 2); !ok {
		t.Fatal("a slot given back was not taken again")
	}
	store.Give(perkey.Slot{}) // nothing

	// Concurrent takers: never more than the limit held at once.
	const limit, workers, rounds = 3, 16, 50
	var held [4]atomic.Int64
	var peak atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			key := string(rune('a' + w%4))
			for range rounds {
				s, ok, err := store.Take(ctx, "conc", key, limit, now)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					continue
				}
				n := held[w%4].Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(100 * time.Microsecond)
				held[w%4].Add(-1)
				store.Give(s)
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > limit || p < 1 {
		t.Fatalf("%d slots of a key held at once, limit %d", p, limit)
	}
	for _, key := range []string{"a", "b", "c", "d"} {
		s, ok := take("conc", key, 1)
		if !ok {
			t.Fatalf("key %s: slots left held after every taker gave its back", key)
		}
		store.Give(s)
	}
}
