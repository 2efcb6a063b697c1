package policy

import (
	"errors"
	"fmt"
	"math"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy/config"
)

// Per-key overrides (docs/admin-api.md, …/overrides/{key}): one client of
// a policy decided under other limits than the policy's, set live through
// the admin API and kept in the store (perkey.Overrides).

// Overridable reports why p's clients cannot have overrides, or nil: an
// override replaces the limits of a policy whose limits all count the
// request under the policy's key, as it is admitted.
func (p *Policy) Overridable() error {
	switch {
	case p.Limiter == nil:
		return fmt.Errorf("policy %q has no rate limits, only a [policy.concurrency]", p.Name)
	case p.OwnKeys:
		return fmt.Errorf("policy %q has limits counted under keys of their own: an override names one client of all of them", p.Name)
	case p.Deferred != nil:
		return fmt.Errorf("policy %q has limits that read the answer (count, cost_from), which overrides do not replace", p.Name)
	}
	return nil
}

// OverrideLimiter returns the Limiter one client of p is decided by under
// o, bound to store: with Scale, p's own limits scaled (their state
// carries on: a client's counters are the same before and after), its
// shared limits as they are; with Limits, those limits in place of all of
// p's, their state apart from the policy's own.
func (p *Policy) OverrideLimiter(store limiter.Store, o perkey.Override) (*limiter.Limiter, error) {
	if err := p.Overridable(); err != nil {
		return nil, err
	}
	if len(o.Limits) > 0 {
		lims := make([]limiter.Limit, 0, len(o.Limits))
		for i, spec := range o.Limits {
			l, err := SpecLimit(spec)
			if err != nil {
				return nil, fmt.Errorf("limits[%d]: %w", i, err)
			}
			// A fixed window's limit has the bound of the policy's path, as
			// in the file (config.MaxRLSLimit in an RLS policy).
			bound := int64(limiter.MaxCount)
			if p.Match.RLS() {
				bound = config.MaxRLSLimit
			}
			if q, _ := l.Quota(); l.Algorithm() == limiter.FixedWindow && q > bound {
				return nil, fmt.Errorf("limits[%d]: fixed_window limit %d is above the maximum of %d", i, q, bound)
			}
			lims = append(lims, l)
		}
		return limiter.New(store, p.Name+"/override", lims...)
	}
	if o.Scale <= 0 || math.IsNaN(o.Scale) || math.IsInf(o.Scale, 0) {
		return nil, errors.New("an override sets limits or a scale above zero")
	}
	lims := make([]limiter.Limit, len(p.Limits))
	for i, l := range p.Limits {
		if l.Share() != "" {
			lims[i] = l
			continue
		}
		s, err := l.Scaled(o.Scale)
		if err != nil {
			return nil, fmt.Errorf("limits[%d] scaled by %g: %w", i, o.Scale, err)
		}
		lims[i] = s
	}
	return limiter.New(store, p.Name, lims...)
}

// SpecLimit builds the limit an override's spec describes, with the
// configuration's defaults (limiter.Spec): burst one period of the rate,
// a leaky bucket's max_wait its queue's drain time, one slot, cost 1. A
// zero field is the default: an override cannot write one as 0.
func SpecLimit(s perkey.LimitSpec) (limiter.Limit, error) {
	return limiter.NewLimit(limiter.Spec{Algorithm: s.Algorithm, Rate: s.Rate, Burst: s.Burst, Limit: s.Limit,
		Window: s.Window, Slots: s.Slots, Queue: s.Queue, MaxWait: s.MaxWait, Delay: s.Delay, Cost: s.Cost})
}
