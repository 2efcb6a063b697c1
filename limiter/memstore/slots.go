package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/limitproxy/limitproxy/limiter/perkey"
)

var _ perkey.Slots = (*Store)(nil)

// slotShards is how many locks the slot counts are spread over.
const slotShards = 32

// slotCounts are the slots held per (limit, key): entries leave the map
// when their count returns to 0, so it holds no more entries than
// requests in flight.
type slotCounts struct {
	mu sync.Mutex
	n  map[slotKey]int64
}

type slotKey struct{ name, key string }

// Take implements perkey.Slots.
func (s *Store) Take(_ context.Context, name, key string, limit int64, _ time.Time) (perkey.Slot, bool, error) {
	sh := &s.slots[s.hash(key)>>countBits%slotShards]
	k := slotKey{name, key}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.n[k] >= limit {
		return perkey.Slot{}, false, nil
	}
	if sh.n == nil {
		sh.n = map[slotKey]int64{}
	}
	sh.n[k]++
	return perkey.Slot{Name: name, Key: key, ID: 1}, true, nil
}

// Give implements perkey.Slots.
func (s *Store) Give(sl perkey.Slot) {
	if sl.ID == 0 {
		return
	}
	sh := &s.slots[s.hash(sl.Key)>>countBits%slotShards]
	k := slotKey{sl.Name, sl.Key}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if n := sh.n[k]; n > 1 {
		sh.n[k] = n - 1
	} else {
		delete(sh.n, k)
	}
}

// SlotsHeld returns the slots held for (name, key) now.
func (s *Store) SlotsHeld(name, key string) int64 {
	sh := &s.slots[s.hash(key)>>countBits%slotShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.n[slotKey{name, key}]
}
