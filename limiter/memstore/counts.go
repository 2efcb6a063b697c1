package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/limitproxy/limitproxy/limiter/driver"
)

// Interface guard.
var _ driver.Counter = (*Store)(nil)

// countShards is the number of shards of the counters (a power of two).
const countShards = 64

// counts are the Store's plain counters (driver.Counter), sharded by a
// hash of the key, each dropped once past its expiry: by the shard's
// sweep, which runs once the shard has seen as many additions as it
// holds counters (so it costs O(1) an addition), or, for a full shard,
// before a new counter is stored. The counters are bounded with the
// Store's keys: a full shard that holds no expired counter drops the
// one that expires first among a sample, as Redis's volatile-ttl
// eviction does.
type counts struct {
	shards [countShards]countShard
}

type countShard struct {
	mu   sync.Mutex
	m    map[string]countEntry
	adds int // additions since the last sweep
}

type countEntry struct {
	n       int64
	expires int64 // Unix ns
}

// AddCount implements driver.Counter.
func (s *Store) AddCount(_ context.Context, key string, n int64, ttl time.Duration, now time.Time) (int64, error) {
	sh := &s.counts.shards[s.hash(key)&(countShards-1)]
	t := now.UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = map[string]countEntry{}
	}
	e, ok := sh.m[key]
	if !ok || e.expires <= t {
		e.n = 0
	}
	if sh.adds++; sh.adds > len(sh.m) {
		sh.sweep(t)
	}
	if !ok {
		if limit := max(s.maxKeys/countShards, 1); len(sh.m) >= limit {
			sh.sweep(t)
			if len(sh.m) >= limit {
				sh.evict()
			}
		}
	}
	e.n += n
	e.expires = t + int64(ttl)
	sh.m[key] = e
	return e.n, nil
}

// Count implements driver.Counter.
func (s *Store) Count(_ context.Context, key string, now time.Time) (int64, error) {
	sh := &s.counts.shards[s.hash(key)&(countShards-1)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.m[key]; ok && e.expires > now.UnixNano() {
		return e.n, nil
	}
	return 0, nil
}

// sweep drops the counters past their expiry at t.
func (sh *countShard) sweep(t int64) {
	sh.adds = 0
	for k, e := range sh.m {
		if e.expires <= t {
			delete(sh.m, k)
		}
	}
}

// evict drops, of a sample of the shard's counters (the map's order),
// the one that expires first.
func (sh *countShard) evict() {
	var (
		victim string
		first  int64
		seen   int
	)
	for k, e := range sh.m {
		if seen == 0 || e.expires < first {
			victim, first = k, e.expires
		}
		if seen++; seen == evictSample {
			break
		}
	}
	delete(sh.m, victim)
}
