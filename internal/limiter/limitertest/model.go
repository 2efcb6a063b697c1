package limitertest

import (
	"math/big"
	"time"

	"github.com/limitproxy/limitproxy/internal/limiter"
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

// tbModel: "the bucket starts full with b tokens and refills continuously at
// r tokens/s up to b. A request of cost c is admitted iff tokens ≥ c, which
// then drop by c. Retry-After = (c − tokens)/r."
type tbModel struct {
	p      limiter.TokenBucketParams
	tokens *big.Rat
	last   int64
}

func (m *tbModel) allow(now, c int64) result {
	burst := new(big.Rat).SetInt64(m.p.Burst)
	if m.tokens == nil {
		m.tokens, m.last = new(big.Rat).Set(burst), now
	}
	// tokens += (now − last) · N / Per, capped at burst
	add := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(now-m.last), big.NewInt(m.p.Rate.N)), big.NewInt(int64(m.p.Rate.Per)))
	m.tokens.Add(m.tokens, add)
	if m.tokens.Cmp(burst) > 0 {
		m.tokens.Set(burst)
	}
	m.last = now
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
	r.remaining = floorRat(m.tokens)
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
	r.remaining = m.p.Limit - m.counts[idx]
	if r.remaining < m.p.Limit {
		r.next = time.Duration((idx+1)*w - now)
	}
	return r
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

func (m *slModel) allow(now, c int64) result {
	var r result
	if m.inWindow(now)+c <= m.p.Limit {
		r.allowed = true
		for range c {
			m.units = append(m.units, now)
		}
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
	r.remaining = m.p.Limit - m.inWindow(now)
	for _, u := range m.units { // the oldest unit in the window leaving
		if u > now-int64(m.p.Window) && u <= now {
			r.next = time.Duration(u + int64(m.p.Window) - now)
			break
		}
	}
	return r
}

// swModel: "the window is cut into k slots of W/k aligned to the epoch; the
// estimate is the sum of the admitted counts of the slots wholly inside
// (t − W, t] plus the oldest, partly covered slot weighted by the fraction of
// it still inside. Admit iff estimate + c ≤ n."
type swModel struct {
	p      limiter.SlidingWindowParams
	counts map[int64]int64 // slot index → units admitted in it
}

func (m *swModel) estimate(t int64) *big.Rat {
	L := int64(m.p.Window) / int64(m.p.Slots)
	j := floorDiv(t, L)
	var est big.Rat
	for i := j - int64(m.p.Slots) + 1; i <= j; i++ {
		est.Add(&est, new(big.Rat).SetInt64(m.counts[i]))
	}
	old := j - int64(m.p.Slots)
	// Fraction of slot old = [old·L, (old+1)·L) inside (t−W, t].
	inside := (old+1)*L - (t - int64(m.p.Window))
	est.Add(&est, new(big.Rat).SetFrac64(m.counts[old]*inside, L))
	return &est
}

func (m *swModel) fits(t, c int64) bool {
	e := m.estimate(t)
	e.Add(e, new(big.Rat).SetInt64(c))
	return e.Cmp(new(big.Rat).SetInt64(m.p.Limit)) <= 0
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
	left := new(big.Rat).Sub(new(big.Rat).SetInt64(m.p.Limit), m.estimate(now))
	r.remaining = max(0, floorRat(left))
	if r.remaining < m.p.Limit {
		r.next = time.Duration(m.firstFit(now, r.remaining+1) - now)
	}
	return r
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
