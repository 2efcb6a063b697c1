// Package memstore is limitproxy's embedded, in-memory limiter.Store.
//
// State is sharded by a hash of the client key: each shard has its own lock
// and, per limit, a compact open-addressing table whose slots hold the
// algorithm's state inline (24 bytes a key for a token bucket, fixed window
// or two-counter sliding window). All limits of one client key live in the
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
	"math"
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
}

type shard struct {
	mu   sync.Mutex
	keys int // entries in all tabs
	// The requests waiting in this shard's leaky-bucket queues, by ticket:
	// the shard's index in the top bits (ticketBase), then a count.
	waiters    map[uint64]*waiter
	ticketBase uint64
	nextTicket uint64
	tabs       []*tables // by limit index; nil until the limit is used here
	sweptAt    int64     // Unix ns of evict's last sweep of this shard
	_          [64]byte  // keep shards' locks on separate cache lines
}

// tables holds one limit's state in one shard. Only the table of the
// limit's algorithm (and, for sliding windows, its slot count) is used.
type tables struct {
	lim  *driver.Limit // the parameters last used, for the janitor
	tb   table[driver.TokenBucketState]
	fw   table[driver.FixedWindowState]
	sl   table[driver.SlidingLogState]
	lb   table[leakyEntry]
	sw2  table[swCounts2]
	sw8  table[swCounts8]
	sw65 table[swCounts65]
}

// Sliding-window states with inline counters, sized for the slot counts
// SlidingWindowCounters asks for: 2 (slots = 1), up to 8, up to 65.
type (
	swCounts2 struct {
		slot int64
		c    [2]uint32
	}
	swCounts8 struct {
		slot int64
		c    [8]uint32
	}
	swCounts65 struct {
		slot int64
		c    [limiter.MaxSlots + 1]uint32
	}
)

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

// tablesFor returns the shard's tables for limit index id, creating them.
// Requires sh.mu held.
func (sh *shard) tablesFor(id int32) *tables {
	if int(id) >= len(sh.tabs) {
		sh.tabs = append(sh.tabs, make([]*tables, int(id)+1-len(sh.tabs))...)
	}
	t := sh.tabs[id]
	if t == nil {
		t = &tables{}
		sh.tabs[id] = t
	}
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
	return d, nil
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
		if int(id) >= len(sh.tabs) || sh.tabs[id] == nil || sh.tabs[id].lim == nil {
			continue
		}
		t := sh.tabs[id]
		for p := 0; p < t.size(); p++ {
			if t.hashAt(p) == h {
				t.deleteAt(p)
				sh.keys--
				break
			}
		}
	}
	return nil
}

// handle returns the index of lim's tables: its state name's number.
func (s *Store) handle(lim *driver.Limit) int32 { return int32(lim.StateID()) }

// step applies one limit to the key with hash h. Without commit it only
// reads. An absent key is a fresh state: read from a zero value, and
// inserted only when committing an admission. Requires sh.mu held.
//
// The cases repeat one pattern with a different state type on purpose: a
// helper taking the step as a closure cost about 10 ns a decision
// (BenchmarkHotKey), an eighth of the whole.
func (s *Store) step(sh *shard, id int32, lim *driver.Limit, h uint64, now time.Time, n int64, commit bool) driver.Decision {
	t := sh.tablesFor(id)
	if t.lim != lim {
		t.lim = lim // the janitor reads the latest parameters
	}
	ns := now.UnixNano()
	switch lim.Algorithm() {
	case limiter.TokenBucket:
		st, w := get(&t.tb, h)
		if st == nil {
			var fresh driver.TokenBucketState
			if d := lim.PeekTokenBucket(&fresh, now, n); !commit || !d.Allowed {
				return d
			}
			st, w = add(s, sh, &t.tb, h, ns)
		}
		if !commit {
			return lim.PeekTokenBucket(st, now, n)
		}
		d := lim.StepTokenBucket(st, now, n)
		if d.Allowed {
			counted(w)
		}
		return d
	case limiter.FixedWindow:
		st, w := get(&t.fw, h)
		if st == nil {
			var fresh driver.FixedWindowState
			if d := lim.PeekFixedWindow(&fresh, now, n); !commit || !d.Allowed {
				return d
			}
			st, w = add(s, sh, &t.fw, h, ns)
		}
		if !commit {
			return lim.PeekFixedWindow(st, now, n)
		}
		d := lim.StepFixedWindow(st, now, n)
		if d.Allowed {
			counted(w)
		}
		return d
	case limiter.SlidingLog:
		st, w := get(&t.sl, h)
		if st == nil {
			var fresh driver.SlidingLogState
			if d := lim.PeekSlidingLog(&fresh, now, n); !commit || !d.Allowed {
				return d
			}
			st, w = add(s, sh, &t.sl, h, ns)
		}
		if !commit {
			return lim.PeekSlidingLog(st, now, n)
		}
		d := lim.StepSlidingLog(st, now, n)
		if d.Allowed {
			counted(w)
		}
		return d
	case limiter.LeakyBucket:
		st, w := get(&t.lb, h)
		if st == nil {
			var fresh leakyEntry
			if d := lim.PeekLeakyBucket(&fresh.s, nil, now, n); !commit || !d.Allowed {
				return d
			}
			st, w = add(s, sh, &t.lb, h, ns)
		}
		var q *driver.LeakyQueue
		var v driver.LeakyQueue
		if st.q != nil && s.virtualQ {
			st.q.advance(ns)
		}
		if st.q != nil {
			v = st.view(ns, lim.LeakyBucket().Queue)
			q = &v
		}
		if !commit {
			return lim.PeekLeakyBucket(&st.s, q, now, n)
		}
		d := lim.StepLeakyBucket(&st.s, q, now, n)
		if d.Allowed {
			counted(w)
		}
		if d.Allowed && d.Delay > 0 {
			d.Ticket = st.enqueue(s, sh, ns, d.Delay, lim.LeakyBucketSpacing(n))
		}
		return d
	case limiter.SlidingWindow:
		k := lim.SlidingWindowCounters()
		switch {
		case k <= 2:
			return stepWindow(s, sh, &t.sw2, lim, h, now, ns, n, commit)
		case k <= 8:
			return stepWindow(s, sh, &t.sw8, lim, h, now, ns, n, commit)
		default:
			return stepWindow(s, sh, &t.sw65, lim, h, now, ns, n, commit)
		}
	}
	return driver.Decision{}
}

// stepWindow is step for sliding windows, whose states differ only in how
// many counters they hold inline.
func stepWindow[S swCounts2 | swCounts8 | swCounts65](s *Store, sh *shard, tab *table[S], lim *driver.Limit, h uint64, now time.Time, ns, n int64, commit bool) driver.Decision {
	st, w := get(tab, h)
	if st == nil {
		var fresh S
		if d := lim.PeekSlidingWindow(view(&fresh, lim), now, n); !commit || !d.Allowed {
			return d
		}
		st, w = add(s, sh, tab, h, ns)
	}
	if !commit {
		return lim.PeekSlidingWindow(view(st, lim), now, n)
	}
	d := lim.StepSlidingWindow(view(st, lim), now, n)
	if d.Allowed {
		counted(w)
	}
	return d
}

// view returns the limiter's view of an inline sliding-window state.
func view[S swCounts2 | swCounts8 | swCounts65](st *S, lim *driver.Limit) driver.SlidingWindowState {
	k := lim.SlidingWindowCounters()
	switch st := any(st).(type) {
	case *swCounts2:
		return driver.SlidingWindowState{Slot: &st.slot, Counts: st.c[:k]}
	case *swCounts8:
		return driver.SlidingWindowState{Slot: &st.slot, Counts: st.c[:k]}
	case *swCounts65:
		return driver.SlidingWindowState{Slot: &st.slot, Counts: st.c[:k]}
	}
	panic("unreachable")
}

// get returns h's state in tab and its slot's word (for counted), or nil
// if h is absent. Both stay valid until tab's next insert.
func get[S any](tab *table[S], h uint64) (*S, *uint64) {
	if i, ok := tab.find(h); ok {
		return &tab.slots[i].s, &tab.slots[i].h
	}
	return nil, nil
}

// add inserts h into tab with a zero (fresh) state and a request count of
// 0, evicting first if the shard is full, and returns the state and its
// slot's word (for counted). If nothing can be evicted it returns a state
// that is not remembered, and a nil word, rather than exceed the bound.
// Requires sh.mu held.
func add[S any](s *Store, sh *shard, tab *table[S], h uint64, now int64) (*S, *uint64) {
	if sh.keys >= s.perShard && !s.evict(sh, h, now) {
		s.evictions.Add(1)
		s.spentEvictions.Add(1) // nothing remembered: a fresh state each time
		return new(S), nil
	}
	i := tab.insert(h)
	sh.keys++
	return &tab.slots[i].s, &tab.slots[i].h
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
			if int(id) < len(sh.tabs) && sh.tabs[id] != nil {
				sh.keys -= sh.tabs[id].count()
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

// left returns what the entry at position i of a limit's tables has left
// of its limit at now (Unix ns) after a request of weight 1 (the
// decision's Remaining), or -1 if it would refuse that request (the key
// is spent). Requires the shard's lock; not for a busy leaky-bucket
// queue.
func (t *tables) left(i int, now int64) int64 {
	lim := t.lim
	at := time.Unix(0, now)
	var d driver.Decision
	switch lim.Algorithm() {
	case limiter.TokenBucket:
		d = lim.PeekTokenBucket(&t.tb.slots[i].s, at, 1)
	case limiter.FixedWindow:
		d = lim.PeekFixedWindow(&t.fw.slots[i].s, at, 1)
	case limiter.SlidingLog:
		d = lim.PeekSlidingLog(&t.sl.slots[i].s, at, 1)
	case limiter.LeakyBucket:
		e := &t.lb.slots[i].s
		var q *driver.LeakyQueue
		if e.q != nil {
			q = &driver.LeakyQueue{Gate: time.Unix(0, e.q.gateAt)}
		}
		d = lim.PeekLeakyBucket(&e.s, q, at, 1)
	case limiter.SlidingWindow:
		switch {
		case len(t.sw2.slots) > 0:
			d = lim.PeekSlidingWindow(view(&t.sw2.slots[i].s, lim), at, 1)
		case len(t.sw8.slots) > 0:
			d = lim.PeekSlidingWindow(view(&t.sw8.slots[i].s, lim), at, 1)
		default:
			d = lim.PeekSlidingWindow(view(&t.sw65.slots[i].s, lim), at, 1)
		}
	}
	if !d.Allowed {
		return -1
	}
	return d.Remaining
}

// idleAt returns when the entry at position i of a limit's tables becomes
// fresh (Unix ns); math.MaxInt64 for an entry that must not be dropped (a
// leaky bucket with waiters). Requires the shard's lock.
func (t *tables) idleAt(i int) int64 {
	lim := t.lim
	var at time.Time
	switch lim.Algorithm() {
	case limiter.TokenBucket:
		at = lim.TokenBucketIdleAt(&t.tb.slots[i].s)
	case limiter.FixedWindow:
		at = lim.FixedWindowIdleAt(&t.fw.slots[i].s)
	case limiter.SlidingLog:
		at = lim.SlidingLogIdleAt(&t.sl.slots[i].s)
	case limiter.LeakyBucket:
		return t.lb.slots[i].s.idleAt(lim)
	case limiter.SlidingWindow:
		switch {
		case len(t.sw2.slots) > 0:
			at = lim.SlidingWindowIdleAt(view(&t.sw2.slots[i].s, lim))
		case len(t.sw8.slots) > 0:
			at = lim.SlidingWindowIdleAt(view(&t.sw8.slots[i].s, lim))
		default:
			at = lim.SlidingWindowIdleAt(view(&t.sw65.slots[i].s, lim))
		}
	}
	if at.IsZero() {
		return math.MinInt64
	}
	return at.UnixNano()
}

// size returns the capacity of the table in use.
func (t *tables) size() int {
	switch t.lim.Algorithm() {
	case limiter.TokenBucket:
		return len(t.tb.slots)
	case limiter.FixedWindow:
		return len(t.fw.slots)
	case limiter.SlidingLog:
		return len(t.sl.slots)
	case limiter.LeakyBucket:
		return len(t.lb.slots)
	case limiter.SlidingWindow:
		return len(t.sw2.slots) + len(t.sw8.slots) + len(t.sw65.slots)
	}
	return 0
}

// count returns the entries of the table in use.
func (t *tables) count() int {
	return t.tb.n + t.fw.n + t.sl.n + t.lb.n + t.sw2.n + t.sw8.n + t.sw65.n
}

// hashAt returns the hash stored at position i (0 if empty).
func (t *tables) hashAt(i int) uint64 { return t.wordAt(i) &^ countMask }

// requestsAt returns how many requests were charged to the entry at
// position i since it was inserted, at most countMax.
func (t *tables) requestsAt(i int) int64 { return int64(t.wordAt(i) & countMask) }

// wordAt returns the word of the slot at position i: the hash with the
// request count in its low bits (0 if empty).
func (t *tables) wordAt(i int) uint64 {
	switch t.lim.Algorithm() {
	case limiter.TokenBucket:
		return t.tb.slots[i].h
	case limiter.FixedWindow:
		return t.fw.slots[i].h
	case limiter.SlidingLog:
		return t.sl.slots[i].h
	case limiter.LeakyBucket:
		return t.lb.slots[i].h
	case limiter.SlidingWindow:
		switch {
		case len(t.sw2.slots) > 0:
			return t.sw2.slots[i].h
		case len(t.sw8.slots) > 0:
			return t.sw8.slots[i].h
		default:
			return t.sw65.slots[i].h
		}
	}
	return 0
}

// deleteAt removes the entry at position i.
func (t *tables) deleteAt(i int) {
	switch t.lim.Algorithm() {
	case limiter.TokenBucket:
		t.tb.deleteAt(i)
	case limiter.FixedWindow:
		t.fw.deleteAt(i)
	case limiter.SlidingLog:
		t.sl.deleteAt(i)
	case limiter.LeakyBucket:
		t.lb.deleteAt(i)
	case limiter.SlidingWindow:
		switch {
		case len(t.sw2.slots) > 0:
			t.sw2.deleteAt(i)
		case len(t.sw8.slots) > 0:
			t.sw8.deleteAt(i)
		default:
			t.sw65.deleteAt(i)
		}
	}
}

func (t *tables) shrink() {
	t.tb.shrink()
	t.fw.shrink()
	t.sl.shrink()
	t.lb.shrink()
	t.sw2.shrink()
	t.sw8.shrink()
	t.sw65.shrink()
}
