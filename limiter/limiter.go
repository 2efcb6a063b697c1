package limiter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Algorithm names one of the five algorithms of docs/algorithms.md. The zero value is
// not an algorithm.
type Algorithm uint8

// The algorithms, with the names the configuration uses for them.
const (
	TokenBucket   Algorithm = iota + 1 // "token_bucket"
	LeakyBucket                        // "leaky_bucket"
	FixedWindow                        // "fixed_window"
	SlidingLog                         // "sliding_log"
	SlidingWindow                      // "sliding_window"
)

var algorithmNames = [...]string{
	TokenBucket:   "token_bucket",
	LeakyBucket:   "leaky_bucket",
	FixedWindow:   "fixed_window",
	SlidingLog:    "sliding_log",
	SlidingWindow: "sliding_window",
}

// ErrUnknownAlgorithm is returned by ParseAlgorithm for a name that is not
// one of the five algorithms.
var ErrUnknownAlgorithm = errors.New("unknown algorithm")

// String returns the configuration name of a, e.g. "token_bucket".
func (a Algorithm) String() string {
	if a == 0 || int(a) >= len(algorithmNames) {
		return "algorithm(" + strconv.Itoa(int(a)) + ")"
	}
	return algorithmNames[a]
}

// ParseAlgorithm returns the algorithm with configuration name s.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a, name := range algorithmNames {
		if a != 0 && name == s {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want token_bucket, leaky_bucket, fixed_window, sliding_log or sliding_window)", ErrUnknownAlgorithm, s)
}

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

// Decision is the outcome of one request against one limit or, as returned by
// Limiter.Allow, against every limit of a policy. It is a plain value; the
// zero Decision is a rejection with no figures.
type Decision struct {
	// Allowed reports whether the request is admitted (possibly after Delay).
	// A Charge is never refused: its Decision is always allowed.
	Allowed bool
	// Capped reports that a Charge could not apply all its units because a
	// limit reached its debt bound (see Charger); false for Allow. (A bool
	// beside Allowed fits in the padding: the size does not change.)
	Capped bool
	// Degraded reports that the store could not decide and followed its
	// on_error rule instead (the Redis store without Redis): the request
	// was not measured against the shared limit. Also in the padding.
	Degraded bool
	// Index is the position, among the limiter's limits, of the limit that
	// Limit, Remaining, ResetAt and Next describe: the most restrictive
	// one. (An int32 beside Allowed keeps a Decision at 11 words: a word
	// more cost decisions about 40 ns, BenchmarkHotKey.)
	Index int32
	// Delay is how long an admitted request waits in a leaky-bucket queue
	// before it may be forwarded; 0 for the other algorithms. With the memory
	// store it is an upper bound: waiters ahead that leave make it shorter.
	// Use Limiter.Wait rather than sleeping for Delay.
	Delay time.Duration
	// RetryAfter is, for a rejected request, the time after which the same
	// request would be admitted if nothing else arrived; 0 when allowed.
	RetryAfter time.Duration
	// Limit is the quota of the limit these figures describe: burst,
	// limit per window, or queue size for the leaky bucket.
	Limit int64
	// Remaining is how many more requests of cost 1 that limit would admit
	// now, after this request.
	Remaining int64
	// ResetAt is when that limit is back to its fresh state (Remaining ==
	// Limit) if nothing else arrives.
	ResetAt time.Time
	// Next is how long after the decision's instant that limit makes
	// more quota available — Remaining grows by at least one — if nothing
	// else arrives: the draft-10 meaning of the RateLimit field's t. For a
	// rejection it is never longer than RetryAfter. 0 when nothing more
	// can become available (Remaining == Limit), or at once.
	Next time.Duration
	// Ticket identifies the place of a request queued by a Store that
	// keeps a real queue (the memory store); 0 for none. Limiter.Wait
	// hands it back to the Store.
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
// start from the zero Decision at index 0.
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

// ErrRejected is returned by Limiter.Wait for a rejected request.
var ErrRejected = errors.New("limiter: request rejected")

// Limiter is one policy's limits bound to a Store: the unit the proxy asks
// "may this request pass?". A Limiter is immutable and safe for concurrent
// use; a reload builds a new one, and state carries over through the Store
// because it is keyed by the limits' names (see New).
type Limiter struct {
	store  Store
	policy string
	limits []Limit
}

// MaxLimits is the most limits one Limiter (one policy) may have.
const MaxLimits = 16

// New binds limits, in order, to store under the policy name policy. Each
// limit's state lives in the store under a name made of the policy name, the
// algorithm and the limit's ordinal among the policy's limits of that
// algorithm, so that a reload which keeps a policy's name and a limit's
// algorithm keeps that limit's counters, and a changed algorithm starts
// fresh; a shared limit (Limit.Shared) lives under its share's name
// instead, the same in every policy that uses it. At most one leaky bucket
// is allowed, since a request can wait in only one queue, and a share at
// most once.
func New(store Store, policy string, limits ...Limit) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("limiter: nil store")
	}
	if len(limits) == 0 {
		return nil, errors.New("limiter: no limits")
	}
	if len(limits) > MaxLimits {
		return nil, fmt.Errorf("limiter: %d limits in one policy; at most %d", len(limits), MaxLimits)
	}
	var seen [len(algorithmNames)]int
	leaky := false
	ls := make([]Limit, len(limits))
	for i, l := range limits {
		if l.alg == 0 {
			return nil, fmt.Errorf("limiter: limit %d was not built by a New… constructor", i)
		}
		if l.alg == LeakyBucket {
			if leaky {
				return nil, errors.New("limiter: more than one leaky_bucket in one policy")
			}
			leaky = true
		}
		for j := range i {
			if l.share != "" && ls[j].share == l.share {
				return nil, fmt.Errorf("limiter: shared limit %q twice in one policy", l.share)
			}
		}
		l.name = stateName(policy, &l, seen[l.alg])
		l.id = stateID(l.name)
		l.binding = bindings.Add(1)
		if l.share == "" {
			seen[l.alg]++
		}
		ls[i] = l
	}
	return &Limiter{store: store, policy: policy, limits: ls}, nil
}

// StateNames returns the names New gives limits' state for policy, in
// order, without binding them to a Store (a reload uses it to find the state
// of limits that are gone).
func StateNames(policy string, limits ...Limit) []string {
	var seen [len(algorithmNames)]int
	names := make([]string, len(limits))
	for i := range limits {
		names[i] = stateName(policy, &limits[i], seen[limits[i].alg])
		if limits[i].share == "" {
			seen[limits[i].alg]++
		}
	}
	return names
}

// stateName builds the Store name of a limit. The policy name is
// length-prefixed so that no policy name can collide with another's limits;
// a shared limit's name is its share's, after "=", which no length prefix
// starts with, so that every policy using it finds the same state. The
// window algorithms' names also carry their time grid (window, and slots),
// because counts kept on one grid mean nothing on another: changing a
// fixed or sliding window's length or slots starts it fresh.
func stateName(policy string, l *Limit, ordinal int) string {
	var name string
	if l.share != "" {
		name = "=" + strconv.Itoa(len(l.share)) + ":" + l.share + "/" + l.alg.String()
	} else {
		name = strconv.Itoa(len(policy)) + ":" + policy + "/" + l.alg.String() + "/" + strconv.Itoa(ordinal)
	}
	switch l.alg {
	case FixedWindow:
		name += "/" + strconv.FormatInt(int64(l.fw.Window), 10)
	case SlidingWindow:
		name += "/" + strconv.FormatInt(int64(l.sw.Window), 10) + "/" + strconv.Itoa(l.sw.Slots)
	}
	return name
}

// Allow decides a request of weight n (normally 1; each limit multiplies it
// by its own cost) from client key at instant now, against every limit of
// l at once: the request is admitted only if every limit admits it, and a
// rejected request consumes nothing from any limit. The key may be any
// string; stores hash it. An error means the store could not decide (see
// ErrStoreUnavailable); the Decision is then the zero value.
func (l *Limiter) Allow(ctx context.Context, key string, now time.Time, n int64) (Decision, error) {
	if n <= 0 {
		return Decision{}, fmt.Errorf("limiter: weight %d must be at least 1", n)
	}
	return l.store.Decide(ctx, l.limits, OneKey(key), now, n)
}

// SkipKey, as a key of AllowKeys, leaves that limit out of the decision:
// it neither counts the request nor can reject it (a limit whose key the
// request lacks, with on_missing "skip"). Client keys are never this
// string.
const SkipKey = "\x00skip"

// AllowKeys is Allow with a client key per limit: limit i counts the
// request under keys[i] (a policy limited per address and per API key at
// once), or not at all if keys[i] is SkipKey. len(keys) must be
// len(Limits()). With every limit skipped the request is allowed with no
// figures and Index -1.
func (l *Limiter) AllowKeys(ctx context.Context, keys []string, now time.Time, n int64) (Decision, error) {
	if n <= 0 {
		return Decision{}, fmt.Errorf("limiter: weight %d must be at least 1", n)
	}
	if len(keys) != len(l.limits) {
		return Decision{}, fmt.Errorf("limiter: %d keys for %d limits", len(keys), len(l.limits))
	}
	if !slices.Contains(keys, SkipKey) {
		return l.store.Decide(ctx, l.limits, PerLimit(keys), now, n)
	}
	// Decide the others; Index back to l's numbering.
	var idx [MaxLimits]int32
	lims := make([]Limit, 0, len(l.limits))
	ks := make([]string, 0, len(l.limits))
	for i, k := range keys {
		if k != SkipKey {
			idx[len(lims)] = int32(i)
			lims = append(lims, l.limits[i])
			ks = append(ks, k)
		}
	}
	if len(lims) == 0 {
		return Decision{Allowed: true, Index: -1}, nil
	}
	d, err := l.store.Decide(ctx, lims, PerLimit(ks), now, n)
	d.Index = idx[d.Index]
	return d, err
}

// Peek returns the decision Allow would return for key at now, without
// changing any state.
func (l *Limiter) Peek(ctx context.Context, key string, now time.Time) (Decision, error) {
	return l.store.Peek(ctx, l.limits, OneKey(key), now, 1)
}

// PeekKeys returns the decision AllowKeys would return for keys at now
// (no key may be SkipKey), without changing any state.
func (l *Limiter) PeekKeys(ctx context.Context, keys []string, now time.Time) (Decision, error) {
	if len(keys) != len(l.limits) {
		return Decision{}, fmt.Errorf("limiter: %d keys for %d limits", len(keys), len(l.limits))
	}
	return l.store.Peek(ctx, l.limits, PerLimit(keys), now, 1)
}

// Wait blocks until a request admitted by Allow may be forwarded: at once
// for a Decision without Delay, when its place in the memory store's
// leaky-bucket queue is released, or after Delay for a store whose queue is
// virtual. If ctx ends first, the request leaves the queue (those behind
// it move up) and Wait returns ctx's error; the request must then not be
// forwarded. A rejected Decision returns ErrRejected.
func (l *Limiter) Wait(ctx context.Context, d Decision) error {
	if !d.Allowed {
		return ErrRejected
	}
	if d.Delay <= 0 && d.Ticket == 0 {
		return nil
	}
	return l.store.Wait(ctx, d)
}

// Reset forgets key's state for every limit of l.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	return l.store.Reset(ctx, l.limits, key)
}

// Policy returns the policy name l was built with.
func (l *Limiter) Policy() string { return l.policy }

// Limits returns l's limits, in order. The slice must not be modified.
func (l *Limiter) Limits() []Limit { return l.limits }
