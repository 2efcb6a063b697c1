package driver

import (
	"context"
	"errors"
	"math"
	"time"
)

// Charger is implemented by the Stores that can charge a limit after the
// fact, for a cost the upstream reports in its answer. Both limitproxy
// stores implement it beside Store; it is a separate interface so that a
// Store need not. Implementations are safe for concurrent use.
//
// # Reserve, then reconcile
//
// A request whose cost is known only from its answer reserves an estimate
// e with an ordinary Decide (Allow with weight e, on a limit of cost 1, as
// cost_from limits are), and when the answer has ended the store is
// charged the difference: Charge(c − e) for a true cost c, a refund when
// negative. The rules below are chosen so that this ends exactly as if the
// request had been charged c at the reservation instant whenever that is
// still possible, and never lets reported units go uncounted otherwise.
// In particular Decide(e) then Charge(c − e) at the same instant leaves
// the state Decide(c) would have left if it admitted the request.
//
// # Units
//
// n is in the limit's own units (tokens of a bucket, units counted by a
// window), not a request weight: the limit's Cost is not applied. A limit
// of cost k reserved with weight e took k·e units; to reconcile it to
// weight c, charge k·(c − e).
//
// # Charges (n > 0): debt
//
// The units are consumed unconditionally, past the quota if need be: the
// key goes into debt, and its later requests are rejected until the debt
// is paid (a bucket refills it at its rate, a window lets it leave). A
// token bucket's content goes below zero; a fixed window's count above its
// limit; a sliding window's slot, a sliding log's entries likewise.
//
// Debt bound: a charge never takes a limit's usage above twice its
// capacity, that is a debt of at most one capacity. For a token bucket
// the content never falls below −Burst; for a fixed window the count
// stays at most 2·Limit; for a sliding window the counts of the slots it
// still holds (the oldest, partly covered one in full) at most 2·Limit;
// for a sliding log the entries in the window at most 2·Limit (so at most
// 2·MaxSlidingLogLimit timestamps, 1.6 MB, per key). The units beyond are
// dropped and the Decision says so (Capped). The bound keeps every
// product of the algorithms inside their integer arithmetic (64 bits here,
// 2^53 in the Redis store's Lua), keeps a sliding log's memory bounded,
// and bounds how long one expensive answer can lock a client out: at
// most about two refill periods or windows.
//
// # Refunds (n < 0)
//
// A refund gives units back, never past a fresh key's state: a bucket
// never above Burst, a count never below zero. The window algorithms give
// back only what the reservation still counts: a fixed window only while
// the reservation's window is the current one, a sliding window only from
// the reservation's slot while the window still covers it, a sliding log
// only entries at or after the reservation instant while that instant is
// still in the window (the oldest of those: the reservation's own). Once
// the reservation has left the window, it no longer counts against
// anything, and a refund then would hand out units nobody paid for.
// A token bucket has no time in its state: a late refund is not always
// exact (tokenbucket.go says when).
//
// The leaky bucket cannot be charged: its step schedules each request as
// it is admitted, and a departure that already happened cannot be moved.
// Charge returns a *ParamError (field "cost_from") for it; CheckCharge
// tells in advance. A Store applies a charge to one key's state with
// Limit.Charge.
type Charger interface {
	// Charge applies n units (a refund when negative; n = 0 changes
	// nothing) at instant now to every limit in limits, limit i under
	// client key keys.For(i), for a request reserved at instant
	// reservedAt (a reservedAt after now is read as now). It is atomic per
	// call and never refused: the Decision is allowed, with RetryAfter 0,
	// and describes the limits after the charge (Limit, Remaining,
	// ResetAt, Next, merged as Decide merges them), with Capped set if
	// a limit reached its debt bound. Implementations must not modify
	// limits or keys.
	//
	// An error means nothing was charged: a limit that cannot be charged
	// (CheckCharge), or a backend that could not be reached (wrapping
	// ErrStoreUnavailable). A failed charge cannot be retried usefully
	// later; callers report it.
	Charge(ctx context.Context, limits []Limit, keys Keys, now, reservedAt time.Time, n int64) (Decision, error)
}

// CheckCharge reports whether l can be charged after the fact (Charger):
// a *ParamError for a leaky bucket, whose departures are scheduled as
// requests are admitted, nil for the other algorithms.
func (l *Limit) CheckCharge() error {
	if l.a == nil {
		return errors.New("limiter: limit was not built by a New… constructor")
	}
	if _, ok := l.a.(chargeable); !ok {
		return paramErr(l.alg, "cost_from", "a %v schedules each request as it is admitted and cannot be charged after the answer", l.alg)
	}
	return nil
}

// Charge charges (n > 0) or refunds (n < 0) n units to state i of st, l's
// state for one client key, at now, for a request reserved at reservedAt,
// unconditionally, and returns the state's decision after it, with
// Capped if the debt bound dropped units: never refused (see Charger for
// each algorithm's rules). The limit's Cost is not applied. A nil st is a
// fresh key's state (a key the Store does not hold), which a refund
// leaves fresh, so that the Store need not store it. l must pass
// CheckCharge; the caller must serialise calls on one state.
func (l *Limit) Charge(st States, i int, now, reservedAt time.Time, n int64) Decision {
	if st == nil && n > 0 {
		// The algorithms read a nil st as a fresh state that does not
		// change, which a refund leaves as it is; a charge needs one.
		st, i = l.NewStates(1), 0
	}
	return l.a.(chargeable).charge(st, i, now, reservedAt, n)
}

// chargeUnits returns |n|, at most bound. A Charge step never applies
// more than twice a limit's capacity (the debt bound), nor needs more to
// refill a limit from its deepest debt, so bound = 2·capacity + 1 keeps
// every product in range while still telling a capped charge apart.
func chargeUnits(n, bound int64) int64 {
	switch {
	case n == math.MinInt64:
		return bound
	case n < 0:
		n = -n
	}
	return min(n, bound)
}

// chargeReport turns the decision of a step with nothing to consume,
// which describes a state, into a Charge's: never refused.
func chargeReport(d Decision, capped bool) Decision {
	d.Allowed, d.RetryAfter, d.Capped = true, 0, capped
	return d
}
