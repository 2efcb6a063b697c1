package policy

import (
	"errors"
	"fmt"
	"math"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/perkey"
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
		s, err := scaleLimit(l, o.Scale)
		if err != nil {
			return nil, fmt.Errorf("limits[%d] scaled by %g: %w", i, o.Scale, err)
		}
		lims[i] = s
	}
	return limiter.New(store, p.Name, lims...)
}

// scaled multiplies a count by s, rounding to the nearest, at least 1.
func scaled(n int64, s float64) int64 {
	v := math.Round(float64(n) * s)
	if v >= limiter.MaxCount {
		return limiter.MaxCount
	}
	return max(1, int64(v))
}

// scaleLimit returns l with its quota scaled by s: the rate and burst, or
// the limit per window; a leaky bucket's rate (its queue stays).
func scaleLimit(l limiter.Limit, s float64) (limiter.Limit, error) {
	switch l.Algorithm() {
	case limiter.TokenBucket:
		p := l.Params().(limiter.TokenBucketParams)
		p.Rate.N, p.Burst = scaled(p.Rate.N, s), scaled(p.Burst, s)
		return limiter.NewTokenBucket(p)
	case limiter.LeakyBucket:
		p := l.Params().(limiter.LeakyBucketParams)
		p.Rate.N = scaled(p.Rate.N, s)
		return limiter.NewLeakyBucket(p)
	case limiter.FixedWindow:
		p := l.Params().(limiter.FixedWindowParams)
		p.Limit = scaled(p.Limit, s)
		return limiter.NewFixedWindow(p)
	case limiter.SlidingLog:
		p := l.Params().(limiter.SlidingLogParams)
		p.Limit = min(scaled(p.Limit, s), limiter.MaxSlidingLogLimit)
		return limiter.NewSlidingLog(p)
	case limiter.SlidingWindow:
		p := l.Params().(limiter.SlidingWindowParams)
		p.Limit = scaled(p.Limit, s)
		return limiter.NewSlidingWindow(p)
	}
	return limiter.Limit{}, fmt.Errorf("algorithm %v", l.Algorithm())
}

// SpecLimit builds the limit an override's spec describes, with the
// configuration's defaults: burst one period of the rate, a leaky
// bucket's max_wait its queue's drain time, one slot, cost 1.
func SpecLimit(s perkey.LimitSpec) (limiter.Limit, error) {
	switch s.Algorithm {
	case limiter.TokenBucket:
		burst := s.Burst
		if burst == 0 {
			burst = s.Rate.N
		}
		return limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: s.Rate, Burst: burst, Cost: s.Cost})
	case limiter.LeakyBucket:
		p := limiter.LeakyBucketParams{Rate: s.Rate, Queue: s.Queue, Delay: s.Delay, Cost: s.Cost}
		p.MaxWait = s.MaxWait
		if p.MaxWait == 0 {
			p.MaxWait = p.DrainTime()
		}
		return limiter.NewLeakyBucket(p)
	case limiter.FixedWindow:
		return limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: s.Limit, Window: s.Window, Cost: s.Cost})
	case limiter.SlidingLog:
		return limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: s.Limit, Window: s.Window, Cost: s.Cost})
	case limiter.SlidingWindow:
		slots := int(s.Slots)
		if slots == 0 {
			slots = 1
		}
		return limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: s.Limit, Window: s.Window, Slots: slots, Cost: s.Cost})
	}
	return limiter.Limit{}, fmt.Errorf("unknown algorithm %v", s.Algorithm)
}
