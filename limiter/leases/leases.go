// Package leases is the global tier of a store that many instances share:
// a limiter.Store in front of the shared one (the Redis store) that decides
// the keys with heavy traffic on this instance, from leases of units taken
// from the shared store ahead of time, and sends every other decision to
// the shared store unchanged.
//
// Only limits kept with driver.Bounded accuracy (limiter.Limit.WithAccuracy,
// the configuration's accuracy = "bounded") are leased; an Exact limit, the
// default, is decided by the shared store on every request. A key of a
// Bounded limit is leased on an instance once that instance admits at least
// Options.MinLease units of it per Options.LeaseTime: slower keys stay
// exact through the shared store.
//
// # Leases
//
// A lease is a Decide of the shared store for one limit and key with a
// weight of L, the lease's size: the shared store counts L units at once,
// exactly as it would count L requests, and the instance then admits up
// to L requests' units from it without asking. L is what the instance
// admits of the key in half a LeaseTime at the rate it admitted it lately
// (its recent share of the key's traffic), at least MinLease and at most
// the limit's MaxLease, a fraction (Options.MaxShare) of the limit's
// quota; for a fixed window, no more than the rate uses before the window
// ends, beyond what is in hand. A lease is renewed, on its own goroutine,
// when less than half of the last one is left, so that requests do not
// wait for the shared store; one renewal of a key is in flight at a time.
// A lease lasts LeaseTime (what is in hand when a renewal is granted
// lasts as long as the new lease), and a fixed window's (a calendar
// window's too) never outlives the window it was counted in. What a lease
// holds is used before anything else, even after the shared store refused
// more. When the shared store refuses a lease, a window's limit is asked
// for what it says is left (three times at most); when nothing is, the
// instance refuses the key itself until the shared store said a lease's
// worth would be free (a fixed window with a little left: its requests go
// to the shared store one by one).
//
// # The bound
//
// Every unit an instance admits from a lease was counted by the shared
// store before, so a lease can only move units later in time: what is
// admitted in any window is at most what the shared store admitted in it
// plus the units leased before the window began and used in it. An
// instance holds at most MaxLease + MaxLease/2 units of one key (the rest
// of a lease when its renewal is granted), so with N instances the units
// of a key admitted in any window of the limit (any interval, for a token
// bucket, beyond its burst and rate) exceed what an exact decision admits
// by at most
//
//	N × 1.5 × MaxLease  =  N × 1.5 × MaxShare × quota
//
// and by nothing for a fixed window, whose leases end with their window
// (up to the instances' clock skew, as for exact decisions). With N = 3
// and MaxShare = 0.01 that is 4.5% of the quota. Store latency does not
// enter the bound: a renewal granted late adds to what is left, which is
// what the 1.5 counts. Instances that start hold nothing; those that stop
// or lose their leases only admit less. A lease's unused units are not
// given back: a key can be under-admitted by as much as the bound, never
// over it.
//
// When the shared store fails, leases in hand are still used; what they
// do not cover goes to the shared store, which answers per its own rule
// (the Redis store's on_error). A degraded answer (driver.Decision.
// Degraded) is never taken as a lease.
//
// # What is approximate
//
// A locally decided request's figures (Remaining, ResetAt, Next) are the
// shared store's at the key's last lease plus the units of the lease in
// hand; a local refusal's RetryAfter is when the shared store said a
// lease's worth would be free. Peek asks the shared store, in which
// leased units count as spent. Reset forgets this instance's lease; other
// instances use theirs until they end, at most LeaseTime later.
package leases

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
	"github.com/limitproxy/limitproxy/limiter/perkey"
)

// Interface guards.
var (
	_ limiter.Store  = (*Store)(nil)
	_ driver.Charger = (*Store)(nil)
	_ perkey.Slots   = (*Store)(nil)
)

// Defaults of Options.
const (
	// DefaultLeaseTime is Options.LeaseTime's default.
	DefaultLeaseTime = time.Second
	// DefaultMaxShare is Options.MaxShare's default: a lease holds at
	// most 1% of a limit's quota.
	DefaultMaxShare = 0.01
	// DefaultMinLease is Options.MinLease's default.
	DefaultMinLease = 8
	// DefaultMaxKeys is Options.MaxKeys's default.
	DefaultMaxKeys = 100_000
	// DefaultRenewTimeout is Options.RenewTimeout's default.
	DefaultRenewTimeout = time.Second
)

// Options configures a Store. The zero value takes every default.
type Options struct {
	// LeaseTime is how long a lease lasts, and the period over which an
	// instance's share of a key's traffic is measured to size the next
	// one; 0 means DefaultLeaseTime.
	LeaseTime time.Duration
	// MaxShare is the largest lease as a fraction of a limit's quota
	// (its burst, or its limit per window), above 0 and at most 1; 0
	// means DefaultMaxShare. The bound is proportional to it.
	MaxShare float64
	// MinLease is the fewest units a lease holds: a key this instance
	// admits fewer units of per LeaseTime, or of a limit whose MaxLease
	// is smaller, is decided exactly by the shared store. 0 means
	// DefaultMinLease.
	MinLease int64
	// MaxKeys bounds the keys of Bounded limits this instance tracks;
	// past it, a new key is decided by the shared store until one that
	// holds no lease can be dropped (one holding a lease never is). 0
	// means DefaultMaxKeys.
	MaxKeys int
	// RenewTimeout bounds a renewal's call to the shared store; 0 means
	// DefaultRenewTimeout.
	RenewTimeout time.Duration
}

// Stats are a Store's counters since it was created. Decisions count
// one per Bounded limit decided, not per request.
type Stats struct {
	// Local counts Bounded-limit decisions made from a lease or a
	// local refusal, without the shared store.
	Local uint64
	// Shared counts Bounded-limit decisions the shared store made.
	Shared uint64
	// LeaseCalls counts the lease requests sent to the shared store,
	// LeasesGranted those it granted, and LeasedUnits the units those
	// held (in requests of weight 1).
	LeaseCalls, LeasesGranted, LeasedUnits uint64
	// LeaseErrors counts lease requests the shared store could not
	// decide, or decided degraded.
	LeaseErrors uint64
}

// Holding is what an instance holds in leases at one instant (Store.Holding).
type Holding struct {
	// Units are the unused units of every lease held, in units of the
	// limits (a request's weight times its limit's cost).
	Units int64
	// Keys is how many keys hold a lease.
	Keys int
	// MaxRatio is the largest share of its limit's quota one key holds:
	// this instance's part of the overshoot bound in use. Summed over
	// the instances it is the bound a key could be over by now, at most
	// N × 1.5 × MaxShare.
	MaxRatio float64
}

// Store is the global tier over a shared store: it implements
// driver.Store (and driver.Charger when the shared store does, passing
// charges on). Create it with New, one per process over the process's
// shared store. It is safe for concurrent use.
type Store struct {
	shared   driver.Store
	opt      Options
	seed     maphash.Seed
	shards   [shardCount]shard
	perShard int

	local, sharedN, leaseCalls, granted, units, leaseErrs atomic.Uint64
}

// shardCount is the number of shards of the key table (a power of two).
const shardCount = 64

type shard struct {
	mu sync.Mutex
	m  map[entryKey]*entry
	_  [40]byte // keep shards' locks on their own cache lines
}

type entryKey struct {
	id  int32
	key string
}

// entry is one Bounded limit's key on this instance. Its fields are
// guarded by its shard's lock.
type entry struct {
	sh       *shard
	binding  uint64
	cost     int64     // the limit's cost
	quota    int64     // the limit's quota
	maxLease int64     // MaxLease of the limit
	left     int64     // weight units of the lease in hand
	expires  time.Time // the lease's end (exclusive)
	window   time.Time // a fixed window lease's window end; zero otherwise
	size     int64     // the last lease's size
	// denied: refused here until then, the shared store having said so.
	denied time.Time
	// retry: no renewal before then (after a failure or a dry refusal).
	retry    time.Time
	renewing bool
	// dry: the last renewal found nothing left; dryWait is the wait the
	// shared store named then. While a renewal of a dry key is in
	// flight, its requests are refused here rather than sent one by one
	// to a store that has nothing for them.
	dry     bool
	dryWait time.Duration
	// rate: weight units admitted in the period starting at start (cur)
	// and in the one before (prev), periods of LeaseTime.
	start     time.Time
	cur, prev int64
	used      time.Time // the last decision's instant
	fig       driver.Decision
}

// New returns the global tier over shared, which every instance reaches
// (the Redis store).
func New(shared driver.Store, opt Options) *Store {
	if opt.LeaseTime <= 0 {
		opt.LeaseTime = DefaultLeaseTime
	}
	if !(opt.MaxShare > 0) || opt.MaxShare > 1 {
		opt.MaxShare = DefaultMaxShare
	}
	if opt.MinLease <= 0 {
		opt.MinLease = DefaultMinLease
	}
	if opt.MaxKeys <= 0 {
		opt.MaxKeys = DefaultMaxKeys
	}
	if opt.RenewTimeout <= 0 {
		opt.RenewTimeout = DefaultRenewTimeout
	}
	s := &Store{shared: shared, opt: opt, seed: maphash.MakeSeed(), perShard: max(1, opt.MaxKeys/shardCount)}
	for i := range s.shards {
		s.shards[i].m = map[entryKey]*entry{}
	}
	return s
}

// MaxShare returns Options.MaxShare as s applies it (its default for 0).
func (s *Store) MaxShare() float64 { return s.opt.MaxShare }

// Shared returns the store s sends exact decisions to.
func (s *Store) Shared() driver.Store { return s.shared }

// MaxLease returns the largest lease of l, in requests of weight 1 (at
// least 1): MaxShare of its quota, divided by its cost. A limit whose
// MaxLease is below MinLease is never leased.
func (s *Store) MaxLease(l *driver.Limit) int64 {
	q, _ := l.Quota()
	return max(1, int64(math.Floor(s.opt.MaxShare*float64(q)))/l.Cost())
}

// Bound returns the most a key of l can be admitted beyond an exact
// decision, in any window of the limit, with n instances: 0 for a fixed
// window, else n × 1.5 × MaxLease units of the limit, as a fraction of
// its quota; 0 for a limit that is never leased.
func (s *Store) Bound(l *driver.Limit, n int) float64 {
	if l.Accuracy() != driver.Bounded || l.Algorithm() == driver.FixedWindow || s.MaxLease(l) < s.opt.MinLease {
		return 0
	}
	q, _ := l.Quota()
	return float64(n) * 1.5 * float64(s.MaxLease(l)*l.Cost()) / float64(q)
}

// Stats returns s's counters.
func (s *Store) Stats() Stats {
	return Stats{Local: s.local.Load(), Shared: s.sharedN.Load(), LeaseCalls: s.leaseCalls.Load(),
		LeasesGranted: s.granted.Load(), LeasedUnits: s.units.Load(), LeaseErrors: s.leaseErrs.Load()}
}

// Holding returns what s holds in leases at now. It walks every tracked
// key (at most MaxKeys): call it for metrics, not per request.
func (s *Store) Holding(now time.Time) Holding {
	var h Holding
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, e := range sh.m {
			if e.left <= 0 || !now.Before(e.expires) {
				continue
			}
			h.Keys++
			h.Units += e.left * e.cost
			if e.quota > 0 {
				h.MaxRatio = max(h.MaxRatio, float64(e.left*e.cost)/float64(e.quota))
			}
		}
		sh.mu.Unlock()
	}
	return h
}

// verdict is what the tier can say of one limit of a request alone.
type verdict uint8

const (
	toShared verdict = iota // the shared store decides it
	admitted                // admitted from the lease (units taken)
	refused                 // refused here
)

// part is one limit's share of a request the tier handles.
type part struct {
	e *entry
	v verdict
	b bool // the limit is Bounded
	d driver.Decision
}

// Decide implements driver.Store: each Bounded limit whose key holds a
// lease, or is refused here, is decided here; the others, together, by
// the shared store, and the request is admitted only if all admit it
// (units taken from leases are put back when it is not).
func (s *Store) Decide(ctx context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	bounded := false
	for i := range limits {
		if limits[i].Accuracy() == driver.Bounded {
			bounded = true
			break
		}
	}
	if !bounded {
		return s.shared.Decide(ctx, limits, keys, now, n)
	}
	var buf [driver.MaxLimits]part
	ps := buf[:len(limits)]
	var toStore [driver.MaxLimits]int32 // the indices the shared store decides
	ns, refusedAt := 0, -1
	for i := range limits {
		if limits[i].Accuracy() == driver.Bounded {
			ps[i].b = true
			ps[i].e, ps[i].v, ps[i].d = s.try(&limits[i], keys.For(i), now, n)
		}
		switch ps[i].v {
		case toShared:
			toStore[ns] = int32(i)
			ns++
		case refused:
			if refusedAt < 0 {
				refusedAt = i
			}
		}
	}
	if refusedAt >= 0 {
		s.undo(limits, ps, n)
		s.count(ps, false)
		d := ps[refusedAt].d
		d.Index = int32(refusedAt)
		for i := refusedAt + 1; i < len(ps); i++ {
			if ps[i].v == refused {
				d.Fold(i, ps[i].d)
			}
		}
		return d, nil
	}
	at := -1 // the index the shared store's decision stands for
	var ds driver.Decision
	if ns > 0 {
		var err error
		ds, err = s.ask(ctx, limits, keys, toStore[:ns], now, n)
		s.count(ps, true)
		if err != nil {
			s.undo(limits, ps, n)
			return ds, err
		}
		at = int(toStore[ds.Index])
		ds.Index = int32(at)
		if ns == 1 {
			s.learn(&limits[at], keys.For(at), ps[at].e, ds, now, n)
		}
		if !ds.Allowed {
			s.undo(limits, ps, n)
			return ds, nil
		}
		for _, i := range toStore[:ns] {
			if ps[i].e != nil && ns > 1 {
				s.admit(&limits[i], keys.For(int(i)), ps[i].e, now, n)
			}
		}
	} else {
		s.count(ps, false)
	}
	// Admitted by all: the figures of the most restrictive, in order.
	var d driver.Decision
	first := true
	for i := range ps {
		var di driver.Decision
		switch {
		case ps[i].v == admitted:
			di = ps[i].d
		case i == at:
			di = ds
		default:
			continue
		}
		if first {
			d, first = di, false
			d.Index = int32(i)
		} else {
			d.Fold(i, di)
		}
	}
	return d, nil
}

// ask has the shared store decide the limits at idx (every limit, or
// some), and returns its decision with Index among idx.
func (s *Store) ask(ctx context.Context, limits []driver.Limit, keys driver.Keys, idx []int32, now time.Time, n int64) (driver.Decision, error) {
	if len(idx) == len(limits) {
		return s.shared.Decide(ctx, limits, keys, now, n)
	}
	if len(idx) == 1 {
		i := idx[0]
		return s.shared.Decide(ctx, limits[i:i+1], driver.OneKey(keys.For(int(i))), now, n)
	}
	lims := make([]driver.Limit, len(idx))
	ks := make([]string, len(idx))
	for j, i := range idx {
		lims[j], ks[j] = limits[i], keys.For(int(i))
	}
	return s.shared.Decide(ctx, lims, driver.PerLimit(ks), now, n)
}

// count adds the decisions of ps's Bounded limits to the counters; shared
// says whether the shared store decided those ps leaves to it.
func (s *Store) count(ps []part, shared bool) {
	var loc, sh uint64
	for i := range ps {
		switch {
		case ps[i].v != toShared:
			loc++
		case shared && ps[i].b:
			sh++
		}
	}
	if loc > 0 {
		s.local.Add(loc)
	}
	if sh > 0 {
		s.sharedN.Add(sh)
	}
}

// try decides limit l for key alone from what this instance holds: from
// its lease (admitted, the units taken), refused (the shared store said
// nothing is free yet), or not (toShared). It returns the key's entry,
// nil when it is not tracked (the table is full).
func (s *Store) try(l *driver.Limit, key string, now time.Time, n int64) (*entry, verdict, driver.Decision) {
	sh := s.shard(l, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.entry(sh, l, key, now)
	if e == nil {
		return nil, toShared, driver.Decision{}
	}
	e.used = now
	if e.dry && !e.window.IsZero() && !now.Before(e.window) {
		e.dry = false // a new fixed window: not dry until asked
	}
	if !now.Before(e.expires) {
		e.left = 0
	}
	if e.left < n {
		// What the lease holds was counted already: it is used even when
		// the shared store has since refused more.
		if now.Before(e.denied) {
			retry := e.denied.Sub(now)
			return e, refused, driver.Decision{RetryAfter: retry, Limit: e.fig.Limit, ResetAt: later(e.fig.ResetAt, e.denied), Next: retry}
		}
		s.maybeRenew(l, key, e, now)
		if e.dry && e.renewing {
			return e, refused, driver.Decision{RetryAfter: e.dryWait, Limit: e.fig.Limit, ResetAt: later(e.fig.ResetAt, now.Add(e.dryWait)), Next: e.dryWait}
		}
		return e, toShared, driver.Decision{}
	}
	e.left -= n
	e.count(now, n, s.opt.LeaseTime)
	s.maybeRenew(l, key, e, now)
	rem := e.fig.Remaining + e.left*e.cost
	if e.fig.Limit > 0 {
		rem = min(rem, e.fig.Limit)
	}
	return e, admitted, driver.Decision{Allowed: true, Limit: e.fig.Limit, Remaining: rem, ResetAt: e.fig.ResetAt, Next: e.fig.Next}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// undo gives back the units ps took from leases.
func (s *Store) undo(limits []driver.Limit, ps []part, n int64) {
	for i := range ps {
		if ps[i].v != admitted {
			continue
		}
		e := ps[i].e
		e.sh.mu.Lock()
		if e.binding == limits[i].Binding() {
			e.left += n
			e.cur -= n
		}
		e.sh.mu.Unlock()
	}
}

// admit counts n admitted by the shared store towards the rate of e, l's
// entry of key, which may then need a lease.
func (s *Store) admit(l *driver.Limit, key string, e *entry, now time.Time, n int64) {
	e.sh.mu.Lock()
	if e.binding == l.Binding() {
		e.count(now, n, s.opt.LeaseTime)
		s.maybeRenew(l, key, e, now)
	}
	e.sh.mu.Unlock()
}

// learn takes in the shared store's decision d of limit l alone for e's
// key (nil: not tracked): an admission counts towards the key's rate; a
// refusal of a key this instance leases is remembered until d's
// RetryAfter, so that its next requests are refused here.
func (s *Store) learn(l *driver.Limit, key string, e *entry, d driver.Decision, now time.Time, n int64) {
	if e == nil || d.Degraded {
		return
	}
	e.sh.mu.Lock()
	defer e.sh.mu.Unlock()
	if e.binding != l.Binding() {
		return
	}
	e.fig = d
	if d.Allowed {
		e.count(now, n, s.opt.LeaseTime)
		s.maybeRenew(l, key, e, now)
		return
	}
	if s.hot(l, e, now) && d.RetryAfter > 0 && d.RetryAfter != driver.Never {
		e.denied = later(e.denied, now.Add(d.RetryAfter))
	}
}

// shard returns the shard of limit l's key.
func (s *Store) shard(l *driver.Limit, key string) *shard {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(key)
	return &s.shards[(h.Sum64()+uint64(l.StateID())*0x9e3779b97f4a7c15)%shardCount]
}

// entry returns l's entry for key in sh, whose lock the caller holds,
// creating it if there is room (dropping an idle one if need be); nil if
// there is none. An entry of an earlier binding of l's name starts over:
// its lease was sized and counted for other parameters.
func (s *Store) entry(sh *shard, l *driver.Limit, key string, now time.Time) *entry {
	k := entryKey{int32(l.StateID()), key}
	e := sh.m[k]
	if e == nil {
		if len(sh.m) >= s.perShard && !s.evict(sh, now) {
			return nil
		}
		e = &entry{sh: sh}
		sh.m[k] = e
	}
	if e.binding != l.Binding() {
		q, _ := l.Quota()
		*e = entry{sh: sh, binding: l.Binding(), cost: l.Cost(), quota: q, maxLease: s.MaxLease(l), start: now}
	}
	return e
}

// evict drops, of a few entries of sh, one that holds no lease and has
// not been used for two LeaseTimes, else the least recently used of
// those that hold no lease; false if there is none (a new key is then
// decided exactly): a flood of new keys never takes a hot key's lease.
func (s *Store) evict(sh *shard, now time.Time) bool {
	var victim entryKey
	var oldest time.Time
	found, seen := false, 0
	idle := now.Add(-2 * s.opt.LeaseTime)
	for k, e := range sh.m {
		if seen++; seen > 8 {
			break
		}
		if e.renewing || e.left > 0 && now.Before(e.expires) {
			continue
		}
		if e.used.Before(idle) {
			victim, found = k, true
			break
		}
		if !found || e.used.Before(oldest) {
			victim, oldest, found = k, e.used, true
		}
	}
	if found {
		delete(sh.m, victim)
	}
	return found
}

// count adds n admitted units at now to e's rate, over periods of p.
func (e *entry) count(now time.Time, n int64, p time.Duration) {
	if d := now.Sub(e.start); d >= p {
		if d >= 2*p {
			e.prev = 0
		} else {
			e.prev = e.cur
		}
		e.cur, e.start = 0, now
	}
	e.cur += n
}

// rate returns the units e's key was admitted in about the last period.
func (e *entry) rate(now time.Time, p time.Duration) int64 {
	switch d := now.Sub(e.start); {
	case d >= 2*p:
		return 0
	case d >= p:
		return e.cur
	}
	return max(e.cur, e.prev)
}

// hot reports whether e's key is leased on this instance: its rate and
// its limit's MaxLease both reach MinLease.
func (s *Store) hot(l *driver.Limit, e *entry, now time.Time) bool {
	return e.maxLease >= s.opt.MinLease && e.rate(now, s.opt.LeaseTime) >= s.opt.MinLease
}

// maybeRenew starts a renewal of e's lease when its key is hot, less
// than half of the last lease is left, none is in flight, and none
// failed lately. The caller holds e's shard lock.
func (s *Store) maybeRenew(l *driver.Limit, key string, e *entry, now time.Time) {
	if e.renewing || now.Before(e.retry) || now.Before(e.denied) || !s.hot(l, e, now) {
		return
	}
	if e.left > 0 && now.Before(e.expires) && 2*e.left >= e.size {
		return
	}
	// What the key's rate uses in half a lease time: with the half of
	// the last lease still in hand, it is used before it ends.
	lt := s.opt.LeaseTime
	rate := e.rate(now, lt)
	size := min(e.maxLease, max(s.opt.MinLease, rate/2))
	if rest := e.window.Sub(now); rest > 0 && rest < lt {
		// A fixed window's lease ends with it: no more than the key's
		// rate uses before then, beyond what is in hand, so that
		// little is left unused.
		need := int64(float64(rate)*float64(rest)/float64(lt)+0.5) - max(0, e.left)
		size = min(size, max(s.opt.MinLease, need))
	}
	e.renewing = true
	// l points into a Limiter's limits, which are never changed.
	go s.renew(l, key, e, now, size)
}

// Grant is a lease the shared store granted, or why not (Store.Lease).
type Grant struct {
	// Units is the lease's size in requests of weight 1: what was asked
	// for, what was left of a window's limit when less, or 0.
	Units int64
	// Expires is when the lease ends: LeaseTime after the instant it
	// was taken, or the end of a fixed window's window if sooner.
	Expires time.Time
	// Decision is the shared store's decision of the lease, as Decide
	// returned it: its figures are the key's after the lease, and when
	// Units is 0 its RetryAfter is when a lease as large may be granted
	// (Never if none can be).
	Decision driver.Decision
}

// Lease asks the shared store for a lease of want units (requests of
// weight 1) of limit l for key at now: the store counts them at once, and
// the caller may admit up to Units requests of weight 1 before Expires
// without asking again; what it does not use is lost. When the store
// refuses, a window's limit (fixed or sliding) is asked once more for
// what it said is left (three times at most, others taking from it
// meanwhile); a token bucket's is not, its refill soon making a whole
// lease. A degraded decision (driver.Decision.Degraded: the store
// followed its own fallback rule) is an error wrapping
// driver.ErrStoreUnavailable: a lease is only ever taken from the shared
// state. Lease is what the tier's renewals call, and Envoy's quota
// service funds its assignments with it; l's accuracy is not read.
func (s *Store) Lease(ctx context.Context, l *driver.Limit, key string, now time.Time, want int64) (Grant, error) {
	limits := []driver.Limit{*l}
	for try := 0; ; try++ {
		s.leaseCalls.Add(1)
		d, err := s.shared.Decide(ctx, limits, driver.OneKey(key), now, want)
		if err == nil && d.Degraded {
			err = fmt.Errorf("leases: the shared store decided without its shared state: %w", driver.ErrStoreUnavailable)
		}
		if err != nil {
			s.leaseErrs.Add(1)
			return Grant{}, err
		}
		if d.Allowed {
			s.granted.Add(1)
			s.units.Add(uint64(want))
			return Grant{Units: want, Expires: s.expiry(l, d, now), Decision: d}, nil
		}
		if avail := d.Remaining / l.Cost(); try < 3 && avail > 0 && avail < want && l.Algorithm() != driver.TokenBucket {
			want = avail
			continue
		}
		return Grant{Decision: d}, nil
	}
}

// expiry returns when a lease of l granted with decision d at now ends.
func (s *Store) expiry(l *driver.Limit, d driver.Decision, now time.Time) time.Time {
	expires := now.Add(s.opt.LeaseTime)
	if l.Algorithm() == driver.FixedWindow && d.ResetAt.Before(expires) {
		// A fixed window's lease ends with the window it was counted in:
		// the shared store's ResetAt, the window's end once counted.
		expires = d.ResetAt
	}
	return expires
}

// renew asks the shared store for a lease of size units of l for key at
// now, on its own goroutine, and gives it to e.
func (s *Store) renew(l *driver.Limit, key string, e *entry, now time.Time, size int64) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opt.RenewTimeout)
	defer cancel()
	g, err := s.Lease(ctx, l, key, now, size)
	e.sh.mu.Lock()
	defer e.sh.mu.Unlock()
	if e.binding != l.Binding() {
		return // the entry started over; its renewing flag is gone
	}
	e.renewing = false
	switch {
	case err != nil:
		e.retry = now.Add(s.opt.LeaseTime)
	case g.Units > 0:
		s.grant(l, e, g, now)
		e.dry = false
	case l.Algorithm() == driver.FixedWindow && g.Decision.Remaining >= e.cost:
		// A fixed window with a little left, which others took from
		// while it was asked for, and which nothing refills before the
		// window ends: its requests go to the shared store one by one.
		e.fig = g.Decision
		e.retry = now.Add(s.opt.LeaseTime / 8)
	default:
		// Nothing left: refuse the key here until a lease's worth is.
		e.fig = g.Decision
		if r := g.Decision.RetryAfter; r != driver.Never {
			e.denied = later(e.denied, now.Add(r))
			e.retry = e.denied
			e.dry, e.dryWait = true, r
		} else {
			e.retry = now.Add(s.opt.LeaseTime)
		}
	}
}

// grant adds g, granted at now, to e. The caller holds e's shard lock.
func (s *Store) grant(l *driver.Limit, e *entry, g Grant, now time.Time) {
	if !now.Before(e.expires) {
		e.left = 0
	}
	var window time.Time
	if l.Algorithm() == driver.FixedWindow {
		// What is left of another window's lease is not carried over.
		// The shared store's ResetAt of one window moves by a little
		// from one decision to the next (the Redis store reads Redis's
		// clock and gives its instants on the caller's): another window
		// ends at least a window later.
		window = g.Decision.ResetAt
		if _, w := l.Quota(); !e.window.IsZero() && window.Sub(e.window) > w/2 {
			e.left = 0
		}
	}
	e.left += g.Units
	e.size = g.Units
	e.expires, e.window = g.Expires, window
	e.fig = g.Decision
}

// Peek implements driver.Store: the shared store's view, in which leased
// units count as spent.
func (s *Store) Peek(ctx context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	return s.shared.Peek(ctx, limits, keys, now, n)
}

// Wait implements driver.Store: only the shared store queues.
func (s *Store) Wait(ctx context.Context, d driver.Decision) error { return s.shared.Wait(ctx, d) }

// Reset implements driver.Store: it forgets this instance's lease of key
// for every limit in limits, and resets key in the shared store.
func (s *Store) Reset(ctx context.Context, limits []driver.Limit, key string) error {
	for i := range limits {
		sh := s.shard(&limits[i], key)
		sh.mu.Lock()
		delete(sh.m, entryKey{int32(limits[i].StateID()), key})
		sh.mu.Unlock()
	}
	return s.shared.Reset(ctx, limits, key)
}

// Check applies the shared store's own check of a limit's parameters,
// when it has one (the Redis store's arithmetic bounds); nil otherwise.
// A configuration applies it through the tier as it would to the shared
// store.
func (s *Store) Check(l limiter.Limit) error {
	if c, ok := s.shared.(interface{ Check(limiter.Limit) error }); ok {
		return c.Check(l)
	}
	return nil
}

// Degraded reports whether the shared store follows its fallback rule
// now (the Redis store with a breaker open); false for one that always
// decides.
func (s *Store) Degraded() bool {
	d, ok := s.shared.(interface{ Degraded() bool })
	return ok && d.Degraded()
}

// errNoSlots is Take's error over a shared store without concurrency
// slots.
var errNoSlots = errors.New("leases: the shared store does not hold concurrency slots")

// Take implements perkey.Slots by the shared store's slots: concurrency
// is never leased.
func (s *Store) Take(ctx context.Context, name, key string, limit int64, now time.Time) (perkey.Slot, bool, error) {
	sl, ok := s.shared.(perkey.Slots)
	if !ok {
		return perkey.Slot{}, false, errNoSlots
	}
	return sl.Take(ctx, name, key, limit, now)
}

// Give implements perkey.Slots by the shared store's slots.
func (s *Store) Give(slot perkey.Slot) {
	if sl, ok := s.shared.(perkey.Slots); ok {
		sl.Give(slot)
	}
}

// Charge implements driver.Charger when the shared store does: charges
// go to the shared store, exactly.
func (s *Store) Charge(ctx context.Context, limits []driver.Limit, keys driver.Keys, now, reservedAt time.Time, n int64) (driver.Decision, error) {
	c, ok := s.shared.(driver.Charger)
	if !ok {
		return driver.Decision{}, limiter.ErrNoCharger
	}
	return c.Charge(ctx, limits, keys, now, reservedAt, n)
}
