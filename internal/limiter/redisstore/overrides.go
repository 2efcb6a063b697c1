package redisstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/limiter"
)

// Interface guard.
var _ limiter.Overrides = (*Overrides)(nil)

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
	// with limiter.ErrTooManyOverrides. Instances sharing a Redis should
	// agree on it; each enforces its own at its Sets.
	MaxOverrides int
}

// Overrides is the override store on Redis (limiter.Overrides), shared by
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
//	…o/1/h    HASH  len(policy) ":" policy key → seq " " JSON
//	…o/1/seq  counter of changes
//
// where JSON is the override's (limiter.Override.MarshalJSON) and seq the
// number of the change that wrote it; and one pub/sub channel,
// <prefix>overrides. Nothing expires: overrides are permanent until
// removed, and they last as long as Redis keeps its data (configure its
// persistence, RDB or AOF: a Redis restarted empty has lost them, and
// every mirror follows it). Set and Remove are scripts: each change
// increments o/1/seq and publishes, from inside the script,
// "seq len(policy) len(key)\n" + policy + key + JSON (no JSON for a
// removal), so messages carry the change, arrive in order, and are
// numbered without gaps. Set refuses a new key when the hash holds
// MaxOverrides.
//
// # Mirror
//
// Get never calls Redis: each instance keeps a mirror of every override,
// sharded by client key, each shard's map immutable once published (a
// change publishes a copy), so that Get is one atomic load and a map
// lookup. Run subscribes to the channel and applies each message; this
// instance's own Set and Remove apply their results at once, so that it
// reads its own writes. A message whose number does not follow the last
// one (one lost, or Redis restarted) triggers a full resync: an HSCAN of
// the hash, merged with what the mirror learned meanwhile (entries carry
// their change's number, the newer wins, and a removal made here leaves a
// tombstone until its message or a resync confirms it). So do every
// (re)subscription and, every Resync interval, a check of o/1/seq (every
// sixth check resyncs in full regardless); an o/1/seq below what the
// mirror has seen (Redis lost data) replaces the mirror entirely. A change
// on one instance reaches the others in the time a message takes, well
// under a second (TestOverridesShared measures it). Until Run has loaded
// the overrides once (Loaded), Get knows only this instance's own.
//
// Set, Remove and List return Redis's errors (wrapping
// limiter.ErrStoreUnavailable); Get goes on answering from the mirror,
// and Run retries a failed resync. Records on Redis that this version
// cannot read (another version's, or edited by hand) are skipped, counted
// by Errors and shown by LastError.
//
// The mirror holds every override on Redis, bounded by the MaxOverrides
// of the instances that set them; it never drops one.
type Overrides struct {
	follower
	hash   string
	max    int
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
	return &Overrides{follower: newFollower("overrides", c, o.Prefix+"overrides", key("o/1/seq"), o.Timeout, o.Resync),
		hash: key("o/1/h"), max: o.MaxOverrides, mirror: newOvMirror()}
}

// ovField returns the hash field of (policy, key): length-prefixed, so
// that ("a:b", "c") and ("a", "b:c") differ.
func ovField(policy, key string) string {
	return strconv.Itoa(len(policy)) + ":" + policy + key
}

// setOverrideScript stores an override. KEYS: o/1/seq, o/1/h. ARGV: the
// field, the JSON, the bound, the channel, "len(policy) len(key)", policy
// .. key. It replies the change's number, or 0 for a new key at the bound.
var setOverrideScript = redis.NewScript(`
local call = redis.call
if call('HEXISTS', KEYS[2], ARGV[1]) == 0 and call('HLEN', KEYS[2]) >= tonumber(ARGV[3]) then
  return 0
end
local seq = call('INCR', KEYS[1])
local s = string.format('%.0f', seq)
call('HSET', KEYS[2], ARGV[1], s .. ' ' .. ARGV[2])
call('PUBLISH', ARGV[4], s .. ' ' .. ARGV[5] .. '\n' .. ARGV[6] .. ARGV[2])
return seq
`)

// removeOverrideScript deletes an override. KEYS: o/1/seq, o/1/h. ARGV:
// the field, the channel, "len(policy) len(key)", policy .. key. It
// replies the change's number, or 0 if there was none.
var removeOverrideScript = redis.NewScript(`
local call = redis.call
if call('HDEL', KEYS[2], ARGV[1]) == 0 then return 0 end
local seq = call('INCR', KEYS[1])
local s = string.format('%.0f', seq)
call('PUBLISH', ARGV[2], s .. ' ' .. ARGV[3] .. '\n' .. ARGV[4])
return seq
`)

// Set implements limiter.Overrides: one script call.
func (s *Overrides) Set(ctx context.Context, o limiter.Override) error {
	if err := o.Validate(); err != nil {
		return err
	}
	o = o.Clone()
	o.SetAt = o.SetAt.UTC()
	js, err := o.MarshalJSON()
	if err != nil {
		return fmt.Errorf("%w: %w", limiter.ErrInvalidOverride, err)
	}
	lens := strconv.Itoa(len(o.Policy)) + " " + strconv.Itoa(len(o.Key))
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	seq, err := setOverrideScript.Run(ctx, s.c, []string{s.seqKey, s.hash},
		ovField(o.Policy, o.Key), js, s.max, s.channel, lens, o.Policy+o.Key).Int64()
	if err != nil {
		return s.fail(fmt.Errorf("%w: redis: set override: %w", limiter.ErrStoreUnavailable, err))
	}
	if seq == 0 {
		return fmt.Errorf("%w: Redis holds %d, the bound", limiter.ErrTooManyOverrides, s.max)
	}
	s.mirror.local(&ovEntry{k: ovKey{o.Policy, o.Key}, o: o, seq: seq}, &s.applied)
	return nil
}

// Remove implements limiter.Overrides: one script call.
func (s *Overrides) Remove(ctx context.Context, policy, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	lens := strconv.Itoa(len(policy)) + " " + strconv.Itoa(len(key))
	seq, err := removeOverrideScript.Run(ctx, s.c, []string{s.seqKey, s.hash},
		ovField(policy, key), s.channel, lens, policy+key).Int64()
	if err != nil {
		return false, s.fail(fmt.Errorf("%w: redis: remove override: %w", limiter.ErrStoreUnavailable, err))
	}
	if seq == 0 {
		return false, nil
	}
	s.mirror.local(&ovEntry{k: ovKey{policy, key}, seq: seq, gone: true}, &s.applied)
	return true, nil
}

// Get implements limiter.Overrides, from the mirror.
func (s *Overrides) Get(policy, key string) (limiter.Override, bool) {
	return s.mirror.get(policy, key)
}

// List implements limiter.Overrides. It reads Redis, not the mirror, so
// that the admin API shows what every instance applies (an HSCAN: a List
// of many overrides costs Redis no long pause).
func (s *Overrides) List(ctx context.Context, policy string, max int) ([]limiter.Override, error) {
	if max < 1 {
		return nil, nil
	}
	// HSCAN may return a field twice (Redis rehashing the hash during the
	// scan).
	found := map[ovKey]limiter.Override{}
	err := s.scan(ctx, func(e *ovEntry) {
		if policy == "" || e.k.policy == policy {
			found[e.k] = e.o
		}
	})
	if err != nil {
		return nil, s.fail(err)
	}
	out := slices.Collect(maps.Values(found))
	limiter.SortOverrides(out)
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
// resync (a message is missing before it, or it cannot be read).
func (s *Overrides) receive(payload string) bool {
	e, err := parseOvMessage(payload)
	if err != nil {
		s.fail(err)
		return true
	}
	return s.mirror.stream(e, &s.applied)
}

// parseOvMessage reads "seq len(policy) len(key)\n" + policy + key +
// JSON, the JSON empty for a removal.
func parseOvMessage(m string) (*ovEntry, error) {
	bad := func() (*ovEntry, error) { return nil, fmt.Errorf("redis: overrides: unreadable message %.200q", m) }
	head, rest, ok := strings.Cut(m, "\n")
	f := strings.Fields(head)
	if !ok || len(f) != 3 {
		return bad()
	}
	var v [3]int64
	for i := range f {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || n < 0 {
			return bad()
		}
		v[i] = n
	}
	if v[1]+v[2] > int64(len(rest)) {
		return bad()
	}
	e := &ovEntry{k: ovKey{rest[:v[1]], rest[v[1] : v[1]+v[2]]}, seq: v[0]}
	js := rest[v[1]+v[2]:]
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
func decodeOverride(k ovKey, js string) (limiter.Override, error) {
	var o limiter.Override
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

// resync reloads the mirror from Redis: the change number first, then
// every override (HSCAN, not one long call). An override changed during
// the scan may be read before or after its change; either way its
// message, numbered after the one read first, follows and is applied.
func (s *Overrides) resync(ctx context.Context) error {
	seen := s.mirror.seen.Load()
	seq, err := s.seq(ctx)
	if err != nil {
		return err
	}
	var entries []*ovEntry
	if err := s.scan(ctx, func(e *ovEntry) { entries = append(entries, e) }); err != nil {
		return err
	}
	s.mirror.replace(entries, seq, seen, &s.applied)
	return nil
}

// scan calls fn with every override on Redis. Records it cannot read are
// skipped and counted.
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

// parseOvRecord reads a field of the hash and its value, "seq JSON".
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
	n, js, ok := strings.Cut(v, " ")
	seq, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil {
		return bad("not seq JSON")
	}
	o, err := decodeOverride(k, js)
	if err != nil {
		return bad(err.Error())
	}
	return &ovEntry{k: k, o: o, seq: seq}, nil
}

// ovMirror is an instance's copy of the overrides on Redis, sharded by
// client key; each shard's map is immutable once published, so that get
// takes no lock. Each entry carries the number of the change that wrote
// it, so that a late message never undoes a newer change, and a key this
// instance removed keeps a tombstone (gone) until the stream of messages
// has passed its removal. Safe for concurrent use.
type ovMirror struct {
	seed   maphash.Seed
	shards []ovShard
	n      atomic.Int64 // entries and tombstones: 0 lets get skip the lookup
	live   atomic.Int64 // entries
	// seen is the highest change number applied, from any source: a
	// resync that finds Redis's below it knows Redis lost changes.
	seen atomic.Int64
}

// ovShard's map is never modified once stored: writers, holding mu, store
// a modified copy.
type ovShard struct {
	mu sync.Mutex
	m  atomic.Pointer[map[ovKey]*ovEntry]
	_  [48]byte // keep shards on separate cache lines
}

type ovKey struct{ policy, key string }

// ovEntry is an override, or a tombstone, and its change's number. It is
// never modified once in a map.
type ovEntry struct {
	k    ovKey
	o    limiter.Override
	seq  int64
	gone bool // a removal (a message's, or a tombstone)
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

func (m *ovMirror) get(policy, key string) (limiter.Override, bool) {
	if m.n.Load() == 0 {
		return limiter.Override{}, false
	}
	e := (*m.shard(key).m.Load())[ovKey{policy, key}]
	if e == nil || e.gone {
		return limiter.Override{}, false
	}
	return e.o, true
}

// stream applies a message from the channel, whose change numbers arrive
// in order: one not after *applied is already in the mirror (from a
// resync). It reports whether one is missing before it.
func (m *ovMirror) stream(e *ovEntry, applied *atomic.Int64) bool {
	sh := m.shard(e.k.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	last := applied.Load()
	if e.seq <= last {
		return false
	}
	applied.Store(e.seq) // under the key's lock: see local
	m.saw(e.seq)
	m.putLocked(sh, e, false)
	return e.seq != last+1
}

// local applies this instance's own change, before its message arrives.
// A change whose message the stream has already applied is left alone
// (the mirror has it, or something newer); a removal whose message is
// still to come leaves a tombstone, so that an older Set's message
// arriving meanwhile cannot bring the key back.
func (m *ovMirror) local(e *ovEntry, applied *atomic.Int64) {
	sh := m.shard(e.k.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// The stream applies a message under its key's lock, so if e's has
	// been applied, applied says so now.
	if e.seq <= applied.Load() {
		if cur := (*sh.m.Load())[e.k]; e.gone && cur != nil && cur.seq < e.seq {
			m.setLocked(sh, e.k, nil)
		}
		return
	}
	m.saw(e.seq)
	m.putLocked(sh, e, true)
}

// saw raises seen to seq.
func (m *ovMirror) saw(seq int64) {
	for s := m.seen.Load(); seq > s && !m.seen.CompareAndSwap(s, seq); s = m.seen.Load() {
	}
}

// putLocked applies e unless the mirror has a newer change of its key: a
// Set replaces the entry, a removal deletes it, or with tomb leaves a
// tombstone. A message that confirms a tombstone deletes it. Requires
// sh.mu held.
func (m *ovMirror) putLocked(sh *ovShard, e *ovEntry, tomb bool) {
	cur := (*sh.m.Load())[e.k]
	switch {
	case cur != nil && cur.seq >= e.seq:
		if cur.gone && cur.seq == e.seq {
			m.setLocked(sh, e.k, nil)
		}
	case e.gone && !tomb:
		if cur != nil {
			m.setLocked(sh, e.k, nil)
		}
	default:
		m.setLocked(sh, e.k, e)
	}
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

// replace loads a resync's overrides, read after change number seq, when
// the mirror had seen changes up to seen: the mirror's own entries for
// changes after seq (applied meanwhile) are kept where newer, everything
// else is replaced; all of it if seq is below seen (Redis lost changes).
func (m *ovMirror) replace(entries []*ovEntry, seq, seen int64, applied *atomic.Int64) {
	byShard := make([][]*ovEntry, len(m.shards))
	for _, e := range entries {
		i := maphash.String(m.seed, e.k.key) % uint64(len(m.shards))
		byShard[i] = append(byShard[i], e)
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
		old := *sh.m.Load()
		fresh := make(map[ovKey]*ovEntry, len(byShard[i]))
		for _, e := range byShard[i] {
			fresh[e.k] = e
		}
		for k, e := range old {
			if f := fresh[k]; e.seq > keepAfter && (f == nil || f.seq < e.seq) {
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
