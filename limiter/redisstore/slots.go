package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/perkey"
)

var _ perkey.Slots = (*Store)(nil)

// DefaultLease is how long a slot of a concurrency limit is held on Redis
// without being renewed: an instance renews the slots it holds every
// third of it, so the slots of an instance that crashed (or lost Redis)
// free themselves within a lease.
const DefaultLease = 15 * time.Second

// takeScript takes a slot of a concurrency limit: KEYS[1] is the limit's
// sorted set for one client key, members the slots held, scores when
// their leases end (ms, Redis's clock). ARGV: the lease (ms), the limit,
// the member. It returns 1 if the slot was taken.
var takeScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
`)

// renewScript extends a slot's lease if it is still held: 1, else 0
// (it lapsed, and another request may have its place).
var renewScript = redis.NewScript(`
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
`)

// leases are the slots this instance holds on Redis, renewed in the
// background while held.
type leases struct {
	instance string // random, so that members never collide across instances
	seq      atomic.Uint64
	mu       sync.Mutex
	held     map[uint64]heldSlot
	renewing bool
	lost     atomic.Int64 // slots whose lease lapsed while held
}

type heldSlot struct{ key, member string }

func newLeases() *leases {
	var b [8]byte
	rand.Read(b[:])
	return &leases{instance: hex.EncodeToString(b[:]), held: map[uint64]heldSlot{}}
}

// slotKey is the sorted set of name's slots of clientKey.
func (s *Store) slotKey(name, clientKey string) string {
	var buf [256]byte
	return string(appendKey(buf[:0], s.prefix, clientKey, "c/"+name))
}

// Take implements perkey.Slots. When Redis cannot answer in time, or the
// breaker is open, it follows on_error: "local" takes the slot from the
// fallback store (counted on this instance alone), "allow" lets the
// request through holding nothing, "deny" refuses it.
func (s *Store) Take(ctx context.Context, name, key string, limit int64, now time.Time) (perkey.Slot, bool, error) {
	br := s.guard(ctx, key, now)
	ok, probe := br.allow(now)
	if ok {
		sl, taken, err := s.take(ctx, name, key, limit)
		if !s.failed(ctx, br, now, probe, err) {
			return sl, taken, nil
		}
	}
	switch s.onError {
	case "local":
		if f, ok := s.fallback.(perkey.Slots); ok {
			sl, taken, err := f.Take(ctx, name, key, limit, now)
			sl.Local = true
			return sl, taken, err
		}
		fallthrough
	case "allow":
		return perkey.Slot{}, true, nil
	}
	return perkey.Slot{}, false, nil
}

func (s *Store) take(ctx context.Context, name, key string, limit int64) (perkey.Slot, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	l := s.leases
	id := l.seq.Add(1)
	member := l.instance + ":" + strconv.FormatUint(id, 10)
	k := s.slotKey(name, key)
	n, err := takeScript.Run(ctx, s.c, []string{k}, s.lease.Milliseconds(), limit, member).Int64()
	if err != nil {
		return perkey.Slot{}, false, fmt.Errorf("%w: redis: %w", limiter.ErrStoreUnavailable, err)
	}
	if n == 0 {
		return perkey.Slot{}, false, nil
	}
	l.mu.Lock()
	l.held[id] = heldSlot{key: k, member: member}
	if !l.renewing {
		l.renewing = true
		go s.renew()
	}
	l.mu.Unlock()
	return perkey.Slot{Name: name, Key: key, ID: id}, true, nil
}

// Give implements perkey.Slots. A slot Redis does not hear about in time
// frees itself when its lease ends.
func (s *Store) Give(sl perkey.Slot) {
	if sl.ID == 0 {
		return
	}
	if sl.Local {
		s.fallback.(perkey.Slots).Give(sl)
		return
	}
	l := s.leases
	l.mu.Lock()
	h, ok := l.held[sl.ID]
	delete(l.held, sl.ID)
	l.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if err := s.c.ZRem(ctx, h.key, h.member).Err(); err != nil {
		err = fmt.Errorf("%w: redis: %w", limiter.ErrStoreUnavailable, err)
		s.errors.Add(1)
		s.lastErr.Store(&err)
	}
}

// renew extends the leases held every third of a lease, in one pipeline,
// for as long as any is held.
func (s *Store) renew() {
	l := s.leases
	for {
		time.Sleep(s.lease / 3)
		l.mu.Lock()
		if len(l.held) == 0 {
			l.renewing = false
			l.mu.Unlock()
			return
		}
		ids := make([]uint64, 0, len(l.held))
		slots := make([]heldSlot, 0, len(l.held))
		for id, h := range l.held {
			ids = append(ids, id)
			slots = append(slots, h)
		}
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), max(s.timeout, s.lease/3))
		cmds, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, h := range slots {
				// EVAL, not EVALSHA: a pipeline cannot load a missing script.
				renewScript.Eval(ctx, p, []string{h.key}, s.lease.Milliseconds(), h.member)
			}
			return nil
		})
		cancel()
		if err != nil && !errors.Is(err, redis.Nil) {
			err = fmt.Errorf("%w: redis: renewing %d leases: %w", limiter.ErrStoreUnavailable, len(slots), err)
			s.errors.Add(1)
			s.lastErr.Store(&err)
		}
		for i, c := range cmds {
			if n, err := c.(*redis.Cmd).Int64(); err == nil && n == 0 {
				l.mu.Lock()
				if _, still := l.held[ids[i]]; still {
					l.lost.Add(1)
					delete(l.held, ids[i])
				}
				l.mu.Unlock()
			}
		}
	}
}

// LeasesLost returns how many slots lapsed on Redis while this instance
// held them (Redis unreachable for a whole lease): their requests went on,
// and others may have taken their places meanwhile.
func (s *Store) LeasesLost() int64 { return s.leases.lost.Load() }
