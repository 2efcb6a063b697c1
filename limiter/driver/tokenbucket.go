package driver

import (
	"fmt"
	"math"
	"time"
)

// TokenBucketParams configures a token bucket (docs/algorithms.md): the
// bucket holds up to Burst tokens, starts full, and refills continuously
// at Rate. A request of cost c is admitted iff the bucket holds at least
// c tokens, which it then loses; otherwise RetryAfter is the exact time
// until it holds c. Memory: 16 bytes of state per key. The zero value is
// not valid (it has no rate).
type TokenBucketParams struct {
	Rate  Rate  // refill rate, tokens per period; must be valid
	Burst int64 // capacity in tokens, 1..MaxCount
	Cost  int64 // tokens per request of weight 1; 0 means 1; at most Burst
}

// tokenBucket is TokenBucketParams compiled for exact arithmetic.
//
// Tokens are counted in billionths (nano-tokens), and the bucket earns
// exactly p nano-tokens every q nanoseconds (p/q is N·1e9/Per in lowest
// terms). The state advances its clock only by whole multiples of q and
// carries the rest, so no fraction of a token is ever rounded away: the
// bucket's content at any instant is the exact rational value of docs/algorithms.md,
// and "tokens ≥ c" is decided exactly (an integer threshold compared to the
// floor of an exact value).
type tokenBucket struct {
	TokenBucketParams
	full int64 // Burst in nano-tokens
	p, q int64
}

const nanoPerToken = 1_000_000_000

// NewTokenBucket validates p and returns the limit, or a *ParamError.
func NewTokenBucket(p TokenBucketParams) (Limit, error) {
	if err := p.Rate.validate(); err != nil {
		return Limit{}, paramErr(TokenBucket, "rate", "%v", err)
	}
	if err := checkCount(TokenBucket, "burst", p.Burst, MaxCount); err != nil {
		return Limit{}, err
	}
	cost, err := checkCost(TokenBucket, p.Cost, p.Burst, "burst")
	if err != nil {
		return Limit{}, err
	}
	p.Cost = cost
	earn := p.Rate.N * nanoPerToken
	g := gcd(earn, int64(p.Rate.Per))
	return Limit{alg: TokenBucket, cost: cost, a: &tokenBucket{
		TokenBucketParams: p,
		full:              p.Burst * nanoPerToken,
		p:                 earn / g,
		q:                 int64(p.Rate.Per) / g,
	}}, nil
}

func (*tokenBucket) name() string { return "token_bucket" }

func (*tokenBucket) keys() (takes, requires []string) {
	return []string{"rate", "burst", "cost"}, []string{"rate"}
}

// build defaults burst to one period's worth of the rate ("10/s" → 10).
func (*tokenBucket) build(s Spec) (Limit, error) {
	burst := s.Burst
	if s.unset("burst", burst) {
		burst = s.Rate.N
	}
	return NewTokenBucket(TokenBucketParams{Rate: s.Rate, Burst: burst, Cost: s.Cost})
}

func (b *tokenBucket) params() any { return b.TokenBucketParams }

// quota is the burst over the time it takes to refill.
func (b *tokenBucket) quota() (int64, time.Duration) {
	return b.Burst, time.Duration(mulDivCeil(b.Burst, int64(b.Rate.Per), b.Rate.N))
}

func (b *tokenBucket) describe() string { return fmt.Sprintf("rate=%v burst=%d", b.Rate, b.Burst) }

// stateName: tokens mean the same under any rate and burst (a smaller
// burst clamps them).
func (b *tokenBucket) stateName() string { return "" }

func (b *tokenBucket) scaled(s float64) (Limit, error) {
	p := b.TokenBucketParams
	p.Rate.N, p.Burst = scaleCount(p.Rate.N, s, MaxCount), scaleCount(p.Burst, s, MaxCount)
	return NewTokenBucket(p)
}

// script returns the parameters of token_bucket in decide.lua: the bucket
// earns p millionths of a token every q µs (N·10⁶/Per in lowest terms),
// then burst and cost. Its content, in millionths up to burst·10⁶, and
// p·q must stay below 2^53.
func (b *tokenBucket) script() ([5]int64, error) {
	per, err := scriptMicros(TokenBucket, b.Rate.Per, "the rate's period", "rate")
	if err != nil {
		return [5]int64{}, err
	}
	earn := b.Rate.N * 1_000_000 // millionths of a token per period
	g := gcd(earn, per)
	p, q := earn/g, per/g
	if p > scriptExact/q || b.Burst > scriptExact/1_000_000/q {
		return [5]int64{}, scriptTooBig(TokenBucket, "rate")
	}
	return [5]int64{p, q, b.Burst, b.Cost}, nil
}

func (b *tokenBucket) newStates(n int) States { return make(array[tokenBucketState], n) }

// idleAt is when the bucket is full again.
func (b *tokenBucket) idleAt(st States, i int, _ *Queue) time.Time {
	var fresh tokenBucketState
	s := stateAt(st, i, &fresh)
	if s.last == 0 {
		return time.Time{}
	}
	return instant(satAdd(unbias(s.last), mulDivCeil(max(0, b.full-s.tokens), b.q, b.p)))
}

// tokenBucketState is a token bucket's state of one key: 16 bytes. Its
// zero value is a fresh, full bucket.
type tokenBucketState struct {
	last   uint64 // biased clock (see bias); 0 means never used
	tokens int64  // nano-tokens at last
}

// bias maps a Unix-nanosecond instant to a nonzero uint64, so that a state's
// zero value can mean "fresh" for every instant time.Time.UnixNano can
// return; differences of biased values are differences of instants.
func bias(ns int64) uint64 { return uint64(ns) ^ 1<<63 }

func unbias(u uint64) int64 { return int64(u ^ 1<<63) }

// step applies a request of weight n at now to state i of st (st nil: a
// fresh key's, only read) and returns the decision. With commit false,
// the state is left unchanged and the decision says what committing would
// do (a Store uses it to check every limit of a policy before consuming
// from any). Time going backwards is treated as the latest instant the
// state has seen, so the same refill is never credited twice. The result
// is named so that it is built where the caller reads it, not copied
// there.
//
// Memory: 16 bytes per key. The caller must serialise calls on one state.
func (b *tokenBucket) step(st States, i int, _ *Queue, now time.Time, n int64, commit bool) (d Decision) {
	var fresh tokenBucketState
	s := stateAt(st, i, &fresh)
	t := nanos(now)
	c, ok := weighted(n, b.Cost, b.Burst)
	if !ok {
		return never(b.Burst)
	}
	cn := c * nanoPerToken

	// Advance to t: credit whole periods of q, carry the remainder.
	last, tokens := t, b.full
	if s.last != 0 {
		last, tokens = unbias(s.last), s.tokens
		if t < last {
			t = last
		}
		e := t - last
		avail := satAdd(tokens, mulDiv(e, b.p, b.q)) // ⌊exact tokens at t⌋
		if avail >= b.full {
			last, tokens = t, b.full
		} else {
			k := e / b.q
			last += k * b.q
			tokens += k * b.p
		}
	}
	// Exact content at t is tokens + (t−last)·p/q with (t−last) < q unless
	// the bucket is full; avail is its floor.
	avail := min(b.full, tokens+mulDiv(t-last, b.p, b.q))

	d = Decision{Limit: b.Burst}
	if avail >= cn {
		d.Allowed = true
		tokens -= cn
		avail -= cn
	} else {
		// Wait for the exact content to reach cn.
		at := satAdd(last, mulDivCeil(cn-tokens, b.q, b.p))
		d.RetryAfter = time.Duration(at - nanos(now))
	}
	// A bucket in debt (a Charge) holds less than nothing: none remain.
	d.Remaining = max(0, avail) / nanoPerToken
	d.ResetAt = instant(satAdd(last, mulDivCeil(b.full-tokens, b.q, b.p)))
	if u := (d.Remaining + 1) * nanoPerToken; u <= b.full {
		// The exact content reaches one more whole token.
		d.Next = time.Duration(satAdd(last, mulDivCeil(u-tokens, b.q, b.p)) - nanos(now))
	}
	if commit && (d.Allowed || s.last != 0) {
		s.last, s.tokens = bias(last), tokens
	}
	return d
}

// charge charges (n > 0) or refunds (n < 0) n tokens to state i of st at
// now, unconditionally, and returns the state's decision after it (see
// Charger): never refused. The limit's Cost is not applied.
//
// A charge takes the tokens even past empty: the bucket goes into debt,
// which it refills at its rate like any deficit, so a later request of c
// tokens waits (c − content)/rate, debt included. The content never falls
// below −Burst: a charge takes at most ⌊content⌋ + Burst tokens (whole
// tokens, so that stores of any resolution agree), and reports the rest
// as capped. A refund adds tokens up to Burst, never beyond.
//
// reservedAt is not used: tokens carry no time. So a reconcile later than
// the reservation is exact as long as the bucket charged the true cost at
// the reservation would not have been full in between. If it would have
// been (the key was idle long enough to refill), that bucket lost refill
// which the one holding only the estimate did not: a late charge then
// takes more than charging at the reservation would have (it errs
// towards the limit), and a late refund can give back up to |n| tokens
// more (never more than the reservation took, never above Burst).
func (b *tokenBucket) charge(st States, i int, now, _ time.Time, n int64) Decision {
	var fresh tokenBucketState
	s := stateAt(st, i, &fresh)
	u := chargeUnits(n, 2*b.Burst+1) * nanoPerToken
	capped := false
	if s.last != 0 || n > 0 {
		// Advance to t as step does.
		t := nanos(now)
		last, tokens := t, b.full
		if s.last != 0 {
			last, tokens = unbias(s.last), s.tokens
			if t < last {
				t = last
			}
			e := t - last
			if satAdd(tokens, mulDiv(e, b.p, b.q)) >= b.full {
				last, tokens = t, b.full
			} else {
				k := e / b.q
				last += k * b.q
				tokens += k * b.p
			}
		}
		avail := min(b.full, tokens+mulDiv(t-last, b.p, b.q)) // ⌊exact content⌋
		switch {
		case n > 0:
			// Down to −Burst at most, in whole tokens.
			room := max(0, floorDiv(avail, nanoPerToken)*nanoPerToken+b.full)
			take := min(u, room)
			tokens -= take
			capped = take < u
		case n < 0:
			if avail+u >= b.full {
				last, tokens = t, b.full
			} else {
				tokens += u
			}
		}
		s.last, s.tokens = bias(last), tokens
	}
	// A fresh bucket refunded stays fresh (and is not stored).
	return chargeReport(b.step(st, i, nil, now, 0, false), capped)
}

// Never is the RetryAfter of a request that no wait can admit: its weight
// times the limit's cost exceeds the limit's capacity.
const Never = time.Duration(math.MaxInt64)

func never(limit int64) Decision {
	return Decision{RetryAfter: Never, Limit: limit}
}
