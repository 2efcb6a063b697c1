// Package memstore is limitproxy's embedded, in-memory limiter.Store.
//
// State is sharded by a hash of the client key: each shard has its own lock
// and, per limit, a compact open-addressing table whose slots hold the
// algorithm's state inline, in the layout the limit gives it
// (driver.States: 24 bytes a key for a token bucket, fixed window or
// two-counter sliding window). Nothing in the store depends on the
// algorithm but the leaky bucket's real queue, which a queued limit
// (driver.Limit.Queued) gets. All limits of one client key live in the
// same shard, so a policy with several limits is decided under one lock, and
// a request rejected by any limit consumes nothing from the others. There is
// no global lock on the decision path.
//
// The store is bounded: Options.MaxKeys caps the keys of all limits
// together. Keys whose state has returned to a fresh key's are dropped by
// the janitor (Run); when a shard is still full, inserting a key evicts,
// from a sample of 8, a fresh entry, else the entry charged the fewest
// requests since it was stored (then the one with the most left, then the
// one closest to fresh), and counts it: a key flood cannot free a key
// that took more requests to reach its state than each of the flood's own
// keys did (see Store.SpentEvictions for what is promised).
package memstore

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
)

// Interface guard.
var _ limiter.Store = (*Store)(nil)

// DefaultMaxKeys is the key bound used when Options.MaxKeys is 0, as in the
// configuration's store.max_keys.
const DefaultMaxKeys = 1_000_000

// DefaultSweepInterval is how often Run looks for idle keys when
// Options.SweepInterval is 0.
const DefaultSweepInterval = 10 * time.Second

// shardBitsMax is the most shard bits a store uses (256 shards); tables shift
// that many bits out of a hash before placing it.
const shardBitsMax = 8

// evictSample is how many entries an eviction compares (see evict).
const evictSample = 8

// Options configures a Store. The zero value is usable.
type Options struct {
	// MaxKeys bounds the keys tracked for all limits together; 0 means
	// DefaultMaxKeys. The bound is enforced per shard (MaxKeys divided
	// evenly), which with a uniform hash is the same within a few percent.
	MaxKeys int
	// SweepInterval is the period of Run's sweep for idle keys; 0 means
	// DefaultSweepInterval.
	SweepInterval time.Duration
	// Clock, if not nil, is the clock the instants passed to Decide come
	// from. Leaky buckets read it when they release a waiting request, to
	// keep their releases on schedule however late timers fire; nil means
	// each release is timed from the previous one, which forwards a little
	// below the rate (by the timers' lateness).
	Clock func() time.Time
	// VirtualQueues runs leaky-bucket queues without timers: a queue
	// releases its waiters when a later decision's instant shows their
	// time has come, as a timer firing exactly on time would have, and
	// nobody needs to Wait (a waiter nobody waits for counts as staying
	// in the queue). For `limitproxy replay`, which decides on a virtual
	// clock and never waits.
	VirtualQueues bool
}

// Store is the in-memory limiter.Store. Create it with New; it is safe for
// concurrent use. Start Run in a goroutine to drop idle keys.
type Store struct {
	seed      maphash.Seed
	shards    []shard
	shardBits uint
	perShard  int
	sweep     time.Duration
	clock     func() time.Time
	virtualQ  bool
	evictions atomic.Int64
	// Evictions of entries that would have refused their key's next
	// request.
	spentEvictions atomic.Int64
	slots          [slotShards]slotCounts // concurrency limits' slots (slots.go)
	maxKeys        int                    // Options.MaxKeys, which bounds counts too
	counts         *counts                // plain counters (counts.go)
}

type shard struct {
	mu   sync.Mutex
	keys int // entries in all tabs
	// The requests waiting in this shard's leaky-bucket queues, by ticket:
	// the shard's index in the top bits (ticketBase), then a count.
	waiters    map[uint64]*waiter
	ticketBase uint64
	nextTicket uint64
	tabs       []*table // by limit index; nil until the limit is used here
	sweptAt    int64    // Unix ns of evict's last sweep of this shard
	_          [64]byte // keep shards' locks on separate cache lines
}

// New returns an empty store.
func New(o Options) *Store {
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	// Enough shards for concurrency, few enough that each keeps a useful
	// share of the bound.
	bits := uint(shardBitsMax)
	for bits > 0 && o.MaxKeys>>bits < 64 {
		bits--
	}
	s := &Store{
		seed:      maphash.MakeSeed(),
		shards:    make([]shard, 1<<bits),
		shardBits: bits,
		perShard:  max(1, (o.MaxKeys+(1<<bits)-1)>>bits),
		sweep:     o.SweepInterval,
		clock:     o.Clock,
		virtualQ:  o.VirtualQueues,
		maxKeys:   o.MaxKeys,
		counts:    &counts{},
	}
	for i := range s.shards {
		s.shards[i].ticketBase = uint64(i) << ticketShardShift
	}
	return s
}

// hash returns the client key's hash: its low countBits bits clear (a
// slot keeps its entry's request count there) and never 0 (0 marks empty
// slots).
func (s *Store) hash(key string) uint64 {
	h := maphash.String(s.seed, key) &^ countMask
	if h == 0 {
		h = 1 << countBits
	}
	return h
}

func (s *Store) shardOf(h uint64) *shard { return &s.shards[s.shardIndex(h)] }

// table returns the shard's table of limit index id, nil if the limit
// has none here yet (addTable). Requires sh.mu held.
func (sh *shard) table(id int32) *table {
	if int(id) < len(sh.tabs) {
		return sh.tabs[id]
	}
	return nil
}

// addTable creates the shard's table of limit index id for lim.
// Requires sh.mu held.
func (sh *shard) addTable(id int32, lim *driver.Limit) *table {
	if int(id) >= len(sh.tabs) {
		sh.tabs = append(sh.tabs, make([]*table, int(id)+1-len(sh.tabs))...)
	}
	t := newTable(lim)
	sh.tabs[id] = t
	return t
}

// Decide implements limiter.Store. It never returns an error.
func (s *Store) Decide(_ context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	if len(limits) == 1 {
		// One limit: a rejection changes nothing that matters, so decide
		// and commit in one pass.
		h := s.hash(keys.For(0))
		sh := s.shardOf(h)
		id := s.handle(&limits[0])
		sh.mu.Lock()
		d := s.step(sh, id, &limits[0], h, now, n, true)
		sh.mu.Unlock()
		return d, nil
	}
	return s.decideAll(limits, keys, now, n), nil
}

// decideAll is Decide of two limits or more: each limit's shard locked
// (once), decided without committing, then, if every one allows,
// committed. Apart from Decide, so that its arrays are not on the stack
// of a call of one limit (a gRPC call's stack then stays within 8 KiB:
// rls.StreamWorkers).
func (s *Store) decideAll(limits []driver.Limit, keys driver.Keys, now time.Time, n int64) driver.Decision {
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
		d.Merge(i, s.step(shs[i], ids[i], &limits[i], hs[i], now, n, false))
	}
	if d.Allowed {
		d = driver.Decision{}
		for i := range limits {
			d.Merge(i, s.step(shs[i], ids[i], &limits[i], hs[i], now, n, true))
		}
	}
	s.unlock(locked)
	return d
}

// hashes fills hs and shs with the hash and shard of each limit's key,
// hashing one key once.
func (s *Store) hashes(keys driver.Keys, hs []uint64, shs []*shard) {
	if k, ok := keys.Single(); ok {
		h := s.hash(k)
		for i := range hs {
			hs[i], shs[i] = h, s.shardOf(h)
		}
		return
	}
	for i := range hs {
		hs[i] = s.hash(keys.For(i))
		shs[i] = s.shardOf(hs[i])
	}
}

// shardSet is the distinct shards one decision touches, locked in index
// order (every decision takes them in that order, so two never wait on
// each other in a cycle).
type shardSet struct {
	idx [limiter.MaxLimits]int
	n   int
}

// lock locks the shards of the key hashes hs, each once, in index order.
func (s *Store) lock(hs []uint64) shardSet {
	var set shardSet
	for _, h := range hs {
		i := s.shardIndex(h)
		if !slices.Contains(set.idx[:set.n], i) {
			set.idx[set.n] = i
			set.n++
		}
	}
	slices.Sort(set.idx[:set.n])
	for _, i := range set.idx[:set.n] {
		s.shards[i].mu.Lock()
	}
	return set
}

func (s *Store) unlock(set shardSet) {
	for _, i := range set.idx[:set.n] {
		s.shards[i].mu.Unlock()
	}
}

// shardIndex returns the index in s.shards of the shard of hash h.
func (s *Store) shardIndex(h uint64) int {
	if s.shardBits == 0 {
		return 0
	}
	return int(h >> (64 - s.shardBits))
}

// Peek implements limiter.Store: every limit decided without writing.
func (s *Store) Peek(_ context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	var (
		hs  [limiter.MaxLimits]uint64
		shs [limiter.MaxLimits]*shard
	)
	s.hashes(keys, hs[:len(limits)], shs[:len(limits)])
	locked := s.lock(hs[:len(limits)])
	var d driver.Decision
	for i := range limits {
		d.Merge(i, s.step(shs[i], s.handle(&limits[i]), &limits[i], hs[i], now, n, false))
	}
	s.unlock(locked)
	return d, nil
}

// Reset implements limiter.Store.
func (s *Store) Reset(_ context.Context, limits []driver.Limit, key string) error {
	h := s.hash(key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range limits {
		id := s.handle(&limits[i])
		t := sh.table(id)
		if t == nil {
			continue
		}
		if p, ok := t.find(h); ok {
			t.deleteAt(p)
			sh.keys--
		}
	}
	return nil
}

// handle returns the index of lim's table: its state name's number.
func (s *Store) handle(lim *driver.Limit) int32 { return int32(lim.StateID()) }

// step applies one limit to the key with hash h. Without commit it only
// reads. An absent key is a fresh state: read as such, and inserted only
// when committing an admission. A queued limit's key has its queue
// described to the step, and a request admitted with a Delay is queued.
// Requires sh.mu held.
func (s *Store) step(sh *shard, id int32, lim *driver.Limit, h uint64, now time.Time, n int64, commit bool) driver.Decision {
	t := sh.table(id)
	if t == nil {
		t = sh.addTable(id, lim)
	}
	if t.lim != lim {
		t.lim = lim // the janitor reads the latest parameters
	}
	i, ok := t.find(h)
	if !ok {
		if d := lim.Peek(nil, 0, nil, now, n); !commit || !d.Allowed {
			return d
		}
		// A fresh key whose request is admitted: no queue to describe,
		// and no Delay (nobody waits ahead of it).
		if i, ok = s.add(sh, t, h, now.UnixNano()); !ok {
			return lim.Step(lim.NewStates(1), 0, nil, now, n) // not remembered
		}
	}
	var q *driver.Queue
	if wq := t.queueAt(i); wq != nil {
		ns := now.UnixNano()
		if s.virtualQ {
			wq.advance(ns)
		}
		q = wq.describe(ns, lim.QueueSize())
	}
	if !commit {
		return lim.Peek(t.states, i, q, now, n)
	}
	d := lim.Step(t.states, i, q, now, n)
	if d.Allowed {
		counted(&t.words[i])
		if d.Delay > 0 {
			d.Ticket = t.enqueue(s, sh, i, now.UnixNano(), d.Delay, lim.Spacing(n))
		}
	}
	return d
}

// add inserts h into t with a fresh state and a request count of 0,
// evicting first if the shard is full, and returns its position. If
// nothing can be evicted it returns false rather than exceed the bound:
// the key's state is then not remembered. Requires sh.mu held.
func (s *Store) add(sh *shard, t *table, h uint64, now int64) (int, bool) {
	if sh.keys >= s.perShard && !s.evict(sh, h, now) {
		s.evictions.Add(1)
		s.spentEvictions.Add(1) // nothing remembered: a fresh state each time
		return 0, false
	}
	sh.keys++
	return t.insert(h), true
}

// Forget drops all state kept under the given limit names: a reload calls
// it for limits that no longer exist, so that their state is released at
// once rather than when it would have become fresh. A name used again later
// starts fresh.
func (s *Store) Forget(names ...string) {
	for _, name := range names {
		id, ok := driver.StateIDOf(name)
		if !ok {
			continue
		}
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			if t := sh.table(int32(id)); t != nil {
				sh.keys -= t.count()
				sh.tabs[id] = nil
			}
			sh.mu.Unlock()
		}
	}
}

// Len returns the number of keys tracked, all limits together.
func (s *Store) Len() int {
	total := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		total += sh.keys
		sh.mu.Unlock()
	}
	return total
}

// Evictions returns how many entries have been dropped before their state
// was fresh again, to stay within MaxKeys, or could not be stored at all
// (every candidate a busy leaky-bucket queue), since the store was
// created. Safe for concurrent use.
func (s *Store) Evictions() int64 { return s.evictions.Load() }

// SpentEvictions returns how many of Evictions were of entries that had
// used up their limit (the entry would have refused the key's next
// request of weight 1), or new entries that could not be stored: each
// gave a client its whole limit back. Safe for concurrent use.
//
// What is promised. A full shard evicts, of 8 entries it samples (a
// fresh one goes first, and is no eviction), the one charged the fewest
// requests since it was stored; of those, the one with the most left;
// then the one that becomes fresh first. A decision that admits, and a
// Charge that adds units, each count 1 whatever their weight; refused
// decisions and refunds count nothing; counts stop at 255. So an entry
// charged n times is never evicted while one charged fewer times is
// sampled with it: a flood of keys each charged fewer times than a
// client's own key never frees it, whatever the flood's costs and
// states: the flood's keys evict one another, and entries charged no
// more times than they were.
//
// What is not: entries charged equally many times are told apart by
// their state and age only, which their clients choose. A key spent by
// one request (a cost as large as its limit) is as cheap to forget as a
// flood key spent by one request; the closest to fresh goes first, so a
// key spent before the flood goes when first sampled, and one spent again
// at once after being freed is the newest and goes again only once its
// shard's entries have been replaced (of entries equal in that too, as in
// one fixed window, the new key's hash picks one), about once per MaxKeys
// flood keys, each time giving back the one request that spent it. The
// same holds for a key charged n times against a flood of keys each
// charged n times (n requests back per about n × MaxKeys flood requests).
func (s *Store) SpentEvictions() int64 { return s.spentEvictions.Load() }
