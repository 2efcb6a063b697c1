package limitertest

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
)

// The reference models: each algorithm written as naively as docs/algorithms.md states
// it, with no attention to memory or speed and exact arithmetic throughout,
// so that any decision of a Store that differs from them is a bug in the
// Store or the limiter. Times are Unix nanoseconds; traces given to the
// models never go backwards (that rule is tested by step tables).

// result is what the suite compares: admission, Retry-After, Remaining,
// and next: the time until Remaining grows (draft-10's t), 0 when it
// cannot.
type result struct {
	allowed   bool
	retry     time.Duration
	remaining int64
	next      time.Duration
}

type model interface {
	allow(now int64, units int64) result
}

// modelsByAlgorithm holds, for every algorithm, how RunModel and
// RunCharge draw a random limit of it and the model that limit's
// decisions must agree with; a new algorithm's model goes here, beside
// its model type. The leaky bucket has none: its real queue is tested
// against its schedule instead (RunLeakyQueue, RunLeakyVirtual), and its
// decisions step by step.
var modelsByAlgorithm = map[limiter.Algorithm]modelled{
	limiter.TokenBucket:   {drawTokenBucket},
	limiter.LeakyBucket:   {},
	limiter.FixedWindow:   {drawFixedWindow},
	limiter.SlidingLog:    {drawSlidingLog},
	limiter.SlidingWindow: {drawSlidingWindow},
}

// modelled is an algorithm as the model traces see it.
type modelled struct {
	// draw returns a limit of the algorithm of the given capacity (a
	// burst or a limit), cost and period (of its rate, window or slot),
	// drawing what else it needs from rng, with its model; grid is the
	// time scale its edges fall on, window how long a reservation counts.
	// nil for an algorithm without a model.
	draw func(rng *rand.Rand, capacity, cost int64, period time.Duration) (lim limiter.Limit, m func() chargeModel, grid, window int64, err error)
}

func drawTokenBucket(rng *rand.Rand, capacity, cost int64, period time.Duration) (limiter.Limit, func() chargeModel, int64, int64, error) {
	p := limiter.TokenBucketParams{Rate: limiter.Rate{N: 1 + rng.Int64N(20), Per: period}, Burst: capacity, Cost: cost}
	lim, err := limiter.NewTokenBucket(p)
	return lim, func() chargeModel { return &tbModel{p: p} }, int64(p.Rate.Per) / p.Rate.N, int64(p.Rate.Per) * capacity / p.Rate.N, err
}

func drawFixedWindow(_ *rand.Rand, capacity, cost int64, period time.Duration) (limiter.Limit, func() chargeModel, int64, int64, error) {
	p := limiter.FixedWindowParams{Limit: capacity, Window: period, Cost: cost}
	lim, err := limiter.NewFixedWindow(p)
	return lim, func() chargeModel { return &fwModel{p: p} }, int64(period), int64(period), err
}

func drawSlidingLog(_ *rand.Rand, capacity, cost int64, period time.Duration) (limiter.Limit, func() chargeModel, int64, int64, error) {
	p := limiter.SlidingLogParams{Limit: capacity, Window: period, Cost: cost}
	lim, err := limiter.NewSlidingLog(p)
	return lim, func() chargeModel { return &slModel{p: p} }, int64(period), int64(period), err
}

func drawSlidingWindow(rng *rand.Rand, capacity, cost int64, period time.Duration) (limiter.Limit, func() chargeModel, int64, int64, error) {
	slots := []int{1, 2, 3, 6, 10}[rng.IntN(5)]
	p := limiter.SlidingWindowParams{Limit: capacity, Window: period * time.Duration(slots), Slots: slots, Cost: cost}
	lim, err := limiter.NewSlidingWindow(p)
	return lim, func() chargeModel { return &swModel{p: p} }, int64(period), int64(period) * int64(slots), err
}

// modelOf returns alg's entry in modelsByAlgorithm, failing t if it has none.
func modelOf(t *testing.T, alg limiter.Algorithm) modelled {
	t.Helper()
	m, ok := modelsByAlgorithm[alg]
	if !ok {
		t.Fatalf("%v has no entry in limitertest's modelsByAlgorithm (model.go)", alg)
	}
	return m
}

// chargeModel is a model that can also be charged after the fact
// (driver.Charger): charge applies units (signed, the limit's own units)
// at now for a request reserved at reservedAt, and returns the state
// after it, as a Charge's Decision gives it (always allowed, no
// Retry-After), and whether the debt bound capped it. Every model writes
// the rules of driver.Charger as plainly as it can.
type chargeModel interface {
	model
	charge(now, reservedAt, units int64) (result, bool)
}

// tbModel: "the bucket starts full with b tokens and refills continuously at
// r tokens/s up to b. A request of cost c is admitted iff tokens ≥ c, which
// then drop by c. Retry-After = (c − tokens)/r."
type tbModel struct {
	p      limiter.TokenBucketParams
	tokens *big.Rat
	last   int64
}

// refill brings the bucket to now: tokens += (now − last) · N / Per,
// capped at burst.
func (m *tbModel) refill(now int64) {
	burst := new(big.Rat).SetInt64(m.p.Burst)
	if m.tokens == nil {
		m.tokens, m.last = new(big.Rat).Set(burst), now
	}
	add := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(now-m.last), big.NewInt(m.p.Rate.N)), big.NewInt(int64(m.p.Rate.Per)))
	m.tokens.Add(m.tokens, add)
	if m.tokens.Cmp(burst) > 0 {
		m.tokens.Set(burst)
	}
	m.last = now
}

// charge: "the content goes below zero, never below −burst: a charge
// takes at most ⌊tokens⌋ + burst; a refund adds tokens up to burst".
func (m *tbModel) charge(now, _, u int64) (result, bool) {
	m.refill(now)
	capped := false
	switch {
	case u > 0:
		take := min(u, max(0, floorRat(m.tokens)+m.p.Burst))
		m.tokens.Sub(m.tokens, new(big.Rat).SetInt64(take))
		capped = take < u
	case u < 0:
		m.tokens.Add(m.tokens, new(big.Rat).SetInt64(-u))
		if burst := new(big.Rat).SetInt64(m.p.Burst); m.tokens.Cmp(burst) > 0 {
			m.tokens.Set(burst)
		}
	}
	return m.report(result{allowed: true}), capped
}

func (m *tbModel) allow(now, c int64) result {
	m.refill(now)
	cost := new(big.Rat).SetInt64(c)
	var r result
	if m.tokens.Cmp(cost) >= 0 {
		r.allowed = true
		m.tokens.Sub(m.tokens, cost)
	} else {
		// (c − tokens) · Per / N, rounded up to the nanosecond
		need := new(big.Rat).Sub(cost, m.tokens)
		need.Mul(need, new(big.Rat).SetFrac64(int64(m.p.Rate.Per), m.p.Rate.N))
		r.retry = time.Duration(ceilRat(need))
	}
	return m.report(r)
}

// report fills in remaining and next: a bucket in debt has none left.
func (m *tbModel) report(r result) result {
	r.remaining = max(0, floorRat(m.tokens))
	if r.remaining < m.p.Burst {
		// (remaining + 1 − tokens) · Per / N, rounded up
		need := new(big.Rat).Sub(new(big.Rat).SetInt64(r.remaining+1), m.tokens)
		need.Mul(need, new(big.Rat).SetFrac64(int64(m.p.Rate.Per), m.p.Rate.N))
		r.next = time.Duration(ceilRat(need))
	}
	return r
}

// fwModel: "windows are aligned to the Unix epoch (floor(t/W)); at most n
// admitted per window. Retry-After = time to the next window."
type fwModel struct {
	p      limiter.FixedWindowParams
	counts map[int64]int64
}

func (m *fwModel) allow(now, c int64) result {
	if m.counts == nil {
		m.counts = map[int64]int64{}
	}
	w := int64(m.p.Window)
	idx := floorDiv(now, w)
	var r result
	if m.counts[idx]+c <= m.p.Limit {
		r.allowed = true
		m.counts[idx] += c
	} else {
		r.retry = time.Duration((idx+1)*w - now)
	}
	return m.report(now, r)
}

func (m *fwModel) report(now int64, r result) result {
	w := int64(m.p.Window)
	idx := floorDiv(now, w)
	r.remaining = max(0, m.p.Limit-m.counts[idx])
	if r.remaining < m.p.Limit {
		r.next = time.Duration((idx+1)*w - now)
	}
	return r
}

// charge: "the current window, up to 2·limit; a refund only while the
// reservation's window is the current one, down to zero".
func (m *fwModel) charge(now, reservedAt, u int64) (result, bool) {
	if m.counts == nil {
		m.counts = map[int64]int64{}
	}
	w := int64(m.p.Window)
	idx := floorDiv(now, w)
	capped := false
	switch {
	case u > 0:
		take := min(u, max(0, 2*m.p.Limit-m.counts[idx]))
		m.counts[idx] += take
		capped = take < u
	case u < 0 && floorDiv(reservedAt, w) == idx:
		m.counts[idx] = max(0, m.counts[idx]+u)
	}
	return m.report(now, result{allowed: true}), capped
}

// slModel: "admitted iff fewer than n requests were admitted in (t − W, t]"
// (with costs: the units admitted in that interval plus c are at most n).
type slModel struct {
	p     limiter.SlidingLogParams
	units []int64 // instant of every admitted unit, ever
}

func (m *slModel) inWindow(t int64) int64 {
	var n int64
	for _, u := range m.units {
		if u > t-int64(m.p.Window) && u <= t {
			n++
		}
	}
	return n
}

// prune forgets the units that left the window before now: no later
// instant counts them (traces never go backwards), and the model stays
// fast.
func (m *slModel) prune(now int64) {
	i := 0
	for i < len(m.units) && m.units[i] <= now-int64(m.p.Window) {
		i++
	}
	m.units = m.units[i:]
}

func (m *slModel) allow(now, c int64) result {
	m.prune(now)
	var r result
	if m.inWindow(now)+c <= m.p.Limit {
		r.allowed = true
		m.add(now, c)
	} else {
		// The first instant at which an admitted unit leaves and the rest
		// leave room.
		for _, u := range m.units {
			t := u + int64(m.p.Window)
			if t > now && m.inWindow(t)+c <= m.p.Limit {
				r.retry = time.Duration(t - now)
				break
			}
		}
	}
	return m.report(now, r)
}

// report fills in remaining and next: the first instant at which more
// remains (with the window in debt, more than one unit must leave).
func (m *slModel) report(now int64, r result) result {
	in := m.inWindow(now)
	r.remaining = max(0, m.p.Limit-in)
	for _, u := range m.units {
		if t := u + int64(m.p.Window); t > now && max(0, m.p.Limit-m.inWindow(t)) > r.remaining {
			r.next = time.Duration(t - now)
			break
		}
	}
	return r
}

// add records c units at t, keeping units in time order.
func (m *slModel) add(t, c int64) {
	i := len(m.units)
	for i > 0 && m.units[i-1] > t {
		i--
	}
	m.units = slices.Insert(m.units, i, slices.Repeat([]int64{t}, int(c))...)
}

// charge: "entries at the reservation instant while it is in the window,
// else at now, the window's entries up to 2·limit; a refund removes the
// oldest entries at or after the reservation instant, while it is in the
// window".
func (m *slModel) charge(now, reservedAt, u int64) (result, bool) {
	m.prune(now)
	inside := reservedAt > now-int64(m.p.Window)
	capped := false
	switch {
	case u > 0:
		take := min(u, max(0, 2*m.p.Limit-m.inWindow(now)))
		at := now
		if inside {
			at = reservedAt
		}
		m.add(at, take)
		capped = take < u
	case u < 0 && inside:
		i := 0
		for i < len(m.units) && m.units[i] < reservedAt {
			i++
		}
		m.units = slices.Delete(m.units, i, i+int(min(-u, int64(len(m.units)-i))))
	}
	return m.report(now, result{allowed: true}), capped
}

// swModel: "the window is cut into k slots of W/k aligned to the epoch; the
// estimate is the sum of the admitted counts of the slots wholly inside
// (t − W, t] plus the oldest, partly covered slot weighted by the fraction of
// it still inside. Admit iff estimate + c ≤ n."
type swModel struct {
	p      limiter.SlidingWindowParams
	counts map[int64]int64 // slot index → units admitted in it
}

// scaledEstimate returns the estimate at t times the slot length L, an
// integer: L·(the counts of the slots wholly inside) + the oldest slot's
// count·(the nanoseconds of it still inside). Exact, as a fraction over L
// would be, without a big.Rat per step (the bisection of firstFit calls it
// some fifty times a decision). It panics rather than overflow.
func (m *swModel) scaledEstimate(t int64) int64 {
	L := int64(m.p.Window) / int64(m.p.Slots)
	j := floorDiv(t, L)
	var sum int64
	for i := j - int64(m.p.Slots) + 1; i <= j; i++ {
		sum += m.counts[i]
	}
	old := j - int64(m.p.Slots)
	// Fraction of slot old = [old·L, (old+1)·L) inside (t−W, t].
	inside := (old+1)*L - (t - int64(m.p.Window))
	return checkedAdd(checkedMul(sum, L), checkedMul(m.counts[old], inside))
}

func (m *swModel) fits(t, c int64) bool {
	L := int64(m.p.Window) / int64(m.p.Slots)
	return checkedAdd(m.scaledEstimate(t), checkedMul(c, L)) <= checkedMul(m.p.Limit, L)
}

func (m *swModel) allow(now, c int64) result {
	if m.counts == nil {
		m.counts = map[int64]int64{}
	}
	L := int64(m.p.Window) / int64(m.p.Slots)
	var r result
	if m.fits(now, c) {
		r.allowed = true
		m.counts[floorDiv(now, L)] += c
	} else {
		r.retry = time.Duration(m.firstFit(now, c) - now)
	}
	return m.report(now, r)
}

func (m *swModel) report(now int64, r result) result {
	L := int64(m.p.Window) / int64(m.p.Slots)
	// floor(limit − estimate) = floor((limit·L − L·estimate) / L)
	r.remaining = max(0, floorDiv(checkedMul(m.p.Limit, L)-m.scaledEstimate(now), L))
	if r.remaining < m.p.Limit {
		r.next = time.Duration(m.firstFit(now, r.remaining+1) - now)
	}
	return r
}

// charge: "the reservation's slot while the window covers it, else the
// current one, the counts of slots j−k … j up to 2·limit; a refund from
// the reservation's slot while the window covers it, down to zero".
func (m *swModel) charge(now, reservedAt, u int64) (result, bool) {
	if m.counts == nil {
		m.counts = map[int64]int64{}
	}
	L, k := int64(m.p.Window)/int64(m.p.Slots), int64(m.p.Slots)
	j, r := floorDiv(now, L), floorDiv(reservedAt, L)
	capped := false
	switch {
	case u > 0:
		var held int64
		for i := j - k; i <= j; i++ {
			held += m.counts[i]
		}
		take := min(u, max(0, 2*m.p.Limit-held))
		at := j
		if r >= j-k {
			at = r
		}
		m.counts[at] += take
		capped = take < u
	case u < 0 && r >= j-k:
		m.counts[r] = max(0, m.counts[r]+u)
	}
	return m.report(now, result{allowed: true}), capped
}

// firstFit returns the first instant ≥ now at which c units fit. The
// estimate never rises while nothing is admitted: bisect. After W+L every
// unit is out.
func (m *swModel) firstFit(now, c int64) int64 {
	L := int64(m.p.Window) / int64(m.p.Slots)
	lo, hi := now, now+int64(m.p.Window)+L
	for lo < hi {
		mid := lo + (hi-lo)/2
		if m.fits(mid, c) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// checkedMul and checkedAdd are a·b and a+b, panicking on overflow: a
// model never answers from a wrapped number.
func checkedMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	p := a * b
	if p/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		panic(fmt.Sprintf("limitertest: %d·%d overflows", a, b))
	}
	return p
}

func checkedAdd(a, b int64) int64 {
	s := a + b
	if (a > 0 && b > 0 && s < 0) || (a < 0 && b < 0 && s >= 0) {
		panic(fmt.Sprintf("limitertest: %d+%d overflows", a, b))
	}
	return s
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func floorRat(x *big.Rat) int64 {
	q := new(big.Int).Div(x.Num(), x.Denom()) // Euclidean: floor for a positive denominator
	return q.Int64()
}

func ceilRat(x *big.Rat) int64 {
	return -floorRat(new(big.Rat).Neg(x))
}
