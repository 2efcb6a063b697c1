package proxy

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy"
)

// Per-key overrides (docs/admin-api.md): a client with an override in the
// store (perkey.Overrides) is decided by the limiter its override
// describes (policy.OverrideLimiter), compiled once per override and
// policy set, and answered with that limiter's RateLimit figures.

// overrideEntry is one compiled override.
type overrideEntry struct {
	setAt time.Time // the override's, to notice a replacement
	l     *limiter.Limiter
	view  *policy.Policy // the policy with the override's limits, for the RateLimit fields
}

// overridden returns the limiter and the policy view key of p is decided
// by when it has an override; ok false when it has none (or the override
// cannot apply: logged, and the policy's own limits decide). ps is p's
// state in the snapshot of the request, which caches compiled overrides
// for p (a new set starts with an empty cache, built with its snapshot).
func (h *Handler) overridden(ps *policyState, p *policy.Policy, key string) (*limiter.Limiter, *policy.Policy, bool) {
	if empty(h.overrides) {
		return nil, nil, false
	}
	o, ok := h.overrides.Get(p.Name, StoreKey(key))
	if !ok {
		return nil, nil, false
	}
	m := new(sync.Map) // no state (a caller that matched no snapshot's policy): compiled, not cached
	if ps != nil {
		m = &ps.overrides
	}
	k := key
	if v, ok := m.Load(k); ok {
		if e := v.(*overrideEntry); e.setAt.Equal(o.SetAt) {
			return e.l, e.view, e.l != nil
		}
	}
	e := &overrideEntry{setAt: o.SetAt}
	l, err := p.OverrideLimiter(p.Limiter.Store(), o)
	if chk, ok := p.Limiter.Store().(interface{ Check(limiter.Limit) error }); ok && err == nil {
		// Limits the store cannot decide (the Redis store's exact
		// arithmetic has bounds; a reload may have changed what a scale
		// multiplies) would fail every decision open.
		for _, lim := range l.Limits() {
			if err = chk.Check(lim); err != nil {
				break
			}
		}
	}
	if err != nil {
		h.log.Warn("an override cannot apply; the policy's limits decide", zap.String("policy", p.Name), zap.Error(err))
	} else {
		view := *p
		view.Limits = l.Limits()
		view.LimitNames = overrideNames(p, view.Limits)
		e.l, e.view = l, &view
	}
	m.Store(k, e)
	return e.l, e.view, e.l != nil
}

// overrideNames returns the names the limits of an override of p go by in
// the rate-limit fields: the name of the limit of p each stands for (a
// scale, or as many limits as p's, each shared as p's is), so that a
// client's items keep their names and only their q and w change; ""
// (named as config.Policy.LimitName derives) for limits that stand for
// none.
func overrideNames(p *policy.Policy, lims []limiter.Limit) []string {
	names := make([]string, len(lims))
	if len(lims) != len(p.Limits) {
		return names
	}
	for i := range lims {
		if lims[i].Share() == p.Limits[i].Share() {
			names[i] = p.LimitName(i)
		}
	}
	return names
}
