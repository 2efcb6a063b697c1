package proxy

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy/internal/clientkey"
)

// What an RLS descriptor's limits are asked with besides the generic
// steps (docs/envoy.md, "Migrating from envoyproxy/ratelimit"):
//
//   - A limit of 0 (a fixed window that admits nothing, the reference's
//     requests_per_unit: 0) refuses every descriptor, counting nothing.
//   - With [rls] compatibility = "envoyproxy/ratelimit", a policy whose
//     limits are all fixed windows counts as the reference does: every
//     hit is added to its window's count, rejected or not (Redis INCRBY),
//     and the descriptor is over a limit when the count after it exceeds
//     the limit; a hits_addend of 0 adds nothing and asks about the count
//     as it is. A rejected hit counting means that once a window has
//     refused one, it refuses every later one, whatever its cost: what
//     the reference answers. For a policy shaped as the reference's rules
//     (referenceShaped: what import writes) the count is named as the
//     reference names its Redis key, by the descriptor and its window's
//     start, not by the policy (namedCount: the store's counters, with an
//     expiry set by each addition; [rls] count_keys says whether the
//     name joins keys and values with '_' as the reference does); for
//     another it is kept in the limit's own state (the same names, so a
//     change of compatibility keeps the counters). Either way by a
//     counter that admits (a fixed window whose limit is counterLimit,
//     or a plain count) and the threshold applied here.
//   - With the same, a descriptor's own limit (Envoy's per-route
//     override) decides it instead of any policy, in a domain the
//     service knows, counted as the reference counts it: named by the
//     domain, the descriptor's entries and the unit's window start, the
//     count of any rule of the descriptor whose window starts then.

// counterLimit is the limit of the counter of a fixed window: above the
// largest threshold (a limit of an RLS policy, a descriptor's own
// requests_per_unit: config.MaxRLSLimit, the reference's uint32), so that
// a count past it is past every threshold.
const counterLimit = limiter.MaxWindowLimit

// countState names the state of the counts named by descriptor
// (countKey): one for every policy and domain, a fixed window's for each
// length, so that a descriptor is counted once whichever of them counts
// it, as the reference counts under a Redis key of the domain and the
// descriptor (its CacheKeyGenerator), not of the rule.
const countState = "rls-count"

// rlsCounters is a policy's counters, built once a snapshot.
type rlsCounters struct {
	once sync.Once
	c    []*limiter.Limiter // one per limit; nil: not every limit is a fixed window
	// count, when not nil, counts instead of c[0]: the policy is shaped
	// as a rule of the reference (one fixed window of a length, its own,
	// a key of descriptor parts in the order of the entries), so its
	// counts are named by descriptor: countKey, with inKey[i] saying
	// whether entry i's value is in the name (else its pattern as
	// written: a share_threshold wildcard's).
	count *limiter.Limiter
	inKey []bool
	// ctr is the store's counters, when it keeps them: count counts only
	// when they cannot (namedCount).
	ctr limiter.Counter
}

// counters returns p's counters (ps is p's state): one Limiter per
// limit, bound to the same state as p's own; nil unless every limit of p
// is a fixed window.
func (ps *policyState) counters(p *policy.Policy) []*limiter.Limiter {
	return ps.compatCounters(p).c
}

// compatCounters is ps.rls, built on first use (counters).
func (ps *policyState) compatCounters(p *policy.Policy) *rlsCounters {
	ps.rls.once.Do(func() {
		if p.Limiter == nil || len(p.Limits) == 0 {
			return
		}
		ls := make([]limiter.Limit, len(p.Limits))
		for i, l := range p.Limits {
			if l.Algorithm() != limiter.FixedWindow {
				return
			}
			_, w := l.Quota()
			c, err := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: counterLimit, Window: w})
			if err != nil {
				return
			}
			if s := l.Share(); s != "" {
				c = c.Shared(s)
			}
			ls[i] = c
		}
		all, err := limiter.New(p.Limiter.Store(), p.Name, ls...)
		if err != nil {
			return
		}
		cs := make([]*limiter.Limiter, len(ls))
		for i := range cs {
			cs[i] = all.Only(i)
		}
		ps.rls.c = cs
		if inKey := referenceShaped(p); inKey != nil {
			_, w := p.Limits[0].Quota()
			ps.rls.count = countLimiter(p.Limiter.Store(), w)
			ps.rls.inKey = inKey
			ps.rls.ctr, _ = p.Limiter.Store().(limiter.Counter)
		}
	})
	return &ps.rls
}

// referenceShaped returns, for a policy shaped as a rule of the
// reference, whether each entry's value is in its key; nil for another
// policy. The shape: one limit, a fixed window of a length (not a
// calendar one), not shared, and a key of descriptor parts in the order
// of the entries, each entry once, as limitproxy import writes (every
// entry, or all but share_threshold wildcards').
func referenceShaped(p *policy.Policy) []bool {
	if p.OwnKeys || len(p.Limits) != 1 || p.Limits[0].Share() != "" {
		return nil
	}
	if cal, _ := p.Limits[0].Calendar(); cal != 0 {
		return nil
	}
	pats := p.Match.Descriptor
	inKey := make([]bool, len(pats))
	last := -1
	for j, kp := range p.Key {
		if kp.Kind != config.KeyDescriptor {
			return nil
		}
		nth := kp.Nth - 1
		if kp.Nth == 0 {
			nth = 0
			for _, q := range p.Key[:j] {
				if q.Name == kp.Name && q.Nth == 0 {
					nth++
				}
			}
		}
		at := -1
		for i, pat := range pats {
			if pat.Key != kp.Name {
				continue
			}
			if nth == 0 {
				at = i
				break
			}
			nth--
		}
		if at <= last {
			return nil
		}
		inKey[at], last = true, at
	}
	return inKey
}

// countLimiter is the counter of the counts named by descriptor
// (countState) of windows of length w on store.
func countLimiter(store limiter.Store, w time.Duration) *limiter.Limiter {
	fw, err := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: counterLimit, Window: w})
	if err != nil || store == nil {
		return nil
	}
	c, err := limiter.New(store, countState, fw)
	if err != nil {
		return nil
	}
	return c
}

// countKey is the name, under countState, of the count of a descriptor
// of entries in domain: each entry's key and its value, or, where
// inKey[i] is false, its pattern's value as written (pats[i]: a
// share_threshold wildcard, whose values share one count, "*" for
// "KEY=*"; its literal copy, "KEY=\\*", is the same value); inKey nil:
// every value. With count_keys = "joined", the domain, keys and values
// joined with '_' (and each entry ended by one) as the reference's
// CacheKeyGenerator joins them, whose window start is the window's own
// here; else each length-prefixed, so that no two descriptors meet.
func countKey(mode config.CountKeys, domain string, entries []policy.DescriptorEntry, pats []config.DescriptorPattern, inKey []bool) string {
	var stack [128]byte
	b := stack[:0]
	joined := mode == config.CountKeysJoined
	if joined {
		b = append(append(b, domain...), '_')
	} else {
		b = clientkey.AppendPart(b, []byte(domain))
	}
	for i, e := range entries {
		v := e.Value
		if inKey != nil && i < len(inKey) && !inKey[i] && i < len(pats) {
			v = "*" // "KEY=*"
			if pats[i].Glob || pats[i].Exact {
				v = pats[i].Value
			}
			if e.Key != pats[i].Key {
				v = sharedJoined(e, pats[i])
			}
		}
		if joined {
			b = append(append(append(append(b, e.Key...), '_'), v...), '_')
		} else {
			b = clientkey.AppendPart(clientkey.AppendPart(b, []byte(e.Key)), []byte(v))
		}
	}
	return string(b)
}

// sharedJoined is the value a share_threshold entry e counts under when
// [rls] lookup = "joined" found pat's descriptor through e's KEY_VALUE
// with another key (e's key is not pat's): as the reference's
// GetLimit and CacheKeyGenerator, the wildcard's KEY_VALUE less e's
// "KEY_" prefix when the wildcard matched e's KEY_VALUE (which leaves a
// pattern of another key's prefix whole), else e's value (found by its
// KEY_VALUE exactly, or by its bare key: not through the wildcard).
func sharedJoined(e policy.DescriptorEntry, pat config.DescriptorPattern) string {
	full, parts := pat.Joined()
	if parts == nil || !config.JoinedMatch(parts, e.Key+"_"+e.Value) {
		return e.Value
	}
	return strings.TrimPrefix(full, e.Key+"_")
}

// askRLS asks o.p's limits about an RLS descriptor when o.rls: a limit of
// 0 refuses it, or (o.compat) its fixed windows count it as
// envoyproxy/ratelimit does.
func (h *Handler) askRLS(ctx context.Context, now time.Time, o *ruling) (limiter.Decision, error) {
	p := o.p
	view := p
	if h.overrides != nil && !p.OwnKeys {
		if _, v, ok := h.overridden(o.ps, p, o.key); ok {
			view, o.hp = v, v
		}
	}
	rc := o.ps.compatCounters(p)
	cs := rc.c
	if !o.compat || cs == nil {
		for i, zero := range p.RLS.Zero {
			if zero {
				_, w := view.Quota(i)
				return refusedByZero(i, w, now), nil
			}
		}
	}
	n := max(o.n, 1)
	if o.peek {
		n = 0
	}
	var d limiter.Decision
	for i, c := range cs {
		key := o.key
		if p.OwnKeys {
			key = o.keys[i]
		}
		q, w := view.Quota(i)
		var (
			count    int64
			degraded bool
			err      error
		)
		if rc.count != nil {
			snap := h.snap.Load()
			nc := rc.named(snap.set.Config.RLS.CountKeys, p, o.entries)
			nc.jitter = h.expiryJitter(snap)
			count, degraded, err = nc.count(ctx, now, n, false)
		} else {
			count, degraded, err = countHits(ctx, c, key, now, n)
		}
		if err != nil {
			return limiter.Decision{}, err
		}
		di := thresholdDecision(count, q, w, now)
		di.Degraded = degraded
		d.Merge(i, di)
	}
	return d, nil
}

// refusedByZero is the Decision of limit i of a window w, a limit of 0,
// at now: refused until the next window, nothing remaining.
func refusedByZero(i int, w time.Duration, now time.Time) limiter.Decision {
	end := windowEnd(now, w)
	return limiter.Decision{Index: int32(i), RetryAfter: end.Sub(now), ResetAt: end, Next: end.Sub(now)}
}

// thresholdDecision is the Decision of a fixed window of q per w whose
// count is count after the descriptor's hits, at now: allowed unless
// count exceeds q.
func thresholdDecision(count, q int64, w time.Duration, now time.Time) limiter.Decision {
	end := windowEnd(now, w)
	d := limiter.Decision{Allowed: count <= q, Limit: q, ResetAt: now}
	if count > 0 {
		d.ResetAt, d.Next = end, end.Sub(now)
	}
	if d.Allowed {
		d.Remaining = q - count
	} else {
		d.RetryAfter = end.Sub(now)
	}
	return d
}

// windowEnd is the end of the window of length w, aligned to the Unix
// epoch, that holds now.
func windowEnd(now time.Time, w time.Duration) time.Time {
	if w <= 0 {
		return now
	}
	ns := now.UnixNano()
	start := ns - ns%int64(w)
	if ns < 0 && ns%int64(w) != 0 {
		start -= int64(w)
	}
	return time.Unix(0, start+int64(w))
}

// countHits adds n hits to the counter c under key at now (n = 0: none)
// and returns the count after them: beyond counterLimit when they do not
// fit (a count that passes every threshold). degraded reports that the
// store could not count (its on_error answered).
func countHits(ctx context.Context, c *limiter.Limiter, key string, now time.Time, n int64) (count int64, degraded bool, err error) {
	if n == 0 {
		d, err := c.PeekN(ctx, key, now, 1)
		if err != nil || !d.Allowed {
			return counterLimit, d.Degraded, err
		}
		return counterLimit - 1 - d.Remaining, d.Degraded, nil
	}
	if n <= counterLimit {
		d, err := c.Allow(ctx, key, now, n)
		if err != nil {
			return 0, false, err
		}
		if d.Allowed {
			return counterLimit - d.Remaining, d.Degraded, nil
		}
		if d.Degraded {
			return counterLimit + 1, true, nil
		}
	}
	// The count would pass counterLimit: the window is in debt, past any
	// threshold, until it ends.
	if _, err := c.Charge(ctx, key, now, now, min(n, 2*counterLimit)); err != nil {
		return 0, false, err
	}
	return counterLimit + 1, false, nil
}

// decideOwnLimit decides a descriptor by its own limit d.Limit
// (compatibility = "envoyproxy/ratelimit", a known domain), as the
// reference does: no shadow mode, no name, no replaces; counted under
// the domain, the entries and the unit's window. a.o.p is the policy that
// matched the descriptor, if any: its state counts it when its one limit
// is a fixed window of that length counting under every entry's value.
func (h *Handler) decideOwnLimit(ctx context.Context, snap *snapshot, domain string, d *Descriptor, now time.Time, a *rlsDecided) {
	q, w := d.Limit.RequestsPerUnit, d.Limit.Unit
	n := max(d.Cost, 1)
	if a.o.peek {
		n = 0
	}
	nc := ownCount(snap, domain, d, a)
	nc.jitter = h.expiryJitter(snap)
	if nc.store == nil {
		// Nothing to count with: OK without a limit.
		a.own.Decision = Allowed
		return
	}
	v := a.own
	v.Limited, v.Quota, v.Window = true, q, w
	count, _, err := nc.count(ctx, now, n, false)
	if err != nil {
		h.log.Error("limiter failed; descriptor allowed", zap.String("domain", domain), zap.Error(err))
		v.Decision, v.Limited = Allowed, false
		return
	}
	dec := thresholdDecision(count, q, w, now)
	v.Remaining, v.ResetAfter = dec.Remaining, dec.ResetAt.Sub(now)
	if dec.Allowed {
		v.Decision = Allowed
		return
	}
	v.Decision, v.Over, v.Remaining = Rejected, true, 0
	a.over = true
}

// ownCount is the count of d's own limit: named by descriptor
// (countKey, every value) and the unit's window, which is a.o.p's count
// when that policy counts so with a window of that length (and, with the
// store's counters, any count of the descriptor whose window starts
// when the unit's does), as the reference keeps one count per descriptor
// and window start. Its store is nil when there is none.
func ownCount(snap *snapshot, domain string, d *Descriptor, a *rlsDecided) namedCount {
	mode := snap.set.Config.RLS.CountKeys
	nc := namedCount{store: snap.set.Store(), name: countKey(mode, domain, d.Entries, nil, nil), w: d.Limit.Unit, joined: mode == config.CountKeysJoined}
	nc.ctr, _ = nc.store.(limiter.Counter)
	if p := a.o.p; p != nil {
		if rc := a.o.ps.compatCounters(p); rc.count != nil {
			if _, pw := p.Limits[0].Quota(); pw == nc.w {
				nc.fw = rc.count
			}
		}
	}
	return nc
}

// namedCount is a count named by descriptor (countKey) of a window of
// length w. With the store's counters (ctr) it counts as the reference
// does: under the name and the start of the window that holds now (Unix
// seconds, a multiple of w's), expiring w after each addition, so that
// two windows that start at one instant (a minute's and an hour's at
// the hour) count together, and whichever was added to last says when
// the count ends, as the reference's EXPIRE on each INCRBY does. Without
// them, for a window not of whole seconds, or when they cannot count
// (Redis down), a fixed window of length w counts it under the name
// (fw, or one built on store), which follows the store's on_error.
type namedCount struct {
	store  limiter.Store
	ctr    limiter.Counter
	fw     *limiter.Limiter
	name   string
	w      time.Duration
	joined bool
	// jitter, when not nil, is what each addition adds to the count's
	// expiry ([rls] expiration_jitter_max).
	jitter func() time.Duration
}

// expiryJitter is the jitter of an addition's expiry under snap's [rls]
// expiration_jitter_max, as the reference's
// EXPIRATION_JITTER_MAX_SECONDS: a random whole number of seconds from 0
// to the maximum's less one (its rand.Int63n); nil without one.
func (h *Handler) expiryJitter(snap *snapshot) func() time.Duration {
	sec := int64(snap.set.Config.RLS.ExpirationJitterMax / time.Second)
	if sec <= 0 {
		return nil
	}
	return func() time.Duration { return time.Duration(h.jitter(sec)) * time.Second }
}

// named is the count of a descriptor of entries under p, which rc counts
// (rc.count is not nil), in count_keys mode.
func (rc *rlsCounters) named(mode config.CountKeys, p *policy.Policy, entries []policy.DescriptorEntry) namedCount {
	_, w := p.Limits[0].Quota()
	return namedCount{store: p.Limiter.Store(), ctr: rc.ctr, fw: rc.count, name: countKey(mode, p.Match.RLSDomain, entries, p.Match.Descriptor, rc.inKey), w: w, joined: mode == config.CountKeysJoined}
}

// count adds n hits at now and returns the count after them (n = 0:
// none, but the expiry is set all the same, as the reference's INCRBY 0
// and EXPIRE); read reads it, changing nothing (the reference's GET).
// degraded reports that the store could not count (its on_error
// answered).
func (c namedCount) count(ctx context.Context, now time.Time, n int64, read bool) (count int64, degraded bool, err error) {
	if sec := int64(c.w / time.Second); c.ctr != nil && sec >= 1 && c.w%time.Second == 0 {
		var stack [20]byte
		start := strconv.AppendInt(stack[:0], now.Unix()/sec*sec, 10)
		var key string
		if c.joined {
			key = c.name + string(start)
		} else {
			key = string(clientkey.AppendPart([]byte(c.name), start))
		}
		if read {
			count, err = c.ctr.Count(ctx, key, now)
		} else {
			ttl := c.w
			if c.jitter != nil {
				ttl += c.jitter()
			}
			count, err = c.ctr.AddCount(ctx, key, n, ttl, now)
		}
		if err == nil {
			return count, false, nil
		}
	}
	fw := c.fw
	if fw == nil {
		if fw = countLimiter(c.store, c.w); fw == nil {
			return 0, false, errors.New("rls: no store to count with")
		}
	}
	if read {
		n = 0
	}
	return countHits(ctx, fw, c.name, now, n)
}

// stopIncrement is envoyproxy/ratelimit's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT ([rls]
// stop_increment_when_over_limit, with compatibility): before anything
// is counted, each descriptor counted as the reference counts (a fixed
// window's counter, or its own limit) has its count read; one whose hits
// would take a count past its limit is "near" (the reference's
// IsOverLimitThresholdReached on a GET of its key). When one is, only
// the near descriptors are counted (getHitsAddend): the others become
// checks of their count as it is (a.o.peek), which answers them as the
// reference's INCRBY of 0 does. The reads and the counting that follows
// are not one atomic step, as the reference's GET and INCRBY pipelines
// are not.
func (h *Handler) stopIncrement(ctx context.Context, snap *snapshot, domain string, ds []Descriptor, all []rlsDecided, replacing []string, now time.Time) error {
	var stack [8]bool
	near := stack[:0] // keep each descriptor's counting
	if len(ds) > len(stack) {
		near = make([]bool, 0, len(ds))
	}
	anyNear := false
	for i := range ds {
		a := &all[i]
		n := max(ds[i].Cost, 1)
		if a.o.peek {
			n = 0
		}
		// keep: counted as it asks, near or not counted as the reference
		// counts (no counter: its own decision, untouched).
		nr, keep := false, true
		switch p := a.o.p; {
		case a.own != nil:
			if nc := ownCount(snap, domain, &ds[i], a); nc.store != nil {
				count, _, err := nc.count(ctx, now, 0, true)
				if err != nil {
					return err
				}
				nr = count+n > ds[i].Limit.RequestsPerUnit
				keep = nr
			}
		case p == nil, len(replacing) > 0 && replaced(p, replacing), p.RLS.Unlimited, len(p.Limits) == 0:
		default:
			rc := a.o.ps.compatCounters(p)
			cs := rc.c
			if cs == nil {
				break
			}
			var keys [limiter.MaxLimits]string
			es := ds[i].Entries
			if snap.set.Config.RLS.Lookup == config.LookupJoined {
				var buf [8]policy.DescriptorEntry
				es = policy.SeenEntries(p, es, buf[:])
			}
			DescriptorKeys(p, es, keys[:])
			view := p
			if h.overrides != nil && !p.OwnKeys {
				if _, v, ok := h.overridden(a.o.ps, p, keys[0]); ok {
					view = v
				}
			}
			for j, c := range cs {
				var (
					count int64
					err   error
				)
				if rc.count != nil {
					count, _, err = rc.named(snap.set.Config.RLS.CountKeys, p, ds[i].Entries).count(ctx, now, 0, true)
				} else {
					count, _, err = countHits(ctx, c, keys[j], now, 0)
				}
				if err != nil {
					return err
				}
				if q, _ := view.Quota(j); count+n > q {
					nr = true
				}
			}
			keep = nr
		}
		near = append(near, keep)
		anyNear = anyNear || nr
	}
	if anyNear {
		for i, nr := range near {
			if !nr {
				all[i].o.peek = true
			}
		}
	}
	return nil
}
