package memstore

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitproxy/limitproxy/limiter/internal/expheap"
	"github.com/limitproxy/limitproxy/limiter/perkey"
)

// Interface guard.
var _ perkey.Bans = (*Bans)(nil)

// DefaultMaxBans is the bound on ban records used when BanOptions.MaxBans
// is 0. A record costs about 150 bytes plus its policy name and key.
const DefaultMaxBans = 1_000_000

// banShardsMax is the most shards Bans uses.
const banShardsMax = 64

// BanOptions configures Bans. The zero value is usable.
type BanOptions struct {
	// MaxBans bounds the records kept, all policies together; 0 means
	// DefaultMaxBans. It is enforced per shard (MaxBans divided evenly
	// among up to 64 shards, fewer for a small bound so that each holds
	// at least 64).
	MaxBans int
}

// Bans is the in-memory penalty box (perkey.Bans), for one instance.
// Create it with NewBans; it is safe for concurrent use, and needs no
// goroutine.
//
// Records are sharded by a hash of the client key; each shard has a map
// for Banned and a min-heap by Expires. A record past its Expires is never
// reported, and is dropped by the next Ban in its shard (which pops every
// expired record off the heap), by Sweep, or to make room. When a shard is
// full, a new key's record evicts the record of the shard that expires
// soonest (usually the oldest offence), counted by Evictions: a flood of
// offenders cannot grow memory, and the bans evicted are those nearest to
// being forgotten anyway.
type Bans struct {
	seed      maphash.Seed
	shards    []banShard
	perShard  int
	n         atomic.Int64 // records held: 0 lets Banned skip the lock
	evictions atomic.Int64
}

type banShard struct {
	mu   sync.RWMutex
	recs map[banKey]*banRec
	heap expheap.Heap[*banRec]
	_    [64]byte // keep shards' locks on separate cache lines
}

type banKey struct{ policy, key string }

// banRec is a record, its instants in Unix ns.
type banRec struct {
	k                     banKey
	since, until, expires int64
	level                 int64
	pos                   int // index in the shard's heap
}

// Expiry, Index and SetIndex place r in its shard's heap.
func (r *banRec) Expiry() int64  { return r.expires }
func (r *banRec) Index() int     { return r.pos }
func (r *banRec) SetIndex(i int) { r.pos = i }

func (r *banRec) ban() perkey.Ban {
	return perkey.Ban{Policy: r.k.policy, Key: r.k.key, Since: time.Unix(0, r.since), Until: time.Unix(0, r.until),
		Level: r.level, Expires: time.Unix(0, r.expires)}
}

// NewBans returns an empty penalty box.
func NewBans(o BanOptions) *Bans {
	if o.MaxBans <= 0 {
		o.MaxBans = DefaultMaxBans
	}
	n := banShardsMax
	for n > 1 && o.MaxBans/n < 64 {
		n /= 2
	}
	b := &Bans{seed: maphash.MakeSeed(), shards: make([]banShard, n), perShard: max(1, (o.MaxBans+n-1)/n)}
	for i := range b.shards {
		b.shards[i].recs = map[banKey]*banRec{}
	}
	return b
}

func (b *Bans) shard(key string) *banShard {
	return &b.shards[maphash.String(b.seed, key)%uint64(len(b.shards))]
}

// Ban implements perkey.Bans. Its only error is for invalid params.
func (b *Bans) Ban(_ context.Context, policy, key string, p perkey.BanParams, now time.Time) (perkey.Ban, error) {
	if err := p.Validate(); err != nil {
		return perkey.Ban{}, err
	}
	k := banKey{policy, key}
	sh := b.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b.dropExpiredLocked(sh, now.UnixNano())
	prev := perkey.Ban{Policy: policy, Key: key}
	r := sh.recs[k]
	if r != nil {
		prev = r.ban()
	}
	next := p.Offend(prev, now)
	if r == nil {
		if len(sh.recs) >= b.perShard {
			b.evictions.Add(1)
			b.removeLocked(sh, sh.heap[0])
		}
		r = &banRec{k: k}
		sh.recs[k] = r
		sh.heap.Push(r)
		b.n.Add(1)
	}
	r.since, r.until, r.level, r.expires = next.Since.UnixNano(), next.Until.UnixNano(), next.Level, next.Expires.UnixNano()
	sh.heap.Fix(r.pos)
	return next, nil
}

// Banned implements perkey.Bans.
func (b *Bans) Banned(policy, key string, now time.Time) (perkey.Ban, bool) {
	if b.n.Load() == 0 {
		return perkey.Ban{}, false
	}
	sh := b.shard(key)
	sh.mu.RLock()
	r := sh.recs[banKey{policy, key}]
	if r == nil || now.UnixNano() >= r.until {
		sh.mu.RUnlock()
		return perkey.Ban{}, false
	}
	ban := r.ban()
	sh.mu.RUnlock()
	return ban, true
}

// Lift implements perkey.Bans. It never returns an error.
func (b *Bans) Lift(_ context.Context, policy, key string) (bool, error) {
	sh := b.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.recs[banKey{policy, key}]
	if r == nil {
		return false, nil
	}
	b.removeLocked(sh, r)
	return true, nil
}

// List implements perkey.Bans. It never returns an error.
func (b *Bans) List(_ context.Context, policy string, now time.Time, max int) ([]perkey.Ban, error) {
	if max < 1 {
		return nil, nil
	}
	ns := now.UnixNano()
	var out []perkey.Ban
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.RLock()
		for _, r := range sh.recs {
			if ns < r.until && (policy == "" || r.k.policy == policy) {
				out = append(out, r.ban())
			}
		}
		sh.mu.RUnlock()
	}
	perkey.SortBans(out)
	return out[:min(len(out), max)], nil
}

// Sweep drops every record whose Expires is not after now, one shard's
// lock at a time, and returns how many it dropped. Records past their
// Expires are never reported, so calling it only gives memory back
// sooner; the memory janitor may call it beside Store.Sweep.
func (b *Bans) Sweep(now time.Time) int {
	dropped := 0
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		dropped += b.dropExpiredLocked(sh, now.UnixNano())
		sh.mu.Unlock()
	}
	return dropped
}

// Len returns the number of records held, expired ones not yet dropped
// included.
func (b *Bans) Len() int { return int(b.n.Load()) }

// Evictions returns how many records were dropped before their Expires to
// stay within MaxBans, since b was created.
func (b *Bans) Evictions() int64 { return b.evictions.Load() }

// dropExpiredLocked drops the shard's records whose Expires is not after
// now (Unix ns). Requires sh.mu held for writing.
func (b *Bans) dropExpiredLocked(sh *banShard, now int64) int {
	dropped := 0
	for len(sh.heap) > 0 && sh.heap[0].expires <= now {
		b.removeLocked(sh, sh.heap[0])
		dropped++
	}
	if dropped > 0 && len(sh.recs) == 0 {
		sh.recs = map[banKey]*banRec{} // give a flood's buckets back
		sh.heap = nil
	}
	return dropped
}

// removeLocked drops r. Requires sh.mu held for writing.
func (b *Bans) removeLocked(sh *banShard, r *banRec) {
	delete(sh.recs, r.k)
	sh.heap.Remove(r.pos)
	b.n.Add(-1)
}
