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
// is a fresh state: a charge inserts it, a refund only reads a zero value.
// Requires sh.mu held.
func (s *Store) charge(sh *shard, id int32, lim *driver.Limit, h uint64, now, reservedAt time.Time, n int64) driver.Decision {
	t := sh.tablesFor(id)
	if t.lim != lim {
		t.lim = lim // the janitor reads the latest parameters
	}
	ns := now.UnixNano()
	switch lim.Algorithm() {
	case limiter.TokenBucket:
		st, w := get(&t.tb, h)
		if st == nil {
			if n <= 0 {
				var fresh driver.TokenBucketState
				return lim.ChargeTokenBucket(&fresh, now, reservedAt, n)
			}
			st, w = add(s, sh, &t.tb, h, ns)
		}
		if n > 0 {
			counted(w)
		}
		return lim.ChargeTokenBucket(st, now, reservedAt, n)
	case limiter.FixedWindow:
		st, w := get(&t.fw, h)
		if st == nil {
			if n <= 0 {
				var fresh driver.FixedWindowState
				return lim.ChargeFixedWindow(&fresh, now, reservedAt, n)
			}
			st, w = add(s, sh, &t.fw, h, ns)
		}
		if n > 0 {
			counted(w)
		}
		return lim.ChargeFixedWindow(st, now, reservedAt, n)
	case limiter.SlidingLog:
		st, w := get(&t.sl, h)
		if st == nil {
			if n <= 0 {
				var fresh driver.SlidingLogState
				return lim.ChargeSlidingLog(&fresh, now, reservedAt, n)
			}
			st, w = add(s, sh, &t.sl, h, ns)
		}
		if n > 0 {
			counted(w)
		}
		return lim.ChargeSlidingLog(st, now, reservedAt, n)
	case limiter.SlidingWindow:
		k := lim.SlidingWindowCounters()
		switch {
		case k <= 2:
			return chargeWindow(s, sh, &t.sw2, lim, h, now, reservedAt, ns, n)
		case k <= 8:
			return chargeWindow(s, sh, &t.sw8, lim, h, now, reservedAt, ns, n)
		default:
			return chargeWindow(s, sh, &t.sw65, lim, h, now, reservedAt, ns, n)
		}
	}
	return driver.Decision{} // unreachable: CheckCharge refused the rest
}

// chargeWindow is charge for sliding windows, whose states differ only in
// how many counters they hold inline.
func chargeWindow[S swCounts2 | swCounts8 | swCounts65](s *Store, sh *shard, tab *table[S], lim *driver.Limit, h uint64, now, reservedAt time.Time, ns, n int64) driver.Decision {
	st, w := get(tab, h)
	if st == nil {
		if n <= 0 {
			var fresh S
			return lim.ChargeSlidingWindow(view(&fresh, lim), now, reservedAt, n)
		}
		st, w = add(s, sh, tab, h, ns)
	}
	if n > 0 {
		counted(w)
	}
	return lim.ChargeSlidingWindow(view(st, lim), now, reservedAt, n)
}
