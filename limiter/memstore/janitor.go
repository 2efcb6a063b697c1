package memstore

import (
	"context"
	"math"
	"time"
)

// shardSweepGap is the least request time between two sweeps of one full
// shard by evict.
const shardSweepGap = 100 * time.Millisecond

// Run sweeps the store every Options.SweepInterval, dropping keys whose
// state equals a fresh key's (see Sweep), until ctx is done. It returns nil
// then. Start it once, from the goroutine that owns the store, and wait for
// it.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.sweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			s.Sweep(now)
		}
	}
}

// Sweep drops every key whose state will equal a fresh key's at now (a full
// token bucket, an expired window, an idle leaky bucket), and gives memory
// back from tables that a flood of keys left mostly empty. It holds one
// shard's lock at a time. It returns how many keys it dropped.
func (s *Store) Sweep(now time.Time) int {
	cut := now.UnixNano()
	dropped := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		dropped += sh.sweepLocked(cut)
		sh.mu.Unlock()
	}
	return dropped
}

// sweepLocked drops the shard's keys that are fresh at cut (Unix ns).
// Requires sh.mu held.
func (sh *shard) sweepLocked(cut int64) int {
	dropped := 0
	for _, t := range sh.tabs {
		if t == nil {
			continue
		}
		for i := 0; i < t.size(); {
			if t.hashAt(i) != 0 && t.idleAt(i) <= cut {
				t.deleteAt(i) // a later entry may move into i: look again
				sh.keys--
				dropped++
				continue
			}
			i++
		}
		t.shrink()
	}
	return dropped
}

// evict makes room in a full shard for the key with hash h. It looks at
// a sample of evictSample entries of the shard's largest table and drops,
// in this order of preference:
//
//  1. an entry already fresh at now (forgetting it costs nothing; not an
//     eviction);
//  2. if none is, after sweeping the whole shard for fresh entries (at
//     most once per shardSweepGap of request time, so a flood of new keys
//     does not turn every insert into a scan), the entry that took the
//     fewest requests to reach its state (its count: the requests charged
//     to it since it was inserted, each counting 1 whatever its cost,
//     saturating at countMax); among equals, the one with the most left
//     of its limit; then the one that becomes fresh first.
//
// Why requests first: what an entry's state says (spent, or how much is
// left) is chosen by its client, and a client flooding junk keys controls
// both its own entry's state and the junk's, so any rule on state alone
// can be made to pick the client's own entry (all spent, each junk key by
// one request of a large cost; or its own entry the only one not quite
// spent). The number of requests it took is what a flood cannot make
// cheap: an entry charged n times is never dropped while the sample holds
// one charged fewer times, so to free it a flood must charge each of its
// own keys n times (both counts capped at countMax). Entries charged
// equally many times fall back on the state: the one with the most left
// gives back the least, and so does the one closest to fresh; among
// entries equal in all three, one the new key's hash picks.
//
// Dropping an entry that was not fresh counts as an eviction, and one
// that would have refused its next request (spent) also as a spent
// eviction. It reports false if nothing could be dropped (every sampled
// entry is a busy leaky-bucket queue). Requires sh.mu held.
func (s *Store) evict(sh *shard, h uint64, now int64) bool {
	var best *table
	for _, t := range sh.tabs {
		if t != nil && (best == nil || t.count() > best.count()) {
			best = t
		}
	}
	if best == nil || best.count() == 0 {
		return false
	}
	size := best.size()
	start := int(h >> countBits % uint64(size))
	var sample, sampleAt [evictSample]int64
	n := 0
	for p := 0; p < size && n < evictSample; p++ {
		i := start + p
		if i >= size {
			i -= size
		}
		hh := best.hashAt(i)
		if hh == 0 || hh == h {
			continue
		}
		at := best.idleAt(i)
		if at == math.MaxInt64 {
			continue // a busy queue: never dropped
		}
		if at <= now {
			// Fresh: nothing is lost by forgetting it.
			best.deleteAt(i)
			sh.keys--
			return true
		}
		sample[n], sampleAt[n] = int64(i), at
		n++
	}
	if n == 0 {
		return false
	}
	if now >= sh.sweptAt+int64(shardSweepGap) {
		sh.sweptAt = now
		if sh.sweepLocked(now) > 0 {
			return true
		}
	}
	// None fresh: the fewest requests, then the most left, then the
	// first to become fresh. Entries equal in all three (spent in the same
	// fixed window) are taken from a place in the sample that the new
	// key's hash chooses, not always the first: else an entry behind a run
	// of empty slots would be first, and go, far more often than its share.
	victim := -1
	var victimReqs, victimLeft, victimAt int64
	off := int(h >> 32 % uint64(n))
	for j := range n {
		k := j + off
		if k >= n {
			k -= n
		}
		i := sample[k]
		reqs, left, at := best.requestsAt(int(i)), best.left(int(i), now), sampleAt[k]
		if victim < 0 || reqs < victimReqs ||
			reqs == victimReqs && (left > victimLeft || left == victimLeft && at < victimAt) {
			victim, victimReqs, victimLeft, victimAt = int(i), reqs, left, at
		}
	}
	s.evictions.Add(1)
	if victimLeft < 0 {
		s.spentEvictions.Add(1)
	}
	best.deleteAt(victim)
	sh.keys--
	return true
}
