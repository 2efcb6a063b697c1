package memstore

import (
	"context"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
)

// Interface guard.
var _ driver.Charger = (*Store)(nil)

// Charge implements driver.Charger: every limit is charged through the
// limiter's Charge… steps, under the locks of the keys' shards (taken in
// index order, as Decide takes them), so that one Charge is atomic
// against decisions and other charges on the same keys. It never returns
// an error but for a limit that cannot be charged (a leaky bucket), and
// then charges nothing. A refund to a key the store does not hold (fresh,
// or dropped by the janitor) changes nothing and stores nothing. It does
// not allocate, but for a sliding log whose ring grows.
func (s *Store) Charge(_ context.Context, limits []driver.Limit, keys driver.Keys, now, reservedAt time.Time, n int64) (driver.Decision, error) {
	for i := range limits {
		if err := limits[i].CheckCharge(); err != nil {
			return driver.Decision{}, err
		}
	}
	var (
		ids [limiter.MaxLimits]int32
		hs  [limiter.MaxLimits]uint64
		shs [limiter.MaxLimits]*shard
	)
	s.hashes(keys, hs[:len(limits)], shs[:len(limits)])
	for i := range limits {
		ids[i] = s.handle(&limits[i])
	}
	locked := s.lock(hs[:len(limits)])
	var d driver.Decision
	for i := range limits {
		d.Merge(i, s.charge(shs[i], ids[i], &limits[i], hs[i], now, reservedAt, n))
	}
	s.unlock(locked)
	return d, nil
}

// charge applies one limit's charge to the key with hash h. A key absent
// is a fresh state: a charge inserts it, a refund only reads it.
// Requires sh.mu held.
func (s *Store) charge(sh *shard, id int32, lim *driver.Limit, h uint64, now, reservedAt time.Time, n int64) driver.Decision {
	t := sh.table(id)
	if t == nil {
		t = sh.addTable(id, lim)
	}
	if t.lim != lim {
		t.lim = lim // the janitor reads the latest parameters
	}
	i, ok := t.find(h)
	if !ok {
		if n <= 0 {
			return lim.Charge(nil, 0, now, reservedAt, n)
		}
		if i, ok = s.add(sh, t, h, now.UnixNano()); !ok {
			return lim.Charge(lim.NewStates(1), 0, now, reservedAt, n) // not remembered
		}
	}
	if n > 0 {
		counted(&t.words[i])
	}
	return lim.Charge(t.states, i, now, reservedAt, n)
}
