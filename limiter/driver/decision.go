package driver

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Rate is N events per Per, kept exactly as written ("30/5m" is {30, 5m}),
// so that no rounding happens before the algorithms see it. The zero value
// is not a valid rate: "unlimited" is not a rate.
type Rate struct {
	N   int64
	Per time.Duration
}

// maxRateN bounds N so that N·1e9 fits in an int64 (token arithmetic is done
// in billionths of a token).
const maxRateN = 1_000_000_000

func (r Rate) validate() error {
	switch {
	case r.N <= 0:
		return errors.New("must be greater than zero")
	case r.N > maxRateN:
		return fmt.Errorf("%d events per period is above the maximum of %d", r.N, maxRateN)
	case r.Per <= 0:
		return errors.New("period must be greater than zero")
	}
	return nil
}

// String formats r as the configuration writes it, e.g. "10/1s".
func (r Rate) String() string { return strconv.FormatInt(r.N, 10) + "/" + r.Per.String() }

// interval is the time one unit of r takes, rounded up to the nanosecond, so
// that events spaced by interval never exceed r.
func (r Rate) interval() int64 { return ceilDiv(int64(r.Per), r.N) }

// Decision is the outcome of one request against one limit or, as
// Limiter.Allow returns it (limiter.Decision is this type), against every
// limit of a policy: whether it may pass, after what Delay, and the
// figures of the most restrictive limit for the rate-limit headers. It is
// a plain value, never nil, safe to copy and compare; the zero Decision
// is a rejection with no figures. When several limits decide, Limit,
// Remaining, ResetAt and Next describe the most restrictive one (a
// rejecting one first, then the least Remaining, then the latest
// ResetAt), at position Index.
type Decision struct {
	// Allowed reports whether the request is admitted (possibly after
	// Delay). A Charge is never refused: its Decision is always allowed.
	Allowed bool
	// Capped reports that a Charge could not apply all its units because
	// a limit reached its debt bound (one capacity, see Charger); false
	// for Allow. (A bool beside Allowed fits in the padding: the size
	// does not change.)
	Capped bool
	// Degraded reports that the store could not decide and followed its
	// own fallback rule instead (the Redis store without Redis, on_error):
	// the request was not measured against the shared state. Also in the
	// padding.
	Degraded bool
	// Index is the position, among the limiter's limits, of the limit
	// that Limit, Remaining, ResetAt and Next describe: the most
	// restrictive one; -1 when limiter.Limiter.AllowKeys skipped every
	// limit. (An int32 beside Allowed keeps a Decision at 11 words: a
	// word more cost decisions about 40 ns, BenchmarkHotKey.)
	Index int32
	// Delay is how long an admitted request waits in a leaky-bucket queue
	// before it may go on; 0 for the other algorithms. With the memory
	// store it is an upper bound: waiters ahead that leave make it
	// shorter. Call limiter.Limiter.Wait rather than sleeping for Delay.
	Delay time.Duration
	// RetryAfter is, for a rejected request, the time after which the
	// same request would be admitted if nothing else arrived (exact, to
	// the nanosecond rounded up; Never if no wait can); 0 when allowed.
	RetryAfter time.Duration
	// Limit is the quota of the limit these figures describe (its
	// Quota): the burst, the limit per window, or for the leaky bucket
	// Queue + 1 + Delay — the requests that may wait, the one leaving,
	// and the Delay requests of a burst forwarded at once. (A leaky-bucket
	// request whose units, n × Cost, exceed MaxCount is refused with
	// Limit Queue + 1.)
	Limit int64
	// Remaining is how many more requests of cost 1 that limit would
	// admit now, after this request.
	Remaining int64
	// ResetAt is when that limit is back to its fresh state (Remaining
	// == Limit) if nothing else arrives.
	ResetAt time.Time
	// Next is how long after the decision's instant that limit makes
	// more quota available — Remaining grows by at least one — if nothing
	// else arrives: the draft-10 meaning of the RateLimit field's t. For a
	// rejection it is never longer than RetryAfter. 0 when nothing more
	// can become available (Remaining == Limit), or at once.
	Next time.Duration
	// Ticket identifies the place of a request queued by a Store that
	// keeps a real queue (the memory store's leaky bucket); 0 for none.
	// limiter.Limiter.Wait hands it back to the Store.
	Ticket uint64
}

// Merge folds d2, the decision of the limit at index i, into d, the decision
// of a policy whose limits 0..i-1 were merged before. A Store calls it once
// per limit, in order, starting from the zero Decision. The result is allowed
// only if every limit allowed, and Capped if any limit's was; RetryAfter is
// the longest of the rejecting limits'; the figures are those of the most
// restrictive limit (a rejecting one first, then the least Remaining, then
// the latest ResetAt).
func (d *Decision) Merge(i int, d2 Decision) {
	if i == 0 {
		*d = d2
		d.Index = 0
		return
	}
	d.Fold(i, d2)
}

// Fold folds d2, the decision of the limit at index i, into d, a decision
// already made of other limits, whatever their order: Merge without its
// start from the zero Decision at index 0. A caller that decides a
// request's limits separately (several Limiters, or Limiter.Only) folds
// their Decisions into one this way: the result is allowed only if both
// are, RetryAfter and Delay are the longest, and the figures are the most
// restrictive limit's (d2's with Index i if it is that one).
func (d *Decision) Fold(i int, d2 Decision) {
	d2.Index = int32(i)
	allowed := d.Allowed && d2.Allowed
	capped := d.Capped || d2.Capped
	degraded := d.Degraded || d2.Degraded
	retry := max(d.RetryAfter, d2.RetryAfter)
	delay := max(d.Delay, d2.Delay)
	ticket := d.Ticket
	if d2.Ticket != 0 {
		ticket = d2.Ticket
	}
	if moreRestrictive(d2, *d) {
		*d = d2
	}
	d.Allowed, d.RetryAfter, d.Delay, d.Ticket, d.Capped, d.Degraded = allowed, retry, delay, ticket, capped, degraded
	if !allowed {
		d.Delay, d.Ticket = 0, 0
	}
}

func moreRestrictive(a, b Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.ResetAt.After(b.ResetAt)
}
