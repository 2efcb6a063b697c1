// Package redisstore is limitproxy's limiter.Store on Redis, for several
// proxy instances that must share one limit.
//
// One decision is one round trip: a Lua script (decide.lua, run with
// EVALSHA and loaded again on NOSCRIPT) decides every limit of a policy for
// a client key, and writes their new states only if all admit. Concurrent
// decisions are batched automatically (batch.go): one script call decides
// many on one node, and on each master of a Redis Cluster. Time comes
// from Redis TIME inside the script, so proxies whose clocks disagree still
// agree on the limits; Options.CallerTime makes the script use the caller's
// instant instead, for tests.
//
// Resolution. Lua in Redis computes with doubles, exact for integers up to
// 2^53, so the script works in microseconds (TIME's resolution) and a token
// bucket counts millionths of a token; Check refuses the rare parameters
// whose products would not stay exact. At instants that are whole
// microseconds the decisions are the memory store's, with Retry-After and
// reset rounded up to the microsecond. The leaky bucket is virtual here
// (docs/algorithms.md): the script returns each request's departure delay from a
// shared time at which the exit is free, so the spacing holds across
// instances, but a request whose client leaves still holds its place.
//
// Keys: Options.Prefix, a hash tag made of a 128-bit hash of the client key
// (so all keys of one decision share a Redis Cluster slot), and the limit's
// name.
// Every key has a TTL that ends when its state would be a fresh key's.
package redisstore

import (
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
)

// Interface guard.
var _ limiter.Store = (*Store)(nil)

//go:embed decide.lua
var decideLua string

var decideScript = redis.NewScript(decideLua)

// decideCross is decide.lua for one call deciding keys of several slots
// of one Redis Cluster master: its keys are arguments, not declared
// (Redis refuses declared keys that span slots), and the script may
// touch keys of any slot the node serves.
var decideCross = redis.NewScript("#!lua flags=allow-cross-slot-keys\n" + decideLua)

// Options configures a Store.
type Options struct {
	// Prefix starts every key; "" means "limitproxy:".
	Prefix string
	// Timeout bounds one decision; 0 means 50ms. A decision that misses it
	// returns an error wrapping limiter.ErrStoreUnavailable.
	Timeout time.Duration
	// CallerTime makes decisions at the instant passed to Decide rather
	// than at Redis's TIME. For tests only.
	CallerTime bool
	// OnError says what a decision does when Redis cannot make it in time
	// (or the breaker is open): "local" decides with Fallback, a store on
	// this instance with the same limits (each instance then limits on its
	// own: a degraded but bounded answer); "allow" admits; "deny" rejects,
	// with Retry-After until the breaker's next probe. "" means "local".
	OnError string
	// Fallback is the store "local" uses; required for it.
	Fallback limiter.Store
	// BreakAfter consecutive failures open the circuit breaker; 0 means 5.
	BreakAfter int
	// BreakFor is how long the breaker stays open before it lets one
	// decision through as a probe; 0 means 1s.
	BreakFor time.Duration
	// OnBreaker, if not nil, is called when a node's breaker opens (open
	// true, with the error that opened it) or closes again. Each Cluster
	// master has a breaker of its own (node is its address); a single node
	// or Sentinel's master has one.
	OnBreaker func(node string, open bool, err error)
	// Lease is how long a concurrency limit's slot is held without
	// renewal (slots.go); 0 means DefaultLease.
	Lease time.Duration
}

// Store is the Redis limiter.Store. It is safe for concurrent use.
type Store struct {
	c        redis.UniversalClient
	prefix   string
	timeout  time.Duration
	caller   bool
	onError  string
	fallback limiter.Store
	breakers *breakers
	batch    *batcher
	cluster  *redis.ClusterClient // nil unless Redis Cluster
	single   string               // the address of a single-node client, else ""
	name     string               // the node of a client that is not Cluster
	args     sync.Map             // a limit's Binding → string, its encoded parameters
	nargs    atomic.Int64         // entries in args
	errors   atomic.Int64
	lastErr  atomic.Pointer[error]
	lease    time.Duration
	leases   *leases
	skew     time.Duration // tests: with CallerTime, the script's clock ahead of the caller's
}

// New returns a Store deciding on c. It fails only for an on_error it does
// not know, or "local" without a Fallback.
func New(c redis.UniversalClient, o Options) (*Store, error) {
	if o.Prefix == "" {
		o.Prefix = "limitproxy:"
	}
	if o.Timeout <= 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if o.OnError == "" {
		o.OnError = "local"
	}
	switch {
	case o.OnError != "local" && o.OnError != "allow" && o.OnError != "deny":
		return nil, fmt.Errorf("redisstore: on_error %q is not local, allow or deny", o.OnError)
	case o.OnError == "local" && o.Fallback == nil:
		return nil, errors.New("redisstore: on_error \"local\" needs a Fallback store")
	}
	if o.BreakAfter <= 0 {
		o.BreakAfter = 5
	}
	if o.BreakFor <= 0 {
		o.BreakFor = time.Second
	}
	slack := 0
	if o.CallerTime {
		// The caller's instants; keys must outlive them on Redis's clock.
		slack = 3600_000
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	cc, _ := c.(*redis.ClusterClient)
	s := &Store{c: c, prefix: o.Prefix, timeout: o.Timeout, caller: o.CallerTime, onError: o.OnError, fallback: o.Fallback,
		lease: o.Lease, leases: newLeases(), cluster: cc, single: single(c), name: "sentinel",
		breakers: &breakers{after: o.BreakAfter, pause: o.BreakFor, notify: o.OnBreaker},
		batch:    &batcher{c: c, timeout: o.Timeout, slack: slack, cluster: cc}}
	if s.single != "" {
		s.name = s.single
	}
	return s, nil
}

// Errors returns how many decisions Redis failed to make (timeouts,
// refused connections, script errors) since the store was created;
// decisions an open breaker kept from Redis, and those whose caller left
// before Redis answered, are not counted.
func (s *Store) Errors() int64 { return s.errors.Load() }

// LastError returns the last error Redis gave a decision, or nil.
func (s *Store) LastError() error {
	if p := s.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Degraded reports whether a node's breaker is open: decisions on its
// keys follow on_error.
func (s *Store) Degraded() bool {
	for _, n := range s.breakers.states() {
		if n.Open {
			return true
		}
	}
	return false
}

// Ping checks that Redis answers within the store's timeout.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.c.Ping(ctx).Err()
}

// guard returns the breaker of the node holding clientKey's state.
func (s *Store) guard(ctx context.Context, clientKey string, now time.Time) *breaker {
	return s.breakers.get(s.node(ctx, clientKey), now)
}

// Check is the package's Check: a limit the Redis store cannot decide
// exactly (limits built at run time, per-key overrides, are checked with
// it through any Store that has the method).
func (s *Store) Check(l limiter.Limit) error { return Check(l) }

// Check reports whether l can be decided exactly by the Redis store: its
// times must be whole microseconds and the products the script forms must
// stay below 2^53 (driver.Limit.ScriptParams). The configuration calls it
// for every limit when the store is Redis, so that a file that cannot
// work is refused at load.
func Check(l limiter.Limit) error {
	d := l.Driver()
	_, err := d.ScriptParams()
	return err
}

// maxEncoded bounds the cache of encoded limit parameters.
const maxEncoded = 4096

// encoded returns the script argument of a limit (algorithm and five
// parameters, as six little-endian int64s), computed once per
// binding: a Limiter's limits never change, and each has its own Binding,
// which keys the cache.
func (s *Store) encoded(l *driver.Limit) (string, error) {
	if v, ok := s.args.Load(l.Binding()); ok {
		return v.(string), nil
	}
	p, err := l.ScriptParams()
	if err != nil {
		return "", err
	}
	enc := string(appendInt64s(nil, p[:]...))
	if h := l.Binding(); h != 0 { // 0 for a limit not bound by limiter.New
		// Every reload brings new Limiters, so the cache is bounded: past
		// maxEncoded entries it starts again (the live limits come back on
		// their next decision).
		if s.nargs.Add(1) > maxEncoded {
			s.args.Clear()
			s.nargs.Store(1)
		}
		s.args.Store(h, enc)
	}
	return enc, nil
}

// argument returns the script argument of a limit for a decision at now:
// its encoded parameters and, for a calendar window, whose bounds the
// script cannot compute, the windows around now (driver.Limit.ScriptGrid),
// five more int64s.
func (s *Store) argument(l *driver.Limit, now time.Time) (string, error) {
	enc, err := s.encoded(l)
	if err != nil {
		return "", err
	}
	if g, ok := l.ScriptGrid(now); ok {
		var buf [48 + 40]byte
		enc = string(appendInt64s(append(buf[:0], enc...), g[:]...))
	}
	return enc, nil
}

// appendInt64s appends vs as little-endian int64s, the form decide.lua
// unpacks its numeric arguments from.
func appendInt64s(b []byte, vs ...int64) []byte {
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// appendKey appends the Redis key of one limit's state for a client key:
// prefix, a hash tag made of a 128-bit hash of the client key (the same
// for every limit of a decision, spread evenly over Redis Cluster slots,
// never the key itself: keys are not stored or logged), and the limit's
// name. The hash is two FNV-1a 64 passes with different offsets, written
// inline so that building a key allocates nothing but the key.
func appendKey(b []byte, prefix, clientKey, name string) []byte {
	const prime = 1099511628211
	h1, h2 := uint64(14695981039346656037), uint64(0x6c62272e07bb0142)
	for i := 0; i < len(clientKey); i++ {
		h1 = (h1 ^ uint64(clientKey[i])) * prime
		h2 = (h2 ^ uint64(clientKey[i])) * prime
	}
	var sum [16]byte
	binary.BigEndian.PutUint64(sum[:8], h1)
	binary.BigEndian.PutUint64(sum[8:], h2)
	b = append(b, prefix...)
	b = append(b, '{')
	b = hex.AppendEncode(b, sum[:])
	b = append(b, '}')
	return append(b, name...)
}

// Decide implements limiter.Store. When Redis cannot decide in time, or the
// breaker is open, it follows on_error and returns no error.
func (s *Store) Decide(ctx context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	br := s.guard(ctx, keys.For(0), now)
	ok, probe := br.allow(now)
	if !ok {
		return s.degraded(ctx, br, limits, keys, now, n)
	}
	d, err := s.decide(ctx, limits, keys, now, n)
	if err != nil && !errors.Is(err, limiter.ErrStoreUnavailable) {
		// A parameter the store cannot take: not Redis's fault.
		br.done(now, probe, nil)
		return d, err
	}
	if s.failed(ctx, br, now, probe, err) {
		return s.degraded(ctx, br, limits, keys, now, n)
	}
	return d, nil
}

// degraded decides without Redis, per on_error; br is the breaker of the
// key's node.
func (s *Store) degraded(ctx context.Context, br *breaker, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	switch s.onError {
	case "local":
		d, err := s.fallback.Decide(ctx, limits, keys, now, n)
		d.Degraded = true
		return d, err
	case "allow":
		q := quota(limits[0])
		return driver.Decision{Allowed: true, Degraded: true, Limit: q, Remaining: q, ResetAt: now}, nil
	}
	retry := max(time.Second, br.retryAt().Sub(now))
	return driver.Decision{RetryAfter: retry, Degraded: true, Limit: quota(limits[0]), ResetAt: now.Add(retry)}, nil
}

// Peek implements limiter.Store. It asks Redis, past the breaker, and
// returns Redis's error rather than following on_error.
func (s *Store) Peek(ctx context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	return s.run(ctx, limits, keys, now, n, true)
}

// Wait implements limiter.Store: the queue is virtual, so a request waits
// its Delay; one the in-memory fallback queued (on_error "local") waits
// there.
func (s *Store) Wait(ctx context.Context, d driver.Decision) error {
	if d.Ticket != 0 && s.fallback != nil {
		return s.fallback.Wait(ctx, d)
	}
	if d.Delay <= 0 {
		return nil
	}
	t := time.NewTimer(d.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Reset implements limiter.Store: it deletes the key's state for every
// limit (one DEL; the keys share a hash tag, so also on Redis Cluster).
func (s *Store) Reset(ctx context.Context, limits []driver.Limit, key string) error {
	keys := make([]string, len(limits))
	var buf [256]byte
	for i := range limits {
		keys[i] = string(appendKey(buf[:0], s.prefix, key, limits[i].Name()))
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.c.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("%w: redis: %w", limiter.ErrStoreUnavailable, err)
	}
	return nil
}

// decide asks Redis.
func (s *Store) decide(ctx context.Context, limits []driver.Limit, keys driver.Keys, now time.Time, n int64) (driver.Decision, error) {
	return s.run(ctx, limits, keys, now, n, false)
}

// run runs the script; dry decides without writing.
func (s *Store) run(ctx context.Context, limits []driver.Limit, clientKeys driver.Keys, now time.Time, n int64, dry bool) (driver.Decision, error) {
	if _, one := clientKeys.Single(); s.cluster != nil && !one {
		return driver.Decision{}, ErrClusterKeys
	}
	keys := make([]string, len(limits))
	args := make([]any, 0, 1+len(limits))
	at, flag := int64(-1), int64(0) // -1: Redis's TIME
	if s.caller {
		at = now.Add(s.skew).UnixNano() / 1000
	}
	if dry {
		flag = 1
	}
	var head [32]byte
	args = append(args, string(appendInt64s(head[:0], at, n, int64(len(limits)), flag)))
	var buf [256]byte
	for i := range limits {
		enc, err := s.argument(&limits[i], now)
		if err != nil {
			return driver.Decision{}, err
		}
		keys[i] = string(appendKey(buf[:0], s.prefix, clientKeys.For(i), limits[i].Name()))
		args = append(args, enc)
	}
	// The pipeline that carries this decision has the store's timeout as
	// its deadline; ctx can only end the wait sooner.
	res, err := s.batch.run(ctx, keys, args)
	if err != nil {
		return driver.Decision{}, fmt.Errorf("%w: redis: %w", limiter.ErrStoreUnavailable, err)
	}
	if len(res) != replyValues*len(limits)+1 {
		return driver.Decision{}, errors.New("redis: unexpected reply from the decide script")
	}
	redisNow := res[len(res)-1]
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	var d driver.Decision
	for i := range limits {
		r := res[replyValues*i : replyValues*i+replyValues]
		x := driver.Decision{
			Allowed:   r[0] == 1,
			Remaining: r[2],
			Delay:     us(r[4]),
			// Relative to the instant the script used, applied to the
			// caller's: headers stay right whatever the clocks say.
			ResetAt: now.Add(us(r[3] - redisNow)),
			Limit:   quota(limits[i]),
		}
		if r[5] != 0 {
			x.Next = max(0, us(r[5]-redisNow))
		}
		switch {
		case r[1] < 0:
			x.RetryAfter = limiter.Never
		case !x.Allowed:
			x.RetryAfter = us(r[1])
		}
		d.Merge(i, x)
	}
	return d, nil
}

// replyValues is how many values decide.lua replies per limit: allowed,
// retry, remaining, reset, delay and next.
const replyValues = 6

// ErrClusterKeys is returned for a decision whose limits count under
// different client keys on Redis Cluster: their keys would live in
// different hash slots, and one script call cannot decide them atomically.
// Configuration validation refuses such policies with Cluster.
var ErrClusterKeys = errors.New("redis: on Redis Cluster the limits of one policy must share one client key")

// quota is the Limit a decision reports: burst, limit, or for a leaky
// bucket queue + 1 + delay (driver.Limit.Quota).
func quota(l driver.Limit) int64 {
	q, _ := l.Quota()
	return q
}
