// Package limiter decides whether a request may pass under rate limits,
// exactly, with the time passed in: five algorithms, any number of limits
// per policy, and a Store that keeps each client key's state in this
// process (limiter/memstore) or on Redis (limiter/redisstore).
//
//	lim, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 10, Per: time.Second}, Burst: 20})
//	l, _ := limiter.New(memstore.New(memstore.Options{}), "api", lim)
//	d, err := l.Allow(ctx, clientIP, time.Now(), 1)
//	if err == nil && d.Allowed { err = l.Wait(ctx, d) } // waits only in a leaky bucket's queue
//
// # Algorithms (docs/algorithms.md)
//
//	algorithm       admits a request of cost c at t iff              memory per key (memstore)
//	token_bucket    the bucket (burst b, refill r) holds ≥ c          16 B
//	leaky_bucket    fewer than Queue wait and the wait ≤ MaxWait      16 B; ~150 B and a timer while
//	                (then it waits its turn on a 1/r schedule)        requests wait, ~100 B a waiter
//	fixed_window    count in window ⌊t/W⌋ (or t's calendar            16 B
//	                period, Calendar) + c ≤ limit
//	sliding_log     units admitted in (t−W, t] + c ≤ limit            8 B per unit in the window
//	sliding_window  weighted estimate over Slots slots + c ≤ limit    8 + 4·(Slots+1) B
//
// Decisions are exact: time is integer nanoseconds, counts are integers,
// and the conformance suite (limiter/limitertest) checks every decision of
// every store against models written with big.Rat arithmetic. A request
// is admitted only if every limit of its Limiter admits it, and a
// rejected request consumes nothing from any of them. RetryAfter is the
// exact time until the same request would pass; a request larger than a
// limit's capacity gets Never.
//
// Nothing in this package reads the clock, starts a goroutine or holds a
// lock across calls. Each key's state remembers the latest instant it has
// seen, and an earlier instant counts as that one, so callers that read
// the clock concurrently need not serialise. State is keyed by the
// limits' names (see New), so a Limiter rebuilt with new numbers under
// the same policy name keeps its clients' counters.
//
// Costs: every limit has a Cost per request (TokenBucketParams.Cost, …),
// Allow takes a weight n that multiplies it, and Limiter.Charge charges
// or refunds units after the fact, for costs known only from a response.
//
// A Store that implements driver.Charger (both stores do) can also charge a
// limit after the request was decided, for costs known only from the
// answer (a cost the upstream reports): reserve an estimate with Allow, then Limiter.Charge
// the difference, or refund it, when the answer has ended. A charge is
// never refused: past the quota the key goes into debt, which later
// requests wait out (a bucket's content below zero, a window's count
// above its limit), bounded at one capacity of debt; a refund gives back
// what the reservation still counts, never past a fresh key's state. The
// leaky bucket cannot be charged. driver.Charger gives each algorithm's rules.
//
// Packages for other roles: limiter/driver is the contract a Store
// implements (the algorithms' steps and state); limiter/perkey holds the
// per-client features stores offer beside limits (bans, overrides,
// concurrency slots).
//
// Stability: the module is v0. This package's names and their meaning are
// what v1 will keep; limiter/driver and limiter/perkey may still change
// between minor versions, as stores and the proxy need.
package limiter
