package redisstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/perkey"
)

// Interface guard.
var _ perkey.Overrides = (*Overrides)(nil)

// DefaultMaxOverrides bounds the overrides on Redis, all policies
// together, when OverrideOptions.MaxOverrides is 0.
const DefaultMaxOverrides = 100_000

// OverrideOptions configures Overrides. The zero value is usable.
type OverrideOptions struct {
	// Prefix starts every key and the channel; "" means "limitproxy:",
	// as for Options.Prefix.
	Prefix string
	// Timeout bounds Set and Remove, and each call to Redis of List and
	// of a resync; 0 means 1s (these are the admin API's calls, not a
	// request's).
	Timeout time.Duration
	// Resync is how often Run checks the mirror against Redis; 0 means
	// DefaultResync.
	Resync time.Duration
	// MaxOverrides bounds the overrides on Redis, all policies together;
	// 0 means DefaultMaxOverrides. A Set of a new key at the bound fails
	// with perkey.ErrTooManyOverrides. Instances sharing a Redis should
	// agree on it; each enforces its own at its Sets.
	MaxOverrides int
	// Clock, if not nil, gives the instants that version each write (see
	// Overrides) and judge tombstones' expiry; nil means time.Now.
	Clock func() time.Time
}

// Overrides is the override store on Redis (perkey.Overrides), shared by
// every instance using the same Redis and prefix. Create it with
// NewOverrides, and run Run for as long as it is used; it is safe for
// concurrent use.
//
// # Layout
//
// The keys share one hash tag (appendKey with the pseudo client key
// "overrides"), so that one script updates them together, also on Redis
// Cluster; the 1 in their names is the layout's version:
//
//	…o/1/h      HASH  len(policy) ":" policy key → "seq ver JSON", or "seq ver" for a tombstone
//	…o/1/t      ZSET  the tombstones' fields, scored by their expiry (ms)
//	…o/1/seq    counter of changes
//	…o/1/epoch  the counter's epoch (see follower)
//
// where JSON is the override's (perkey.Override.MarshalJSON), seq the
// number of the change that wrote it and ver its version: the write's
// instant (Clock, ms), at least one above the version it replaces, which
// orders the writes of one key across epochs too (records of an earlier
// version, "seq JSON", read as version 0). A removal leaves a tombstone
// for TombstoneLife. Nothing else expires: overrides are permanent until
// removed. Set and Remove are scripts: each change increments o/1/seq and
// publishes, from inside the script, "epoch seq ver len(policy)
// len(key)\n" + policy + key + JSON (no JSON for a removal), so messages
// carry the change, arrive in order, and are numbered without gaps. Set
// refuses a new key when the hash holds MaxOverrides overrides
// (tombstones not counted).
//
// # Mirror
//
// Get never calls Redis: each instance keeps a mirror of every override
// and tombstone, sharded by client key, each shard's map immutable once
// published (a change publishes a copy), so that Get is one atomic load
// and a map lookup. Run subscribes to the channel and applies each
// message; this instance's own Set and Remove apply their results at
// once, so that it reads its own writes; an entry replaces the mirror's
// only if its version is newer. A message whose number does not follow
// the last one triggers a full resync: an HSCAN of the hash, merged with
// what the mirror learned meanwhile. So do every (re)subscription and,
// every Resync interval, a check of o/1/seq and o/1/epoch (every sixth
// check resyncs in full regardless). A change on one instance reaches the
// others in the time a message takes, well under a second
// (TestOverridesShared measures it). Until Run has loaded the overrides
// once (Loaded), Get knows only this instance's own.
//
// # When Redis loses data
//
// As for Bans: once the follower notices that Redis lost changes (a
// restart without persistence, a failover, FLUSHALL, FLUSHDB, eviction),
// the resync first writes back every override and tombstone this instance
// holds that Redis may lack, each only where Redis has no newer version:
// the newest write wins, and an override removed stays removed for
// TombstoneLife. Get goes on answering from the mirror meanwhile. Redis
// persistence (RDB or AOF) is still what keeps overrides when every
// instance restarts with Redis (docs/redis.md).
//
// Set, Remove and List return Redis's errors (wrapping
// limiter.ErrStoreUnavailable); Get goes on answering from the mirror,
// and Run retries a failed resync. Records on Redis that this version
// cannot read (another version's, or edited by hand) are skipped, counted
// by Errors and shown by LastError.
//
// The mirror holds every override on Redis, bounded by the MaxOverrides
// of the instances that set them, and the tombstones of the last
// TombstoneLife; it never drops an override.
type Overrides struct {
	follower
	hash   string
	tombs  string
	max    int
	clock  func() time.Time
	mirror *ovMirror
}

// NewOverrides returns an override store on c. Start Run.
func NewOverrides(c redis.UniversalClient, o OverrideOptions) *Overrides {
	if o.Prefix == "" {
		o.Prefix = "limitproxy:"
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Resync <= 0 {
		o.Resync = DefaultResync
	}
	if o.MaxOverrides <= 0 {
		o.MaxOverrides = DefaultMaxOverrides
	}
	key := func(name string) string {
		var buf [128]byte
		return string(appendKey(buf[:0], o.Prefix, "overrides", name))
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return &Overrides{follower: newFollower("overrides", c, o.Prefix+"overrides", key("o/1/seq"), key("o/1/epoch"), o.Timeout, o.Resync),
		hash: key("o/1/h"), tombs: key("o/1/t"), max: o.MaxOverrides, clock: o.Clock, mirror: newOvMirror()}
}

// ovField returns the hash field of (policy, key): length-prefixed, so
// that ("a:b", "c") and ("a", "b:c") differ.
func ovField(policy, key string) string {
	return strconv.Itoa(len(policy)) + ":" + policy + key
}

// TombstoneLife is how long a removed override's tombstone is kept, on
// Redis and in every mirror: for that long, a copy of the override that
// an instance writes back after Redis lost data (an older version)
// cannot bring it back.
const TombstoneLife = 24 * time.Hour

// luaOvWrite is the Lua that writes an override's record (KEYS[3] the
// hash, KEYS[4] the tombstones' ZSET by expiry), "seq ver JSON", or a
// tombstone, "seq ver", for an empty JSON, counts the change and
// publishes it: "epoch seq ver len(policy) len(key)\n" + policy + key +
// JSON. life is TombstoneLife in ms.
const luaOvWrite = `
local function write(channel, candidate, field, lens, pk, js, ver, life)
  local seq, ep = change(KEYS[1], KEYS[2], candidate)
  local head = string.format('%.0f %.0f', seq, ver)
  if js == '' then
    redis.call('HSET', KEYS[3], field, head)
    redis.call('ZADD', KEYS[4], ver + life, field)
  else
    redis.call('HSET', KEYS[3], field, head .. ' ' .. js)
    redis.call('ZREM', KEYS[4], field)
  end
  redis.call('PUBLISH', channel, ep .. ' ' .. head .. ' ' .. lens .. '\n' .. pk .. js)
  return seq, ep
end
-- version(v) reads a record's version: "seq ver JSON", "seq ver", or an
-- earlier version's "seq JSON" (version 0).
local function version(v)
  local ver = string.match(v, '^%d+ (%d+)')
  return tonumber(ver) or 0, string.find(v, '{', 1, true) == nil
end
-- Tombstones expired at now go first, a bounded number a call.
local function sweep(now)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 100)
  if #gone > 0 then
    redis.call('HDEL', KEYS[3], unpack(gone))
    redis.call('ZREM', KEYS[4], unpack(gone))
  end
end
`

// setOverrideScript stores an override. KEYS: o/1/seq, o/1/epoch, o/1/h,
// o/1/t. ARGV: the field, the JSON, the bound, the channel,
// "len(policy) len(key)", policy .. key, the epoch candidate, now (ms),
// TombstoneLife (ms). It replies the change's number (0 for a new key at
// the bound), the record's version and the epoch. A record's version
// orders the writes of its key, across epochs too: each write's is its
// instant (the caller's clock, ms), but at least one more than the
// version it replaces.
var setOverrideScript = redis.NewScript(luaChange + luaOvWrite + `
local now = tonumber(ARGV[8])
sweep(now)
local pv, tomb = -1, true
local cur = redis.call('HGET', KEYS[3], ARGV[1])
if cur then pv, tomb = version(cur) end
if tomb and redis.call('HLEN', KEYS[3]) - redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[3]) then
  return {0, 0, 0}
end
local ver = math.max(now, pv + 1)
local seq, ep = write(ARGV[4], ARGV[7], ARGV[1], ARGV[5], ARGV[6], ARGV[2], ver, tonumber(ARGV[9]))
return {seq, ver, tonumber(ep)}
`)

// removeOverrideScript removes an override, leaving a tombstone for
// TombstoneLife. KEYS: as setOverrideScript's. ARGV: the field, the
// channel, "len(policy) len(key)", policy .. key, the epoch candidate,
// now (ms), TombstoneLife (ms), and 1 if this instance holds the override
// (then one Redis lost is removed too). It replies as setOverrideScript,
// the change's number 0 if there was none.
var removeOverrideScript = redis.NewScript(luaChange + luaOvWrite + `
local now = tonumber(ARGV[6])
sweep(now)
local pv, tomb = -1, true
local cur = redis.call('HGET', KEYS[3], ARGV[1])
if cur then pv, tomb = version(cur) end
if tomb and (cur or ARGV[8] ~= '1') then return {0, 0, 0} end
local ver = math.max(now, pv + 1)
local seq, ep = write(ARGV[2], ARGV[5], ARGV[1], ARGV[3], ARGV[4], '', ver, tonumber(ARGV[7]))
return {seq, ver, tonumber(ep)}
`)

// seedOverridesScript writes back overrides and tombstones an instance
// holds after Redis lost data, each only where Redis has no newer version
// of its key. KEYS: as setOverrideScript's. ARGV: the channel, the epoch
// candidate, now (ms), TombstoneLife (ms), then per record the field,
// "len(policy) len(key)", policy .. key, its version and its JSON ("" for
// a tombstone). It replies how many it wrote. (It ignores the bound: it
// restores what was there.)
var seedOverridesScript = redis.NewScript(luaChange + luaOvWrite + `
local now, life = tonumber(ARGV[3]), tonumber(ARGV[4])
local n = 0
for i = 5, #ARGV, 5 do
  local ver = tonumber(ARGV[i + 3])
  local cur = redis.call('HGET', KEYS[3], ARGV[i])
  local pv = -1
  if cur then pv = version(cur) end
  if ver > pv and (ARGV[i + 4] ~= '' or ver + life > now) then
    write(ARGV[1], ARGV[2], ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 4], ver, life)
    n = n + 1
  end
end
return n
`)

// scriptKeys returns the KEYS of the scripts.
func (s *Overrides) scriptKeys() []string { return []string{s.seqKey, s.epochKey, s.hash, s.tombs} }

// Set implements perkey.Overrides: one script call.
func (s *Overrides) Set(ctx context.Context, o perkey.Override) error {
	if err := o.Validate(); err != nil {
		return err
	}
	o = o.Clone()
	o.SetAt = o.SetAt.UTC()
	js, err := o.MarshalJSON()
	if err != nil {
		return fmt.Errorf("%w: %w", perkey.ErrInvalidOverride, err)
	}
	lens := strconv.Itoa(len(o.Policy)) + " " + strconv.Itoa(len(o.Key))
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res, err := setOverrideScript.Run(ctx, s.c, s.scriptKeys(),
		ovField(o.Policy, o.Key), js, s.max, s.channel, lens, o.Policy+o.Key, newEpoch(), s.clock().UnixMilli(), TombstoneLife.Milliseconds()).Int64Slice()
	if err == nil && len(res) != 3 {
		err = fmt.Errorf("script replied %v", res)
	}
	if err != nil {
		return s.fail(fmt.Errorf("%w: redis: set override: %w", limiter.ErrStoreUnavailable, err))
	}
	if res[0] == 0 {
		return fmt.Errorf("%w: Redis holds %d, the bound", perkey.ErrTooManyOverrides, s.max)
	}
	s.saw(res[2], res[0])
	s.mirror.put(&ovEntry{k: ovKey{o.Policy, o.Key}, o: o, seq: res[0], ver: res[1], ep: res[2]})
	return nil
}

// Remove implements perkey.Overrides: one script call. It leaves a
// tombstone for TombstoneLife (see Overrides). An override this instance
// holds but Redis lost counts as held.
func (s *Overrides) Remove(ctx context.Context, policy, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	lens := strconv.Itoa(len(policy)) + " " + strconv.Itoa(len(key))
	held := "0"
	if _, ok := s.mirror.get(policy, key); ok {
		held = "1"
	}
	res, err := removeOverrideScript.Run(ctx, s.c, s.scriptKeys(),
		ovField(policy, key), s.channel, lens, policy+key, newEpoch(), s.clock().UnixMilli(), TombstoneLife.Milliseconds(), held).Int64Slice()
	if err == nil && len(res) != 3 {
		err = fmt.Errorf("script replied %v", res)
	}
	if err != nil {
		return false, s.fail(fmt.Errorf("%w: redis: remove override: %w", limiter.ErrStoreUnavailable, err))
	}
	if res[0] == 0 {
		return false, nil
	}
	s.saw(res[2], res[0])
	s.mirror.put(&ovEntry{k: ovKey{policy, key}, seq: res[0], ver: res[1], ep: res[2], gone: true})
	return true, nil
}

// Get implements perkey.Overrides, from the mirror.
func (s *Overrides) Get(policy, key string) (perkey.Override, bool) {
	return s.mirror.get(policy, key)
}

// List implements perkey.Overrides. It reads Redis, not the mirror, so
// that the admin API shows what every instance applies (an HSCAN: a List
// of many overrides costs Redis no long pause).
func (s *Overrides) List(ctx context.Context, policy string, max int) ([]perkey.Override, error) {
	if max < 1 {
		return nil, nil
	}
	// HSCAN may return a field twice (Redis rehashing the hash during the
	// scan).
	found := map[ovKey]perkey.Override{}
	err := s.scan(ctx, func(e *ovEntry) {
		if !e.gone && (policy == "" || e.k.policy == policy) {
			found[e.k] = e.o
		}
	})
	if err != nil {
		return nil, s.fail(err)
	}
	out := slices.Collect(maps.Values(found))
	perkey.SortOverrides(out)
	return out[:min(len(out), max)], nil
}

// Len returns the number of overrides in the mirror.
func (s *Overrides) Len() int { return int(s.mirror.live.Load()) }

// Loaded returns a channel that Run closes once it has loaded every
// override from Redis for the first time. The server may wait for it
// (bounded) before serving, so that no request meets the policy's own
// limits where an override applies.
func (s *Overrides) Loaded() <-chan struct{} { return s.synced }

// Run keeps the mirror current until ctx is done, then returns nil: it
// subscribes to the channel, applies its messages, loads every override
// when (re)subscribed, and checks the mirror every Resync (see
// Overrides). A resync that fails is retried a second later (or at the
// next check, if sooner); meanwhile Get answers from the mirror as it
// is. Start it once and wait for it.
func (s *Overrides) Run(ctx context.Context) error { return s.follow(ctx, s) }

// receive applies one message and reports whether the mirror needs a full
// resync (see follower.order; or the message cannot be read).
func (s *Overrides) receive(payload string) bool {
	e, err := parseOvMessage(payload)
	if err != nil {
		s.fail(err)
		return true
	}
	stale := s.order(e.ep, e.seq)
	s.mirror.put(e)
	return stale
}

// parseOvMessage reads "epoch seq ver len(policy) len(key)\n" + policy +
// key + JSON, the JSON empty for a removal.
func parseOvMessage(m string) (*ovEntry, error) {
	bad := func() (*ovEntry, error) { return nil, fmt.Errorf("redis: overrides: unreadable message %.200q", m) }
	head, rest, ok := strings.Cut(m, "\n")
	f := strings.Fields(head)
	if !ok || len(f) != 5 {
		return bad()
	}
	var v [5]int64
	for i := range f {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || n < 0 {
			return bad()
		}
		v[i] = n
	}
	if v[3]+v[4] > int64(len(rest)) {
		return bad()
	}
	e := &ovEntry{k: ovKey{rest[:v[3]], rest[v[3] : v[3]+v[4]]}, ep: v[0], seq: v[1], ver: v[2]}
	js := rest[v[3]+v[4]:]
	if js == "" {
		e.gone = true
		return e, nil
	}
	o, err := decodeOverride(e.k, js)
	if err != nil {
		return nil, fmt.Errorf("redis: overrides: message %d: %w", e.seq, err)
	}
	e.o = o
	return e, nil
}

// decodeOverride reads the JSON of the override of k, and checks it.
func decodeOverride(k ovKey, js string) (perkey.Override, error) {
	var o perkey.Override
	if err := o.UnmarshalJSON([]byte(js)); err != nil {
		return o, err
	}
	if err := o.Validate(); err != nil {
		return o, err
	}
	if o.Policy != k.policy || o.Key != k.key {
		return o, fmt.Errorf("override of %q/%q filed under %q/%q", o.Policy, o.Key, k.policy, k.key)
	}
	return o, nil
}

// resync reloads the mirror from Redis: the epoch and change number
// first, then every override and tombstone (HSCAN, not one long call).
// An override changed during the scan may be read before or after its
// change; either way its message, numbered after the one read first,
// follows and is applied. If Redis lost changes (see follower), it first
// writes back every override and tombstone the mirror holds, each where
// Redis has no newer version.
func (s *Overrides) resync(ctx context.Context) error {
	ep, seq, lost, err := s.check(ctx)
	if err != nil {
		return err
	}
	if lost && s.mirror.len() > 0 {
		if err := s.reseed(ctx, ep, seq); err != nil {
			return err
		}
		if ep, seq, _, err = s.check(ctx); err != nil {
			return err
		}
	}
	var entries []*ovEntry
	err = s.scan(ctx, func(e *ovEntry) {
		e.ep = ep
		entries = append(entries, e)
	})
	if err != nil {
		return err
	}
	s.mirror.replace(entries, ep, seq, s.clock().UnixMilli())
	s.resynced(ep, seq)
	return nil
}

// reseed writes back the mirror's overrides and live tombstones that
// Redis may have lost — those written by a change Redis's counter, at
// change seq of epoch ep, does not hold — seedBatch a call.
func (s *Overrides) reseed(ctx context.Context, ep, seq int64) error {
	now := s.clock().UnixMilli()
	life := TombstoneLife.Milliseconds()
	var recs []any
	for _, e := range s.mirror.all() {
		if e.ep == ep && e.seq <= seq {
			continue
		}
		js := ""
		if e.gone {
			if e.ver+life <= now {
				continue
			}
		} else {
			b, err := e.o.MarshalJSON()
			if err != nil {
				continue
			}
			js = string(b)
		}
		recs = append(recs, ovField(e.k.policy, e.k.key), strconv.Itoa(len(e.k.policy))+" "+strconv.Itoa(len(e.k.key)),
			e.k.policy+e.k.key, e.ver, js)
	}
	for len(recs) > 0 {
		n := min(len(recs), 5*seedBatch)
		args := append([]any{s.channel, newEpoch(), now, life}, recs[:n]...)
		recs = recs[n:]
		cctx, cancel := context.WithTimeout(ctx, s.timeout)
		err := seedOverridesScript.Run(cctx, s.c, s.scriptKeys(), args...).Err()
		cancel()
		if err != nil {
			return fmt.Errorf("%w: redis: overrides: writing back: %w", limiter.ErrStoreUnavailable, err)
		}
	}
	s.reseeds.Add(1)
	return nil
}

// scan calls fn with every override and tombstone on Redis. Records it
// cannot read are skipped and counted.
func (s *Overrides) scan(ctx context.Context, fn func(*ovEntry)) error {
	var cursor uint64
	for {
		cctx, cancel := context.WithTimeout(ctx, s.timeout)
		kv, next, err := s.c.HScan(cctx, s.hash, cursor, "", 1000).Result()
		cancel()
		if err != nil {
			return fmt.Errorf("%w: redis: overrides: %w", limiter.ErrStoreUnavailable, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			e, err := parseOvRecord(kv[i], kv[i+1])
			if err != nil {
				s.fail(err)
				continue
			}
			fn(e)
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// parseOvRecord reads a field of the hash and its value: "seq ver JSON",
// a tombstone's "seq ver", or an earlier version's "seq JSON" (version
// 0).
func parseOvRecord(field, v string) (*ovEntry, error) {
	bad := func(why string) (*ovEntry, error) {
		return nil, fmt.Errorf("redis: overrides: unreadable record %.100q: %s", field, why)
	}
	n, rest, ok := strings.Cut(field, ":")
	lp, err := strconv.Atoi(n)
	if !ok || err != nil || lp < 0 || lp > len(rest) {
		return bad("not len(policy):policy key")
	}
	k := ovKey{rest[:lp], rest[lp:]}
	n, js, _ := strings.Cut(v, " ")
	seq, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return bad("not seq ver JSON")
	}
	e := &ovEntry{k: k, seq: seq}
	if !strings.HasPrefix(js, "{") {
		n, js, _ = strings.Cut(js, " ")
		if e.ver, err = strconv.ParseInt(n, 10, 64); err != nil {
			return bad("not seq ver JSON")
		}
	}
	if js == "" {
		e.gone = true
		return e, nil
	}
	if e.o, err = decodeOverride(k, js); err != nil {
		return bad(err.Error())
	}
	return e, nil
}

// ovMirror is an instance's copy of the overrides on Redis, sharded by
// client key; each shard's map is immutable once published, so that get
// takes no lock. Each entry carries its version, so that a late message
// never undoes a newer change; a removed key keeps its tombstone (gone)
// for TombstoneLife. Safe for concurrent use.
type ovMirror struct {
	seed   maphash.Seed
	shards []ovShard
	n      atomic.Int64 // entries and tombstones: 0 lets get skip the lookup
	live   atomic.Int64 // entries
}

// ovShard's map is never modified once stored: writers, holding mu, store
// a modified copy.
type ovShard struct {
	mu sync.Mutex
	m  atomic.Pointer[map[ovKey]*ovEntry]
	_  [48]byte // keep shards on separate cache lines
}

type ovKey struct{ policy, key string }

// ovEntry is an override, or a tombstone, its version and the change
// that wrote it. It is never modified once in a map.
type ovEntry struct {
	k       ovKey
	o       perkey.Override
	ver     int64 // orders the writes of k (see setOverrideScript)
	ep, seq int64
	gone    bool // a removal (a message's, or a tombstone)
}

// ovShards is how many shards the mirror has.
const ovShards = 64

func newOvMirror() *ovMirror {
	m := &ovMirror{seed: maphash.MakeSeed(), shards: make([]ovShard, ovShards)}
	for i := range m.shards {
		m.shards[i].m.Store(&map[ovKey]*ovEntry{})
	}
	return m
}

func (m *ovMirror) shard(key string) *ovShard {
	return &m.shards[maphash.String(m.seed, key)%uint64(len(m.shards))]
}

func (m *ovMirror) get(policy, key string) (perkey.Override, bool) {
	if m.n.Load() == 0 {
		return perkey.Override{}, false
	}
	e := (*m.shard(key).m.Load())[ovKey{policy, key}]
	if e == nil || e.gone {
		return perkey.Override{}, false
	}
	return e.o, true
}

// all returns every entry and tombstone.
func (m *ovMirror) all() []*ovEntry {
	var out []*ovEntry
	for i := range m.shards {
		for _, e := range *m.shards[i].m.Load() {
			out = append(out, e)
		}
	}
	return out
}

// put applies a change — a message's, or this instance's own — unless the
// mirror holds a newer version of its key.
func (m *ovMirror) put(e *ovEntry) {
	sh := m.shard(e.k.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if cur := (*sh.m.Load())[e.k]; cur != nil && cur.ver >= e.ver {
		return
	}
	m.setLocked(sh, e.k, e)
}

// setLocked publishes a copy of the shard's map with k set to e, or
// deleted for nil, and keeps the counts. Requires sh.mu held.
func (m *ovMirror) setLocked(sh *ovShard, k ovKey, e *ovEntry) {
	old := *sh.m.Load()
	cur := old[k]
	nm := maps.Clone(old)
	if e == nil {
		delete(nm, k)
	} else {
		nm[k] = e
	}
	m.n.Add(int64(len(nm) - len(old)))
	m.live.Add(int64(isLive(e) - isLive(cur)))
	sh.m.Store(&nm)
}

func isLive(e *ovEntry) int {
	if e == nil || e.gone {
		return 0
	}
	return 1
}

// replace loads a resync's overrides and tombstones, read after change
// seq of epoch ep: where the mirror holds a newer version written by a
// change after the snapshot (of epoch ep, numbered above seq: applied
// meanwhile), it keeps it; everything else is the snapshot's. Tombstones
// expired at now (ms) are left out.
func (m *ovMirror) replace(entries []*ovEntry, ep, seq, now int64) {
	alive := func(e *ovEntry) bool { return !e.gone || now < e.ver+TombstoneLife.Milliseconds() }
	byShard := make([][]*ovEntry, len(m.shards))
	for _, e := range entries {
		i := maphash.String(m.seed, e.k.key) % uint64(len(m.shards))
		byShard[i] = append(byShard[i], e)
	}
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		old := *sh.m.Load()
		fresh := make(map[ovKey]*ovEntry, len(byShard[i]))
		for _, e := range byShard[i] {
			if f := fresh[e.k]; alive(e) && (f == nil || f.ver < e.ver) {
				fresh[e.k] = e
			}
		}
		for k, e := range old {
			if f := fresh[k]; e.ep == ep && e.seq > seq && alive(e) && (f == nil || f.ver < e.ver) {
				fresh[k] = e
			}
		}
		live := 0
		for _, e := range fresh {
			live += isLive(e)
		}
		for _, e := range old {
			live -= isLive(e)
		}
		m.n.Add(int64(len(fresh) - len(old)))
		m.live.Add(int64(live))
		sh.m.Store(&fresh)
		sh.mu.Unlock()
	}
}

// len returns the entries and tombstones held.
func (m *ovMirror) len() int { return int(m.n.Load()) }

// Persistence reports whether Redis keeps its data on disk, so that the
// overrides and bans on it survive a restart of Redis together with every
// instance: how is "aof", "rdb" (snapshots configured: CONFIG GET save),
// "none", or "unknown" when Redis does not say (CONFIG disabled, as some
// managed services do, and AOF off). Without persistence, a restart of
// Redis alone loses nothing while an instance holds a copy (see
// Overrides); a restart of everything loses them.
func (s *Overrides) Persistence(ctx context.Context) (durable bool, how string, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	info, err := s.c.Info(ctx, "persistence").Result()
	if err != nil {
		return false, "", fmt.Errorf("%w: redis: INFO persistence: %w", limiter.ErrStoreUnavailable, err)
	}
	if strings.Contains(info, "aof_enabled:1") {
		return true, "aof", nil
	}
	save, err := s.c.ConfigGet(ctx, "save").Result()
	if err != nil {
		return false, "unknown", nil
	}
	if strings.TrimSpace(save["save"]) != "" {
		return true, "rdb", nil
	}
	return false, "none", nil
}
