// Package driver is the contract between package limiter and the stores
// that keep its state: what a Store implements and what it may call. A
// caller of limiter.Limiter never needs it; a store's author does,
// as database/sql/driver serves database drivers beside database/sql.
// The name is that one's, for the same reason: limiter is what users
// import, driver is what implementations import, and the split lets each
// change at its own pace (limiter's API is the stable one).
//
// # What a Store gets
//
// limiter.New validates each limit with the driver's constructors
// (NewLimit, NewTokenBucket, …) and binds them (Bind): a bound Limit has
// a Name, the key of its state in the store, a dense StateID for that
// name in this process, and a Binding unique to the Limiter, under which
// a store may cache what it derives from the parameters. Every call of
// Store.Decide then passes the Limiter's bound limits, the client keys
// (Keys: one for every limit, or one per limit) and the instant.
//
// # What a Store does with it
//
// A store keeps one state per (limit Name, client key), in States the
// limit makes (NewStates): arrays of its algorithm's own state values,
// whose zero values are fresh keys, which the store only indexes and
// moves. Under one lock (or one script) it Peeks every limit's state, and
// Steps them only if all admit, merging the per-limit decisions with
// Decision.Merge in order; IdleAt says when a state is fresh again and
// may be dropped, Charge charges one after the fact. A queued limit (the
// leaky bucket, Queued) has the store keep a real queue per key, which
// the store describes to the step (Queue). Nothing a store does depends
// on the algorithm. The memory store (limiter/memstore) applies the steps
// directly; the Redis store (limiter/redisstore) sends ScriptParams to
// decide.lua, which runs the same arithmetic in Lua. limitertest.Run
// holds any store to the same decisions.
//
// # An algorithm is one file
//
// Each algorithm is one file of this package (tokenbucket.go,
// leakybucket.go, fixedwindow.go, slidinglog.go, slidingcounter.go): its
// …Params and constructor, and its compiled parameters, which implement
// the one interface every part of the program reaches an algorithm
// through (algo, in algorithm.go, with the table of algorithms): its
// configuration keys and defaults (Spec), quota, description, state
// layout and steps, charges, scaling for overrides, and the parameters of
// its step in the Redis store's script. A new algorithm is such a file,
// a constant and an entry in that table, its step in decide.lua and its
// model in limiter/limitertest.
//
// # Algorithms
//
//	algorithm       admits a request of cost c at t iff            memory per key (memstore)
//	token_bucket    the bucket (burst b, refill r) holds ≥ c         16 B state, 24 B slot
//	leaky_bucket    fewer than queue wait and the wait ≤ max_wait    16 B; +~150 B and a timer while
//	                (then waits its turn on a 1/r schedule)          requests wait, +~100 B a waiter
//	fixed_window    count in floor(t/W), or t's calendar period      16 B state, 24 B slot
//	                (calendar.go), + c ≤ limit
//	sliding_log     units admitted in (t−W, t] + c ≤ limit           8 B per unit in the window
//	sliding_window  weighted estimate over `slots` slots + c ≤ limit 8+4·(slots+1) B state
//
// Decisions are exact: time is integer nanoseconds and counts are
// integers. The token bucket counts billionths of a token and advances its
// clock only by whole periods in which it earns a whole number of them,
// carrying the rest, so its content is always the exact rational value of
// the definition; the sliding window compares its weighted estimate in 128
// bits. The conformance suite in limitertest checks every decision against
// naive models written from docs/algorithms.md with big.Rat arithmetic.
//
// Retry-After (Decision.RetryAfter) is the exact time until the same
// request would be admitted if nothing else arrived, rounded up to the
// nanosecond; the proxy rounds it up to whole seconds. A request whose
// weight times cost exceeds a limit's capacity is rejected with Never.
//
// # Charging after the fact
//
// A Store that implements Charger (both stores do) can also charge a
// limit after the request was decided, for costs known only from the
// answer: reserve an estimate with Allow, then limiter.Limiter.Charge
// the difference, or refund it, when the answer has ended. A charge is
// never refused: past the quota the key goes into debt, which later
// requests wait out (a bucket's content below zero, a window's count
// above its limit), bounded at one capacity of debt; a refund gives back
// what the reservation still counts, never past a fresh key's state. The
// leaky bucket cannot be charged. Charger gives each algorithm's rules.
//
// # Time going backwards
//
// Each key's state remembers the latest instant it has seen, and an earlier
// instant is treated as that one: a token bucket credits no refill (and
// never credits the same interval twice), a window counts the request in
// the newest window or slot it has seen, a sliding log treats it as its
// newest entry's instant. Concurrent requests reach a key in an order that
// can differ slightly from their clock readings; this rule makes that
// harmless. It does mean a wall clock stepped back by an hour would hold a
// busy key at its current state until the clock catches up, which is why
// the proxy passes a monotonic-derived instant.
//
// # State across reloads
//
// A Store keys state by (limit name, client key). Bind names each limit from
// its policy name, its algorithm and its ordinal among that policy's limits
// of that algorithm, plus, for fixed and sliding windows, the time grid
// (window, slots). So a reload that keeps a policy's name and a limit's
// algorithm keeps its counters and applies the new numbers from the next
// request: a token bucket keeps its tokens, clamped to a smaller burst (and
// the time since its last request is credited at the new rate); a raised
// window limit admits more at once. A changed algorithm, or a window whose
// length or slots changed, starts fresh, since counts on one grid mean
// nothing on another. State nobody uses any more becomes fresh with time
// and is dropped by the store.
package driver
