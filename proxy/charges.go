package proxy

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// Limits that read the answer (docs/response-limits.md): a limit with a
// count is checked before the request is forwarded and charged when its
// answer matches; one with cost_from reserves an estimate and is charged
// or refunded the difference when the answer reports its cost.

// owed is what a request owes the limits of its policy that read the
// answer, decided by decideDeferred and settled by settle.
type owed struct {
	p  *policy.Policy
	at time.Time // when the request was admitted
	// For each deferred limit: the key it counts the request under (""
	// for none: not deferred, or skipped), the estimate, and whether the
	// estimate was reserved (cost_from without count).
	keys     [limiter.MaxLimits]string
	est      [limiter.MaxLimits]int64
	reserved [limiter.MaxLimits]bool
	// cost is what the answer was charged, for the access log; -1: none.
	cost int64
}

// decideDeferred decides a request of a policy some of whose limits read
// the answer, keys holding each limit's key (limiter.SkipKey for one the
// request is not counted under). The deferred limits come first: a count
// limit is checked (its estimate with cost_from, else one request must
// fit), a cost_from limit reserves its estimate; then the others decide
// as AllowKeys does. A rejection gives back what was reserved. The
// Decision merges every limit's, in the policy's numbering.
func (h *Handler) decideDeferred(ctx context.Context, r *http.Request, p *policy.Policy, keys []string, now time.Time) (limiter.Decision, *owed, error) {
	o := &owed{p: p, at: now, cost: -1}
	var (
		d    limiter.Decision
		have bool
		rest [limiter.MaxLimits]string
	)
	fold := func(i int, di limiter.Decision) {
		if !have {
			d, have = di, true
			d.Index = int32(i)
			return
		}
		d.Fold(i, di)
	}
	copy(rest[:], keys)
	for i, l := range p.Deferred {
		if l == nil {
			continue
		}
		rest[i] = limiter.SkipKey
		if keys[i] == limiter.SkipKey {
			continue
		}
		ch := &p.Charges[i]
		est := h.estimate(r, p, i, keys[i])
		var (
			di  limiter.Decision
			err error
		)
		if ch.Count != nil {
			n := int64(1)
			if ch.CostFrom != "" {
				n = est
			}
			di, err = h.check(ctx, o, l, i, keys[i], now, n)
		} else {
			di, err = l.Allow(ctx, keys[i], now, est)
			o.reserved[i] = err == nil && di.Allowed
		}
		if err != nil {
			h.refund(ctx, o)
			return limiter.Decision{}, nil, err
		}
		o.keys[i], o.est[i] = keys[i], est
		fold(i, di)
		if !di.Allowed {
			h.refund(ctx, o)
			return d, nil, nil
		}
	}
	if !allSkipped(rest[:len(keys)]) {
		di, err := p.Limiter.AllowKeys(ctx, rest[:len(keys)], now, 1)
		if err != nil {
			h.refund(ctx, o)
			return limiter.Decision{}, nil, err
		}
		if di.Index >= 0 {
			fold(int(di.Index), di)
		}
		if !di.Allowed {
			h.refund(ctx, o)
			return d, nil, nil
		}
	}
	if !have {
		d = limiter.Decision{Allowed: true, Index: -1}
	}
	return d, o, nil
}

// check decides whether a request of n units fits in count limit l
// (deferred limit i) for key without charging it: a Peek; when the store
// cannot answer one (Redis down), an admission under its on_error rule
// that is given back at once, so that on_error applies to count limits
// as to the others.
func (h *Handler) check(ctx context.Context, o *owed, l *limiter.Limiter, i int, key string, now time.Time, n int64) (limiter.Decision, error) {
	if !l.Degraded() {
		d, err := l.PeekN(ctx, key, now, n)
		if err == nil {
			return d, nil
		}
	}
	d, err := l.Allow(ctx, key, now, n)
	if err == nil && d.Allowed {
		o.keys[i] = key
		h.charge(ctx, o, i, -n)
	}
	return d, err
}

func allSkipped(keys []string) bool {
	for _, k := range keys {
		if k != limiter.SkipKey {
			return false
		}
	}
	return true
}

// refund gives back the estimates o reserved: the request is not
// forwarded.
func (h *Handler) refund(ctx context.Context, o *owed) {
	ctx = context.WithoutCancel(ctx) // a client that left is still given back what it reserved
	for i, l := range o.p.Deferred {
		if l != nil && o.reserved[i] {
			h.charge(ctx, o, i, -o.est[i])
			o.reserved[i] = false
		}
	}
}

// settle charges what the answer owes once it has ended (or failed, or
// never was: the request was not forwarded, and what was reserved is
// given back). It runs whatever happened, a response cut short included.
func (h *Handler) settle(x *exchange, o *owed) {
	ctx := context.Background() // the client may have gone; the charge stands
	rec := &x.w
	if !x.rec.forwarded {
		h.refund(ctx, o)
		return
	}
	for i, l := range o.p.Deferred {
		if l == nil || o.keys[i] == "" {
			continue
		}
		ch := &o.p.Charges[i]
		cost, reported := int64(0), false
		if ch.CostFrom != "" && !x.rec.unseen {
			cost, reported = reportedCost(rec.Header(), ch)
			if reported {
				h.averages.observe(l.Limits()[0].Name(), o.keys[i], cost)
			}
		}
		switch {
		case ch.Count != nil:
			// A client that left before the answer came is charged: the
			// outcome is unknown, and a client that closes every
			// connection at once would otherwise have every attempt
			// forwarded and none counted.
			// So is an answer nobody here sees (the forward-auth
			// endpoint's): the count limit then counts every request
			// let through.
			gone := x.rec.unseen || rec.head == 0 && rec.status == statusClientClosed
			if !gone && (rec.head == 0 || !ch.Count.Matches(rec.head, rec.Header())) {
				h.metrics.responseCharge(o.p.Name, chargeNotCounted)
				continue
			}
			n := l.Limits()[0].Cost()
			if ch.CostFrom != "" {
				n = o.est[i]
				if reported {
					n = cost
				}
			}
			h.charge(ctx, o, i, n)
			o.cost = max(o.cost, 0) + n
			h.metrics.responseCharge(o.p.Name, chargeCharged)
		case reported:
			h.charge(ctx, o, i, cost-o.est[i])
			o.cost = max(o.cost, 0) + cost
			h.metrics.responseCharge(o.p.Name, chargeCharged)
		default:
			// No cost reported: the estimate stands.
			o.cost = max(o.cost, 0) + o.est[i]
			h.metrics.responseCharge(o.p.Name, chargeEstimate)
		}
	}
}

// charge applies n units (a refund if negative) to deferred limit i of
// o's policy, unconditionally. A store that fails is logged: the answer
// has been given, there is nothing else to do.
func (h *Handler) charge(ctx context.Context, o *owed, i int, n int64) {
	if n == 0 {
		return
	}
	if _, err := o.p.Deferred[i].Charge(ctx, o.keys[i], h.now(), o.at, n); err != nil {
		h.log.Warn("charging a limit after the answer failed", zap.String("policy", o.p.Name), zap.Int("limit", i),
			zap.Int64("units", n), zap.Error(err))
	}
}

// reportedCost reads the cost an answer reports in ch's header or
// trailer: a whole number from 0 to limiter.MaxCount.
func reportedCost(hdr http.Header, ch *config.Charge) (int64, bool) {
	v, ok := hdr[ch.CostFrom]
	if !ok && ch.Trailer {
		// A trailer the upstream did not announce.
		v, ok = hdr[http.TrailerPrefix+ch.CostFrom]
	}
	if !ok || len(v) == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 64)
	if err != nil || n < 0 || n > limiter.MaxCount {
		return 0, false
	}
	return n, true
}

// estimate is the cost deferred limit i of p reserves for r from key:
// the request header's whole number, the key's running average, or the
// configured estimate; never more than the limit's quota, so that one
// large answer (an average pushed past the quota) cannot make a key's
// every later request one no wait could admit.
func (h *Handler) estimate(r *http.Request, p *policy.Policy, i int, key string) int64 {
	ch := &p.Charges[i]
	if ch.CostFrom == "" {
		return 1
	}
	quota, _ := p.Limits[i].Quota()
	return max(1, min(quota, h.estimateOf(r, p, i, key)))
}

func (h *Handler) estimateOf(r *http.Request, p *policy.Policy, i int, key string) int64 {
	ch := &p.Charges[i]
	switch {
	case ch.EstimateHeader != "":
		if v := r.Header.Get(ch.EstimateHeader); v != "" {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 1 {
				return min(n, limiter.MaxCount)
			}
		}
	case ch.EstimateAverage:
		if n, ok := h.averages.get(p.Deferred[i].Limits()[0].Name(), key); ok {
			return n
		}
	}
	return ch.Estimate
}

// costAverages are the running averages of the costs keys' answers
// reported, per limit state name, kept across reloads (a limit keeps its
// state name while its policy and algorithm stay).
type costAverages struct {
	mu sync.Mutex
	m  map[string]map[string]float64
}

// maxAveraged bounds the keys whose average one limit keeps; a new key
// past it replaces an arbitrary one.
const maxAveraged = 100_000

func (a *costAverages) get(limit, key string) (int64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.m[limit][key]
	if !ok {
		return 0, false
	}
	return max(1, min(limiter.MaxCount, int64(math.Ceil(v)))), true
}

// observe folds cost into key's average: exponentially weighted, each
// answer weighing 1/8; the first sets it.
func (a *costAverages) observe(limit, key string, cost int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]map[string]float64{}
	}
	m := a.m[limit]
	if m == nil {
		m = map[string]float64{}
		a.m[limit] = m
	}
	v, ok := m[key]
	if !ok {
		if len(m) >= maxAveraged {
			for k := range m {
				delete(m, k)
				break
			}
		}
		m[key] = float64(cost)
		return
	}
	m[key] = v + (float64(cost)-v)/8
}
