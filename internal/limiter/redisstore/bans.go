package redisstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/limiter"
	"github.com/limitproxy/limitproxy/internal/limiter/expheap"
)

// Interface guard.
var _ limiter.Bans = (*Bans)(nil)

// DefaultMaxBans bounds the records of one policy on Redis, and of all
// policies together in an instance's mirror, when BanOptions.MaxBans is 0.
const DefaultMaxBans = 1_000_000

// DefaultResync is how often Bans.Run checks that its mirror is current
// when BanOptions.Resync is 0.
const DefaultResync = 10 * time.Second

// tombstoneLife is how long the mirror keeps a tombstone whose message
// never came (a full resync drops it sooner).
const tombstoneLife = time.Minute

// fullEvery: every fullEvery-th check reloads the mirror in full even if
// Redis's sequence says nothing was missed.
const fullEvery = 6

// BanOptions configures Bans. The zero value is usable.
type BanOptions struct {
	// Prefix starts every key and the channel; "" means "limitproxy:",
	// as for Options.Prefix.
	Prefix string
	// Timeout bounds Ban and Lift, and each call to Redis of List and of
	// a resync; 0 means 50ms, as for Options.Timeout.
	Timeout time.Duration
	// Resync is how often Run checks the mirror against Redis; 0 means
	// DefaultResync.
	Resync time.Duration
	// MaxBans bounds the records of one policy on Redis and of all
	// policies in the mirror; 0 means DefaultMaxBans. A full policy, or
	// mirror shard, drops the record that expires soonest.
	MaxBans int
	// Clock, if not nil, is the clock the instants passed to Ban come
	// from; Run judges expiry by it. nil means time.Now.
	Clock func() time.Time
}

// Bans is the penalty box on Redis (limiter.Bans), shared by every
// instance using the same Redis and prefix. Create it with NewBans, and
// run Run for as long as it is used; it is safe for concurrent use.
//
// # Layout
//
// Every key of the penalty box shares one hash tag (appendKey with the
// pseudo client key "bans"), so that one script can update them together,
// also on Redis Cluster:
//
//	…b/h/<policy>  HASH  client key → "since until level expires seq"
//	               (instants in Unix ms, the caller's clock)
//	…b/x/<policy>  ZSET  client key, scored by its record's expires (ms)
//	…b/policies    ZSET  policy, scored by its records' latest expires
//	…b/seq         counter of changes, never expires
//
// and one pub/sub channel, <prefix>bans. Ban and Lift are scripts: each
// change increments b/seq and publishes "seq level since until expires
// len(policy)\n" + policy + key from inside the script (level 0 for a
// lift), so messages carry the new record, arrive in the order of the
// changes, and are numbered without gaps. The keys' TTLs end with their
// latest record; expired records are deleted (HDEL) by the next Ban of
// their policy and by the resync, a hundred or a thousand a call. A
// policy holds at most MaxBans records: a new key's record past that
// drops the one that expires soonest, as a lift (a change, with its
// message). ZADD GT needs Redis 6.2 or later.
//
// Instants are kept to the millisecond on Redis: now rounded down,
// durations rounded up. They are the callers' instants, not Redis's TIME
// (Banned compares them with the caller's now); instances whose clocks
// disagree by s start and end bans s apart.
//
// # Mirror
//
// Banned never calls Redis: each instance keeps a mirror of every record,
// sharded by client key, a map lookup under a read lock. Run subscribes to
// the channel and applies each message; its own Ban and Lift apply their
// results at once. Messages whose number does not follow the last one (a
// message lost, or Redis restarted) trigger a full resync: an HSCAN of
// every policy's hash, merged with what the mirror learned meanwhile
// (records carry their change's number, and the newer one wins). So do
// every (re)subscription, and every Resync interval a check of b/seq
// (plus, every sixth, a full resync regardless); a b/seq below the
// mirror's (Redis lost data) replaces the mirror entirely. Until Run has
// loaded the records once, Banned knows only this instance's own bans.
//
// Ban, Lift and List return Redis's errors (wrapping
// limiter.ErrStoreUnavailable); Banned goes on answering from the mirror,
// and Run retries a failed resync.
//
// The mirror holds at most MaxBans records (per shard, as memstore does);
// a full shard drops the record that expires soonest.
type Bans struct {
	follower
	policies string // the policies' ZSET
	prefix   string
	max      int
	clock    func() time.Time
	mirror   *mirror
}

// NewBans returns a penalty box on c. Start Run.
func NewBans(c redis.UniversalClient, o BanOptions) *Bans {
	if o.Prefix == "" {
		o.Prefix = "limitproxy:"
	}
	if o.Timeout <= 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if o.Resync <= 0 {
		o.Resync = DefaultResync
	}
	if o.MaxBans <= 0 {
		o.MaxBans = DefaultMaxBans
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	b := &Bans{prefix: o.Prefix, max: o.MaxBans, clock: o.Clock, mirror: newMirror(o.MaxBans)}
	b.follower = newFollower("bans", c, o.Prefix+"bans", b.key("b/seq"), o.Timeout, o.Resync)
	b.policies = b.key("b/policies")
	return b
}

// key returns the Redis key of one part of the penalty box.
func (b *Bans) key(name string) string {
	var buf [128]byte
	return string(appendKey(buf[:0], b.prefix, "bans", name))
}

// policyKeys returns a policy's hash of records and its ZSET by expiry.
func (b *Bans) policyKeys(policy string) (hash, byExpiry string) {
	return b.key("b/h/" + policy), b.key("b/x/" + policy)
}

// banScript records an offence. KEYS: b/seq, b/policies, the policy's
// hash and ZSET. ARGV: policy, key, now (ms), memory (ms), the most
// records of a policy, the channel, then the ban of each level from 1 on
// (ms), the last one for every level past it. It replies level, since,
// until, expires and the change's number.
var banScript = redis.NewScript(`
local call, format, tonumber = redis.call, string.format, tonumber
local policy, key, channel = ARGV[1], ARGV[2], ARGV[6]
local now, memory, most = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local function publish(seq, level, since, untl, expires, k)
  call('PUBLISH', channel, format('%.0f %.0f %.0f %.0f %.0f %d\n', seq, level, since, untl, expires, #policy) .. policy .. k)
end
-- Records expired at now go first, a bounded number a call.
local gone = call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 100)
if #gone > 0 then
  call('HDEL', KEYS[3], unpack(gone))
  call('ZREM', KEYS[4], unpack(gone))
end
local level, since = 1, now
local prev = call('HGET', KEYS[3], key)
if prev then
  local ps, pu, pl, pe, pq = string.match(prev, '^(%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)')
  ps, pu, pl, pe = tonumber(ps), tonumber(pu), tonumber(pl), tonumber(pe)
  if now < pe then
    -- An offence while the ban runs is one the ban answers already.
    if now < pu then return {pl, ps, pu, pe, tonumber(pq)} end
    if now - ps < memory then level = pl + 1 end
  end
end
local u = since + tonumber(ARGV[6 + math.min(level, #ARGV - 6)])
local expires = math.max(u, since + memory)
local seq = call('INCR', KEYS[1])
local new = call('HSET', KEYS[3], key, format('%.0f %.0f %.0f %.0f %.0f', since, u, level, expires, seq)) == 1
call('ZADD', KEYS[4], expires, key)
call('ZADD', KEYS[2], 'GT', expires, policy)
publish(seq, level, since, u, expires, key)
-- The keys live as long as their latest record (TTLs are relative, so
-- they hold whatever Redis's clock says).
local ttl = expires - now
for i = 2, 4 do
  if call('PTTL', KEYS[i]) < ttl then call('PEXPIRE', KEYS[i], ttl) end
end
if new and call('ZCARD', KEYS[4]) > most then
  local v = call('ZRANGE', KEYS[4], 0, 1)
  local victim = v[1]
  if victim == key then victim = v[2] end
  call('HDEL', KEYS[3], victim)
  call('ZREM', KEYS[4], victim)
  publish(call('INCR', KEYS[1]), 0, 0, 0, 0, victim)
end
return {level, since, u, expires, seq}
`)

// liftScript deletes a record. KEYS: b/seq, the policy's hash and ZSET.
// ARGV: policy, key, the channel. It replies the change's number, or 0 if
// there was no record.
var liftScript = redis.NewScript(`
local call = redis.call
if call('HDEL', KEYS[2], ARGV[2]) == 0 then return 0 end
call('ZREM', KEYS[3], ARGV[2])
local seq = call('INCR', KEYS[1])
call('PUBLISH', ARGV[3], string.format('%.0f 0 0 0 0 %d\n', seq, #ARGV[1]) .. ARGV[1] .. ARGV[2])
return seq
`)

// sweepScript deletes the records of a policy expired at ARGV[1] (ms), a
// thousand at most, and replies how many. KEYS: the policy's hash and
// ZSET. No message: mirrors judge expiry themselves.
var sweepScript = redis.NewScript(`
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, 1000)
if #gone > 0 then
  redis.call('HDEL', KEYS[1], unpack(gone))
  redis.call('ZREM', KEYS[2], unpack(gone))
end
return #gone
`)

// Ban implements limiter.Bans: one script call.
func (b *Bans) Ban(ctx context.Context, policy, key string, p limiter.BanParams, now time.Time) (limiter.Ban, error) {
	if err := p.Validate(); err != nil {
		return limiter.Ban{}, err
	}
	hash, byExpiry := b.policyKeys(policy)
	args := []any{policy, key, now.UnixMilli(), ceilMillis(p.Memory), b.max, b.channel}
	for level := int64(1); ; level++ {
		d := p.DurationAt(level)
		args = append(args, ceilMillis(d))
		if d == p.Max || p.Factor == 1 {
			break
		}
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	res, err := banScript.Run(ctx, b.c, []string{b.seqKey, b.policies, hash, byExpiry}, args...).Int64Slice()
	if err == nil && len(res) != 5 {
		err = fmt.Errorf("ban script replied %v", res)
	}
	if err != nil {
		return limiter.Ban{}, b.fail(fmt.Errorf("%w: redis: ban: %w", limiter.ErrStoreUnavailable, err))
	}
	r := mirrorRec{k: banKey{policy, key}, level: res[0], since: res[1] * 1e6, until: res[2] * 1e6, expires: res[3] * 1e6, seq: res[4]}
	b.mirror.local(&r, &b.applied, b.clock().UnixNano())
	return r.ban(), nil
}

func ceilMillis(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// Banned implements limiter.Bans, from the mirror.
func (b *Bans) Banned(policy, key string, now time.Time) (limiter.Ban, bool) {
	return b.mirror.banned(policy, key, now.UnixNano())
}

// Lift implements limiter.Bans: one script call.
func (b *Bans) Lift(ctx context.Context, policy, key string) (bool, error) {
	hash, byExpiry := b.policyKeys(policy)
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	seq, err := liftScript.Run(ctx, b.c, []string{b.seqKey, hash, byExpiry}, policy, key, b.channel).Int64()
	if err != nil {
		return false, b.fail(fmt.Errorf("%w: redis: lift: %w", limiter.ErrStoreUnavailable, err))
	}
	if seq == 0 {
		return false, nil
	}
	now := b.clock().UnixNano()
	b.mirror.local(&mirrorRec{k: banKey{policy, key}, seq: seq, expires: now + int64(tombstoneLife)}, &b.applied, now)
	return true, nil
}

// List implements limiter.Bans. It reads Redis, not the mirror, so that
// the admin API shows what every instance enforces (HSCAN of each policy's
// hash: a List of many records costs Redis no long pause).
func (b *Bans) List(ctx context.Context, policy string, now time.Time, max int) ([]limiter.Ban, error) {
	if max < 1 {
		return nil, nil
	}
	policies := []string{policy}
	if policy == "" {
		var err error
		if policies, err = b.policyNames(ctx); err != nil {
			return nil, b.fail(err)
		}
	}
	ns := now.UnixNano()
	var out []limiter.Ban
	for _, p := range policies {
		err := b.scan(ctx, p, func(r *mirrorRec) {
			if ns < r.until {
				out = append(out, r.ban())
			}
		})
		if err != nil {
			return nil, b.fail(err)
		}
	}
	limiter.SortBans(out)
	return out[:min(len(out), max)], nil
}

// Run keeps the mirror current until ctx is done, then returns nil: it
// subscribes to the channel, applies its messages, loads every record
// when (re)subscribed, and checks the mirror every Resync (see Bans). A
// resync that fails is retried a second later (or at the next check, if
// sooner); meanwhile Banned answers from the mirror as it is. Start it
// once and wait for it.
func (b *Bans) Run(ctx context.Context) error { return b.follow(ctx, b) }

// receive applies one message and reports whether the mirror needs a full
// resync (a message is missing before it, or it cannot be read).
func (b *Bans) receive(payload string) bool {
	r, err := parseMessage(payload)
	if err != nil {
		b.fail(err)
		return true
	}
	return b.mirror.stream(r, &b.applied, b.clock().UnixNano())
}

// parseMessage reads "seq level since until expires len(policy)\n" +
// policy + key, instants in ms.
func parseMessage(s string) (*mirrorRec, error) {
	head, rest, ok := strings.Cut(s, "\n")
	f := strings.Fields(head)
	if !ok || len(f) != 6 {
		return nil, fmt.Errorf("redis: bans: unreadable message %q", s)
	}
	var v [6]int64
	for i := range f {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redis: bans: unreadable message %q", s)
		}
		v[i] = n
	}
	if v[5] < 0 || v[5] > int64(len(rest)) {
		return nil, fmt.Errorf("redis: bans: unreadable message %q", s)
	}
	return &mirrorRec{seq: v[0], level: v[1], since: v[2] * 1e6, until: v[3] * 1e6, expires: v[4] * 1e6,
		k: banKey{rest[:v[5]], rest[v[5]:]}}, nil
}

// resync reloads the mirror from Redis: the change number first, then
// every record (HSCAN, not one long call). A record changed during the scan
// may be read before or after its change; either way its message, numbered
// after the one read first, follows and is applied. Expired records are
// left out and deleted on Redis.
func (b *Bans) resync(ctx context.Context) error {
	now := b.clock()
	seen := b.mirror.seen.Load()
	seq, err := b.seq(ctx)
	if err != nil {
		return err
	}
	policies, err := b.policyNames(ctx)
	if err != nil {
		return err
	}
	ns := now.UnixNano()
	var recs []*mirrorRec
	for _, p := range policies {
		expired := false
		err := b.scan(ctx, p, func(r *mirrorRec) {
			if ns < r.expires {
				recs = append(recs, r)
			} else {
				expired = true
			}
		})
		if err == nil && expired {
			err = b.sweep(ctx, p, now)
		}
		if err != nil {
			return err
		}
	}
	// Policies whose every record has expired leave the list (a Ban
	// meanwhile has raised its policy's score past now).
	cctx, cancel := context.WithTimeout(ctx, b.timeout)
	err = b.c.ZRemRangeByScore(cctx, b.policies, "-inf", strconv.FormatInt(now.UnixMilli(), 10)).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("%w: redis: bans: %w", limiter.ErrStoreUnavailable, err)
	}
	b.mirror.replace(recs, seq, seen, &b.applied, ns)
	return nil
}

// policyNames returns the policies that have records.
func (b *Bans) policyNames(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	names, err := b.c.ZRange(ctx, b.policies, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: redis: bans: %w", limiter.ErrStoreUnavailable, err)
	}
	return names, nil
}

// scan calls fn with every record of policy, expired ones included.
// Records it cannot read are skipped.
func (b *Bans) scan(ctx context.Context, policy string, fn func(*mirrorRec)) error {
	hash, _ := b.policyKeys(policy)
	var cursor uint64
	for {
		cctx, cancel := context.WithTimeout(ctx, b.timeout)
		kv, next, err := b.c.HScan(cctx, hash, cursor, "", 1000).Result()
		cancel()
		if err != nil {
			return fmt.Errorf("%w: redis: bans: %w", limiter.ErrStoreUnavailable, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if r, ok := parseRecord(policy, kv[i], kv[i+1]); ok {
				fn(r)
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// parseRecord reads a hash value, "since until level expires seq" (ms).
func parseRecord(policy, key, v string) (*mirrorRec, bool) {
	f := strings.Fields(v)
	if len(f) != 5 {
		return nil, false
	}
	var n [5]int64
	for i := range f {
		x, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return nil, false
		}
		n[i] = x
	}
	return &mirrorRec{k: banKey{policy, key}, since: n[0] * 1e6, until: n[1] * 1e6, level: n[2], expires: n[3] * 1e6, seq: n[4]}, true
}

// sweep deletes the records of policy expired at now.
func (b *Bans) sweep(ctx context.Context, policy string, now time.Time) error {
	hash, byExpiry := b.policyKeys(policy)
	for {
		cctx, cancel := context.WithTimeout(ctx, b.timeout)
		n, err := sweepScript.Run(cctx, b.c, []string{hash, byExpiry}, now.UnixMilli()).Int64()
		cancel()
		if err != nil {
			return fmt.Errorf("%w: redis: bans: %w", limiter.ErrStoreUnavailable, err)
		}
		if n < 1000 {
			return nil
		}
	}
}

// mirror is an instance's copy of the records on Redis, sharded by client
// key like memstore.Bans. Each record carries the number of the change
// that wrote it, so that a late message never undoes a newer change, and
// a key this instance lifted keeps a tombstone (lifted) until the stream
// of messages has passed its lift. Safe for concurrent use.
type mirror struct {
	seed      maphash.Seed
	shards    []mirrorShard
	perShard  int
	n         atomic.Int64 // records and tombstones: 0 lets banned skip the lock
	evictions atomic.Int64
	// seen is the highest change number applied, from any source: a
	// resync that finds Redis's below it knows Redis lost changes.
	seen atomic.Int64
}

type mirrorShard struct {
	mu   sync.RWMutex
	recs map[banKey]*mirrorRec
	heap expheap.Heap[*mirrorRec]
	_    [64]byte // keep shards' locks on separate cache lines
}

type banKey struct{ policy, key string }

// mirrorRec is a record, instants in Unix ns.
type mirrorRec struct {
	k                     banKey
	since, until, expires int64
	level                 int64 // 0 for a lift (a message's, or a tombstone's)
	seq                   int64
	pos                   int // in the shard's heap
}

// Expiry, Index and SetIndex place r in its shard's heap.
func (r *mirrorRec) Expiry() int64  { return r.expires }
func (r *mirrorRec) Index() int     { return r.pos }
func (r *mirrorRec) SetIndex(i int) { r.pos = i }

func (r *mirrorRec) ban() limiter.Ban {
	return limiter.Ban{Policy: r.k.policy, Key: r.k.key, Since: time.Unix(0, r.since), Until: time.Unix(0, r.until),
		Level: r.level, Expires: time.Unix(0, r.expires)}
}

func newMirror(maxRecs int) *mirror {
	n := 64
	for n > 1 && maxRecs/n < 64 {
		n /= 2
	}
	m := &mirror{seed: maphash.MakeSeed(), shards: make([]mirrorShard, n), perShard: max(1, (maxRecs+n-1)/n)}
	for i := range m.shards {
		m.shards[i].recs = map[banKey]*mirrorRec{}
	}
	return m
}

func (m *mirror) shard(key string) *mirrorShard {
	return &m.shards[maphash.String(m.seed, key)%uint64(len(m.shards))]
}

func (m *mirror) banned(policy, key string, now int64) (limiter.Ban, bool) {
	if m.n.Load() == 0 {
		return limiter.Ban{}, false
	}
	sh := m.shard(key)
	sh.mu.RLock()
	r := sh.recs[banKey{policy, key}]
	if r == nil || now >= r.until { // a tombstone's until is 0
		sh.mu.RUnlock()
		return limiter.Ban{}, false
	}
	ban := r.ban()
	sh.mu.RUnlock()
	return ban, true
}

// stream applies a message from the channel, whose change numbers arrive
// in order: one not after *applied is already in the mirror (from a
// resync). It reports whether one is missing before it.
func (m *mirror) stream(r *mirrorRec, applied *atomic.Int64, now int64) bool {
	sh := m.shard(r.k.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	last := applied.Load()
	if r.seq <= last {
		return false
	}
	applied.Store(r.seq) // under the key's lock: see local
	m.saw(r.seq)
	m.putLocked(sh, r, false, now)
	return r.seq != last+1
}

// local applies this instance's own change, before its message arrives.
// A change whose message the stream has already applied is left alone
// (the mirror has it, or something newer); a lift whose message is still
// to come leaves a tombstone, so that an older ban's message arriving
// meanwhile cannot bring the key back.
func (m *mirror) local(r *mirrorRec, applied *atomic.Int64, now int64) {
	sh := m.shard(r.k.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// The stream applies a message under its key's lock, so if r's has
	// been applied, applied says so now.
	if r.seq <= applied.Load() {
		if e := sh.recs[r.k]; r.level == 0 && e != nil && e.seq < r.seq {
			m.removeLocked(sh, e)
		}
		return
	}
	m.saw(r.seq)
	m.putLocked(sh, r, true, now)
}

// saw raises seen to seq.
func (m *mirror) saw(seq int64) {
	for s := m.seen.Load(); seq > s && !m.seen.CompareAndSwap(s, seq); s = m.seen.Load() {
	}
}

// putLocked applies r unless the mirror has a newer change of its key: a
// ban replaces the record, a lift removes it, or with tomb leaves a
// tombstone. A message that confirms a tombstone removes it. Records
// expired at now (ns) are dropped first. Requires sh.mu held.
func (m *mirror) putLocked(sh *mirrorShard, r *mirrorRec, tomb bool, now int64) {
	m.dropExpiredLocked(sh, now)
	e := sh.recs[r.k]
	if e != nil && e.seq >= r.seq {
		if e.level == 0 && e.seq == r.seq {
			m.removeLocked(sh, e)
		}
		return
	}
	if r.level == 0 && !tomb {
		if e != nil {
			m.removeLocked(sh, e)
		}
		return
	}
	if e == nil {
		if len(sh.recs) >= m.perShard {
			m.evictions.Add(1)
			m.removeLocked(sh, sh.heap[0])
		}
		e = &mirrorRec{k: r.k}
		sh.recs[r.k] = e
		sh.heap.Push(e)
		m.n.Add(1)
	}
	e.since, e.until, e.expires, e.level, e.seq = r.since, r.until, r.expires, r.level, r.seq
	sh.heap.Fix(e.pos)
}

// replace loads a resync's records, read after change number seq, when
// the mirror had seen changes up to seen: the mirror's own entries for
// changes after seq (applied meanwhile) are kept where newer, everything
// else is replaced; all of it if seq is below seen (Redis lost changes).
// Records expired at now (ns) are left out.
func (m *mirror) replace(recs []*mirrorRec, seq, seen int64, applied *atomic.Int64, now int64) {
	byShard := make([][]*mirrorRec, len(m.shards))
	for _, r := range recs {
		i := maphash.String(m.seed, r.k.key) % uint64(len(m.shards))
		byShard[i] = append(byShard[i], r)
	}
	// A change number below the mirror's means Redis lost changes (a
	// restart without persistence, a failover to a replica that lagged):
	// then nothing the mirror holds is newer than the snapshot.
	keepAfter := seq
	if seq < seen {
		keepAfter = math.MaxInt64
		m.seen.Store(seq)
	}
	// Local changes from here on that the snapshot holds are left alone
	// (see local).
	applied.Store(seq)
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		fresh := make(map[banKey]*mirrorRec, len(byShard[i]))
		for _, r := range byShard[i] {
			if now < r.expires {
				fresh[r.k] = r
			}
		}
		for k, e := range sh.recs {
			if f := fresh[k]; e.seq > keepAfter && (f == nil || f.seq < e.seq) {
				fresh[k] = e
			}
		}
		m.n.Add(int64(len(fresh) - len(sh.recs)))
		sh.recs = fresh
		sh.heap = make(expheap.Heap[*mirrorRec], 0, len(fresh))
		for _, r := range fresh {
			sh.heap.Push(r)
		}
		for len(sh.recs) > m.perShard {
			m.evictions.Add(1)
			m.removeLocked(sh, sh.heap[0])
		}
		sh.mu.Unlock()
	}
}

// dropExpiredLocked drops records and tombstones whose expires is not
// after now (ns). Requires sh.mu held.
func (m *mirror) dropExpiredLocked(sh *mirrorShard, now int64) {
	for len(sh.heap) > 0 && sh.heap[0].expires <= now {
		m.removeLocked(sh, sh.heap[0])
	}
}

// removeLocked drops r. Requires sh.mu held.
func (m *mirror) removeLocked(sh *mirrorShard, r *mirrorRec) {
	delete(sh.recs, r.k)
	sh.heap.Remove(r.pos)
	m.n.Add(-1)
}

// len returns the records and tombstones held.
func (m *mirror) len() int { return int(m.n.Load()) }

// Len returns the records (and tombstones) the mirror holds: none means
// no key can be banned, which a caller may check before hashing a key.
func (b *Bans) Len() int { return b.mirror.len() }
