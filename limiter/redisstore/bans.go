package redisstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/internal/expheap"
	"github.com/limitproxy/limitproxy/limiter/perkey"
)

// Interface guard.
var _ perkey.Bans = (*Bans)(nil)

// DefaultMaxBans bounds the records of one policy on Redis, and of all
// policies together in an instance's mirror, when BanOptions.MaxBans is 0.
const DefaultMaxBans = 1_000_000

// DefaultResync is how often Bans.Run checks that its mirror is current
// when BanOptions.Resync is 0.
const DefaultResync = 10 * time.Second

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

// Bans is the penalty box on Redis (perkey.Bans), shared by every
// instance using the same Redis and prefix. Create it with NewBans, and
// run Run for as long as it is used; it is safe for concurrent use.
//
// # Layout
//
// Every key of the penalty box shares one hash tag (appendKey with the
// pseudo client key "bans"), so that one script can update them together,
// also on Redis Cluster:
//
//	…b/h/<policy>  HASH  client key → "since until level expires seq ver"
//	               (instants in Unix ms, the caller's clock)
//	…b/x/<policy>  ZSET  client key, scored by its record's expires (ms)
//	…b/policies    ZSET  policy, scored by its records' latest expires
//	…b/seq         counter of changes, never expires
//	…b/epoch       the counter's epoch (see follower), never expires
//
// and one pub/sub channel, <prefix>bans. Ban and Lift are scripts: each
// change increments b/seq and publishes "epoch seq ver level since until
// expires len(policy)\n" + policy + key from inside the script, so
// messages carry the new record, arrive in the order of the changes, and
// are numbered without gaps. ver, the record's version, orders the writes
// of one key across epochs too: the write's instant, at least one above
// the version it replaces. A lift leaves a tombstone (level 0, until 0)
// until the lifted record would have expired. The keys' TTLs end with
// their latest record; expired records are deleted (HDEL) by the next Ban
// of their policy and by the resync, a hundred or a thousand a call. A
// policy holds at most MaxBans records: a new key's record past that
// drops the one that expires soonest (a change, with its message, expired
// at once). ZADD GT needs Redis 6.2 or later.
//
// Instants are kept to the millisecond on Redis: now rounded down,
// durations rounded up. They are the callers' instants, not Redis's TIME
// (Banned compares them with the caller's now); instances whose clocks
// disagree by s start and end bans s apart.
//
// # Mirror
//
// Banned never calls Redis: each instance keeps a mirror of every record
// and tombstone, sharded by client key, a map lookup under a read lock.
// Run subscribes to the channel and applies each message; its own Ban and
// Lift apply their results at once; a record replaces the mirror's only
// if its version is newer. Messages whose number does not follow the last
// one trigger a full resync: an HSCAN of every policy's hash, merged with
// what the mirror learned meanwhile. So do every (re)subscription, and
// every Resync interval a check of b/seq and b/epoch (plus, every sixth,
// a full resync regardless). Until Run has loaded the records once,
// Banned knows only this instance's own bans.
//
// # When Redis loses data
//
// A restart without persistence, a failover to a replica that lagged,
// FLUSHALL, FLUSHDB or the eviction of the counter: the follower notices
// (another epoch, a counter gone or gone back; see follower) at the first
// message, change or resubscription after it, or at the next Resync check,
// and the resync first writes back every record and tombstone this
// instance holds that Redis may lack (seedScript), each only where Redis
// has no newer version of its key: the newest write wins, a ban made after
// the loss stands, and a lifted ban stays lifted (its tombstone is newer
// than every copy of the ban). Meanwhile Banned goes on answering from the
// mirror, which the loss never empties. Every instance does the same, so
// what any of them held comes back.
//
// Ban, Lift and List return Redis's errors (wrapping
// limiter.ErrStoreUnavailable); Banned goes on answering from the mirror,
// and Run retries a failed resync.
//
// The mirror holds at most MaxBans records and tombstones (per shard, as
// memstore does); a full shard drops the one that expires soonest.
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
	b.follower = newFollower("bans", c, o.Prefix+"bans", b.key("b/seq"), b.key("b/epoch"), o.Timeout, o.Resync)
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

// luaChange is the Lua every script that changes a table starts with:
// change(seqKey, epochKey, candidate) counts a change and returns its
// number and the table's epoch, writing candidate as the epoch when the
// counter is new (its first change, or the first after Redis lost it) or
// the epoch is missing (see follower).
const luaChange = `
local function change(seqKey, epochKey, candidate)
  local seq = redis.call('INCR', seqKey)
  local ep = redis.call('GET', epochKey)
  if seq == 1 or not ep then
    ep = candidate
    redis.call('SET', epochKey, ep)
  end
  return seq, ep
end
`

// luaBanRecord is the Lua that reads a record,
// "since until level expires seq ver" (ms; older records lack ver: their
// since is their version).
const luaBanRecord = `
local function record(v)
  local f = {}
  for n in string.gmatch(v, '%-?%d+') do f[#f + 1] = tonumber(n) end
  return f[1], f[2], f[3], f[4], f[5], f[6] or f[1]
end
`

// luaBanWrite is the Lua that writes a record of the policy (KEYS[3] its
// policies ZSET, KEYS[4] and [5] its hash and ZSET), counts the change
// and publishes it: "epoch seq ver level since until expires
// len(policy)\n" + policy + key. It keeps the keys alive as long as the
// record.
const luaBanWrite = `
local function write(channel, candidate, now, policy, key, since, untl, level, expires, ver)
  local seq, ep = change(KEYS[1], KEYS[2], candidate)
  local format = string.format
  local new = redis.call('HSET', KEYS[4], key, format('%.0f %.0f %.0f %.0f %.0f %.0f', since, untl, level, expires, seq, ver)) == 1
  redis.call('ZADD', KEYS[5], expires, key)
  redis.call('ZADD', KEYS[3], 'GT', expires, policy)
  redis.call('PUBLISH', channel, format('%s %.0f %.0f %.0f %.0f %.0f %.0f %d\n', ep, seq, ver, level, since, untl, expires, #policy) .. policy .. key)
  -- TTLs are relative, so they hold whatever Redis's clock says.
  local ttl = expires - now
  if ttl > 0 then
    for i = 3, 5 do
      if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
    end
  end
  return seq, ep, new
end
`

// banScript records an offence. KEYS: b/seq, b/epoch, b/policies, the
// policy's hash and ZSET. ARGV: policy, key, now (ms), memory (ms), the
// most records of a policy, the channel, the epoch candidate, then the
// ban of each level from 1 on (ms), the last one for every level past
// it. It replies level, since, until, expires, the change's number, the
// record's version and the epoch; for an offence during a running ban,
// which changes nothing, the record as it is and epoch 0.
//
// A record's version orders the writes of its key, across epochs too:
// each write's is its instant (the caller's clock, ms), but at least one
// more than the version it replaces. A tombstone (a lifted ban: level 0,
// until 0) keeps its key's version until the lifted record would have
// expired.
var banScript = redis.NewScript(luaChange + luaBanRecord + luaBanWrite + `
local policy, key, channel, candidate = ARGV[1], ARGV[2], ARGV[6], ARGV[7]
local now, memory, most = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
-- Records expired at now go first, a bounded number a call.
local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 100)
if #gone > 0 then
  redis.call('HDEL', KEYS[4], unpack(gone))
  redis.call('ZREM', KEYS[5], unpack(gone))
end
local level, pv = 1, -1
local prev = redis.call('HGET', KEYS[4], key)
if prev then
  local ps, pu, pl, pe, pq
  ps, pu, pl, pe, pq, pv = record(prev)
  if pl > 0 and now < pe then
    -- An offence while the ban runs is one the ban answers already.
    if now < pu then return {pl, ps, pu, pe, pq, pv, 0} end
    if now - ps < memory then level = pl + 1 end
  end
end
local u = now + tonumber(ARGV[7 + math.min(level, #ARGV - 7)])
local expires = math.max(u, now + memory)
local ver = math.max(now, pv + 1)
local seq, ep, new = write(channel, candidate, now, policy, key, now, u, level, expires, ver)
if new and redis.call('ZCARD', KEYS[5]) > most then
  local v = redis.call('ZRANGE', KEYS[5], 0, 1)
  local victim = v[1]
  if victim == key then victim = v[2] end
  local vv = redis.call('HGET', KEYS[4], victim)
  local _, _, _, _, _, vver = record(vv or '0 0 0 0 0 0')
  redis.call('HDEL', KEYS[4], victim)
  redis.call('ZREM', KEYS[5], victim)
  -- A deletion: level 0, expired.
  local s2, e2 = change(KEYS[1], KEYS[2], candidate)
  redis.call('PUBLISH', channel, string.format('%s %.0f %.0f 0 0 0 0 %d\n', e2, s2, vver + 1, #policy) .. policy .. victim)
end
return {level, now, u, expires, seq, ver, tonumber(ep)}
`)

// liftScript lifts a ban: the record becomes a tombstone that lasts
// until the record would have expired, so that a copy of the ban that an
// instance writes back after Redis lost data (older) cannot bring it
// back. KEYS: as banScript's. ARGV: policy, key, the channel, the epoch
// candidate, now (ms), and the expiry (ms) of this instance's copy of the
// record, 0 if it has none: a record Redis lost but the instance holds is
// lifted too. It replies the change's number (0 if there was no ban to
// lift), the tombstone's version, the epoch and its expiry.
var liftScript = redis.NewScript(luaChange + luaBanRecord + luaBanWrite + `
local policy, key, channel, candidate = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local now, held = tonumber(ARGV[5]), tonumber(ARGV[6])
local expires, pv = 0, -1
local prev = redis.call('HGET', KEYS[4], key)
if prev then
  local ps, pu, pl, pe, pq
  ps, pu, pl, pe, pq, pv = record(prev)
  if pl > 0 then expires = pe end
elseif held > now then
  expires = held
end
if expires == 0 then return {0, 0, 0, 0} end
local ver = math.max(now, pv + 1)
local seq, ep = write(channel, candidate, now, policy, key, now, 0, 0, expires, ver)
return {seq, ver, tonumber(ep), expires}
`)

// seedScript writes back records of one policy that an instance holds
// after Redis lost data, each only where Redis has no newer version of
// its key (and none that is not expired at now). KEYS: as banScript's.
// ARGV: the channel, the epoch candidate, now (ms), the policy, then per
// record key, since, until, level, expires, version. It replies how many
// it wrote.
var seedScript = redis.NewScript(luaChange + luaBanRecord + luaBanWrite + `
local channel, candidate, now, policy = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local n = 0
for i = 5, #ARGV, 6 do
  local key, expires, ver = ARGV[i], tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
  local prev = redis.call('HGET', KEYS[4], key)
  local pv = -1
  if prev then
    local _
    _, _, _, _, _, pv = record(prev)
  end
  if now < expires and ver > pv then
    -- TTLs from the record's own instant, as its Ban had them.
    write(channel, candidate, math.max(now, tonumber(ARGV[i + 1])), policy, key, tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), expires, ver)
    n = n + 1
  end
end
return n
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

// scriptKeys returns the KEYS of banScript, liftScript and seedScript for
// policy.
func (b *Bans) scriptKeys(policy string) []string {
	hash, byExpiry := b.policyKeys(policy)
	return []string{b.seqKey, b.epochKey, b.policies, hash, byExpiry}
}

// Ban implements perkey.Bans: one script call. The record it returns
// holds milliseconds, but for the offence that began the ban, whose
// Since is now exactly.
func (b *Bans) Ban(ctx context.Context, policy, key string, p perkey.BanParams, now time.Time) (perkey.Ban, error) {
	if err := p.Validate(); err != nil {
		return perkey.Ban{}, err
	}
	args := []any{policy, key, now.UnixMilli(), ceilMillis(p.Memory), b.max, b.channel, newEpoch()}
	for level := int64(1); ; level++ {
		d := p.DurationAt(level)
		args = append(args, ceilMillis(d))
		if d == p.Max || p.Factor == 1 {
			break
		}
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	res, err := banScript.Run(ctx, b.c, b.scriptKeys(policy), args...).Int64Slice()
	if err == nil && len(res) != 7 {
		err = fmt.Errorf("ban script replied %v", res)
	}
	if err != nil {
		return perkey.Ban{}, b.fail(fmt.Errorf("%w: redis: ban: %w", limiter.ErrStoreUnavailable, err))
	}
	r := mirrorRec{k: banKey{policy, key}, level: res[0], since: res[1] * 1e6, until: res[2] * 1e6, expires: res[3] * 1e6,
		seq: res[4], ver: res[5], ep: res[6]}
	if r.ep == 0 { // the running ban, unchanged
		return r.ban(), nil
	}
	b.saw(r.ep, r.seq)
	b.mirror.put(&r, b.clock().UnixNano())
	// This offence began the ban: its instant is now, exactly (the
	// record holds milliseconds), so that the caller can tell the
	// offence that began a ban from those made while it ran.
	ban := r.ban()
	ban.Since = now
	return ban, nil
}

func ceilMillis(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// Banned implements perkey.Bans, from the mirror.
func (b *Bans) Banned(policy, key string, now time.Time) (perkey.Ban, bool) {
	return b.mirror.banned(policy, key, now.UnixNano())
}

// Lift implements perkey.Bans: one script call. It leaves a tombstone
// on Redis and in the mirrors until the lifted record would have expired
// (see Bans). A record this instance holds but Redis lost counts as held.
func (b *Bans) Lift(ctx context.Context, policy, key string) (bool, error) {
	now := b.clock()
	var held int64
	if r, ok := b.mirror.get(policy, key); ok && r.level > 0 {
		held = r.expires / 1e6
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	res, err := liftScript.Run(ctx, b.c, b.scriptKeys(policy), policy, key, b.channel, newEpoch(), now.UnixMilli(), held).Int64Slice()
	if err == nil && len(res) != 4 {
		err = fmt.Errorf("lift script replied %v", res)
	}
	if err != nil {
		return false, b.fail(fmt.Errorf("%w: redis: lift: %w", limiter.ErrStoreUnavailable, err))
	}
	if res[0] == 0 {
		return false, nil
	}
	b.saw(res[2], res[0])
	b.mirror.put(&mirrorRec{k: banKey{policy, key}, since: now.UnixMilli() * 1e6, expires: res[3] * 1e6, seq: res[0], ver: res[1], ep: res[2]},
		now.UnixNano())
	return true, nil
}

// List implements perkey.Bans. It reads Redis, not the mirror, so that
// the admin API shows what every instance enforces (HSCAN of each policy's
// hash: a List of many records costs Redis no long pause).
func (b *Bans) List(ctx context.Context, policy string, now time.Time, max int) ([]perkey.Ban, error) {
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
	var out []perkey.Ban
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
	perkey.SortBans(out)
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
// resync (see follower.order; or the message cannot be read).
func (b *Bans) receive(payload string) bool {
	r, err := parseMessage(payload)
	if err != nil {
		b.fail(err)
		return true
	}
	stale := b.order(r.ep, r.seq)
	b.mirror.put(r, b.clock().UnixNano())
	return stale
}

// parseMessage reads "epoch seq ver level since until expires
// len(policy)\n" + policy + key, instants in ms.
func parseMessage(s string) (*mirrorRec, error) {
	head, rest, ok := strings.Cut(s, "\n")
	f := strings.Fields(head)
	if !ok || len(f) != 8 {
		return nil, fmt.Errorf("redis: bans: unreadable message %q", s)
	}
	var v [8]int64
	for i := range f {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redis: bans: unreadable message %q", s)
		}
		v[i] = n
	}
	if v[7] < 0 || v[7] > int64(len(rest)) {
		return nil, fmt.Errorf("redis: bans: unreadable message %q", s)
	}
	return &mirrorRec{ep: v[0], seq: v[1], ver: v[2], level: v[3], since: v[4] * 1e6, until: v[5] * 1e6, expires: v[6] * 1e6,
		k: banKey{rest[:v[7]], rest[v[7]:]}}, nil
}

// resync reloads the mirror from Redis: the epoch and change number
// first, then every record (HSCAN, not one long call). A record changed
// during the scan may be read before or after its change; either way its
// message, numbered after the one read first, follows and is applied.
// Expired records are left out and deleted on Redis. If Redis lost
// changes (see follower), it first writes back every record and
// tombstone the mirror holds, each where Redis has no newer version.
func (b *Bans) resync(ctx context.Context) error {
	now := b.clock()
	ep, seq, lost, err := b.check(ctx)
	if err != nil {
		return err
	}
	if lost && b.mirror.len() > 0 {
		if err := b.reseed(ctx, now, ep, seq); err != nil {
			return err
		}
		if ep, seq, _, err = b.check(ctx); err != nil {
			return err
		}
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
				r.ep = ep
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
	b.mirror.replace(recs, ep, seq, ns)
	b.resynced(ep, seq)
	return nil
}

// seedBatch is how many records one call of seedScript writes back.
const seedBatch = 200

// reseed writes back the mirror's records and tombstones not expired at
// now that Redis may have lost — those written by a change Redis's
// counter, at change seq of epoch ep, does not hold — policy by policy,
// seedBatch a call.
func (b *Bans) reseed(ctx context.Context, now time.Time, ep, seq int64) error {
	byPolicy := map[string][]any{}
	ns := now.UnixNano()
	b.mirror.each(func(r *mirrorRec) {
		if ns < r.expires && (r.ep != ep || r.seq > seq) {
			byPolicy[r.k.policy] = append(byPolicy[r.k.policy], r.k.key, r.since/1e6, r.until/1e6, r.level, r.expires/1e6, r.ver)
		}
	})
	for policy, recs := range byPolicy {
		for len(recs) > 0 {
			n := min(len(recs), 6*seedBatch)
			args := append([]any{b.channel, newEpoch(), now.UnixMilli(), policy}, recs[:n]...)
			recs = recs[n:]
			cctx, cancel := context.WithTimeout(ctx, b.timeout)
			err := seedScript.Run(cctx, b.c, b.scriptKeys(policy), args...).Err()
			cancel()
			if err != nil {
				return fmt.Errorf("%w: redis: bans: writing back: %w", limiter.ErrStoreUnavailable, err)
			}
		}
	}
	b.reseeds.Add(1)
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

// parseRecord reads a hash value, "since until level expires seq ver"
// (ms; a record of an earlier version has no ver: since is its version).
func parseRecord(policy, key, v string) (*mirrorRec, bool) {
	f := strings.Fields(v)
	if len(f) != 5 && len(f) != 6 {
		return nil, false
	}
	var n [6]int64
	for i := range f {
		x, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return nil, false
		}
		n[i] = x
	}
	if len(f) == 5 {
		n[5] = n[0]
	}
	return &mirrorRec{k: banKey{policy, key}, since: n[0] * 1e6, until: n[1] * 1e6, level: n[2], expires: n[3] * 1e6, seq: n[4], ver: n[5]}, true
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
// key like memstore.Bans. Each record carries its version, so that a late
// message never undoes a newer change; a lifted key keeps its tombstone
// (level 0) until the lifted record would have expired. Safe for
// concurrent use.
type mirror struct {
	seed      maphash.Seed
	shards    []mirrorShard
	perShard  int
	n         atomic.Int64 // records and tombstones: 0 lets banned skip the lock
	evictions atomic.Int64
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
	level                 int64 // 0 for a tombstone (a lift), or a deletion when expired
	ver                   int64 // orders the writes of k (see banScript)
	ep, seq               int64 // the change that wrote it
	pos                   int   // in the shard's heap
}

// Expiry, Index and SetIndex place r in its shard's heap.
func (r *mirrorRec) Expiry() int64  { return r.expires }
func (r *mirrorRec) Index() int     { return r.pos }
func (r *mirrorRec) SetIndex(i int) { r.pos = i }

func (r *mirrorRec) ban() perkey.Ban {
	return perkey.Ban{Policy: r.k.policy, Key: r.k.key, Since: time.Unix(0, r.since), Until: time.Unix(0, r.until),
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

func (m *mirror) banned(policy, key string, now int64) (perkey.Ban, bool) {
	if m.n.Load() == 0 {
		return perkey.Ban{}, false
	}
	sh := m.shard(key)
	sh.mu.RLock()
	r := sh.recs[banKey{policy, key}]
	if r == nil || now >= r.until { // a tombstone's until is 0
		sh.mu.RUnlock()
		return perkey.Ban{}, false
	}
	ban := r.ban()
	sh.mu.RUnlock()
	return ban, true
}

// get returns a copy of the mirror's record of (policy, key), tombstones
// included.
func (m *mirror) get(policy, key string) (mirrorRec, bool) {
	sh := m.shard(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if r := sh.recs[banKey{policy, key}]; r != nil {
		return *r, true
	}
	return mirrorRec{}, false
}

// each calls fn with a copy of every record and tombstone, a shard's lock
// at a time.
func (m *mirror) each(fn func(*mirrorRec)) {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.RLock()
		for _, r := range sh.recs {
			c := *r
			fn(&c)
		}
		sh.mu.RUnlock()
	}
}

// put applies a change — a message's, or this instance's own — unless
// the mirror holds a newer version of its key: a record or tombstone
// replaces the entry; an expired one (a deletion) removes it. Records
// expired at now (ns) are dropped first.
func (m *mirror) put(r *mirrorRec, now int64) {
	sh := m.shard(r.k.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m.dropExpiredLocked(sh, now)
	e := sh.recs[r.k]
	if e != nil && e.ver >= r.ver {
		return
	}
	if r.expires <= now {
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
	pos := e.pos
	*e = *r
	e.pos = pos
	sh.heap.Fix(e.pos)
}

// replace loads a resync's records, read after change seq of epoch ep:
// where the mirror holds a newer version written by a change after the
// snapshot (of epoch ep, numbered above seq: applied meanwhile), it keeps
// it; everything else is the snapshot's. Records expired at now (ns) are
// left out.
func (m *mirror) replace(recs []*mirrorRec, ep, seq, now int64) {
	byShard := make([][]*mirrorRec, len(m.shards))
	for _, r := range recs {
		i := maphash.String(m.seed, r.k.key) % uint64(len(m.shards))
		byShard[i] = append(byShard[i], r)
	}
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		fresh := make(map[banKey]*mirrorRec, len(byShard[i]))
		for _, r := range byShard[i] {
			if f := fresh[r.k]; now < r.expires && (f == nil || f.ver < r.ver) {
				fresh[r.k] = r
			}
		}
		for k, e := range sh.recs {
			if f := fresh[k]; e.ep == ep && e.seq > seq && now < e.expires && (f == nil || f.ver < e.ver) {
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
