package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/limiter"
)

// follower keeps an instance's mirror of a table on Redis current — the
// penalty box (Bans), the per-key overrides (Overrides): it subscribes to
// the table's channel and applies its numbered messages, checks the
// mirror against the table's change counter every `every`, and reloads
// the whole table when a message was missed, on (re)subscribing, when the
// counter shows the mirror behind, and every fullEvery checks regardless.
//
// # Epochs
//
// Beside the change counter, the table keeps its epoch: a random number
// that the script which creates the counter (its first change, or the
// first after Redis lost it: a restart without persistence, FLUSHALL,
// FLUSHDB, eviction) writes, and every message carries. Change numbers
// are compared only within one epoch. A message of another epoch, a
// counter whose epoch differs from the mirror's or is gone, a counter
// below what the mirror has seen, and a message numbered at or below the
// last one applied after the stream had moved past a resync (a failover
// to a replica that lagged) all mean that Redis lost changes: the next
// resync first writes back (re-seeds) what this instance holds, the
// newer of each record winning by its version (see the tables), then
// reloads the table. The mirror never skips a message: every record
// carries a version that orders the writes of its key, and a message or a
// write is applied when it is newer than what the mirror holds.
type follower struct {
	name     string // "bans", "overrides": in errors
	c        redis.UniversalClient
	channel  string
	seqKey   string        // the table's change counter
	epochKey string        // the counter's epoch
	timeout  time.Duration // per call to Redis
	every    time.Duration
	// epoch is the epoch of the mirror's last resync (0 before it, or if
	// Redis had no counter then); applied the number of the latest change
	// of that epoch the mirror has from the stream of messages or a
	// resync, seen the highest it has from any source; streamed whether
	// the stream has applied a message since that resync (the follow
	// goroutine's alone).
	epoch    atomic.Int64
	applied  atomic.Int64
	seen     atomic.Int64
	streamed bool
	// lost is set when Redis is known to have lost changes: the next
	// resync re-seeds.
	lost    atomic.Bool
	reseeds atomic.Int64
	errors  atomic.Int64
	lastErr atomic.Pointer[error]
	kick    chan chan struct{} // forces a full resync (tests)
	wake    chan struct{}      // a local write saw another epoch: resync
	synced  chan struct{}      // closed by the first full resync
	once    sync.Once
}

func newFollower(name string, c redis.UniversalClient, channel, seqKey, epochKey string, timeout, every time.Duration) follower {
	return follower{name: name, c: c, channel: channel, seqKey: seqKey, epochKey: epochKey, timeout: timeout, every: every,
		kick: make(chan chan struct{}), wake: make(chan struct{}, 1), synced: make(chan struct{})}
}

// newEpoch returns the epoch a script writes if it creates the counter:
// random, drawn anew for each call, so that no two creations share one
// (below 2^52, so that Lua's numbers hold it exactly).
func newEpoch() int64 { return rand.Int64N(1<<52) + 1 }

// current reports whether Redis's epoch and change number are the
// mirror's.
func (f *follower) current(ctx context.Context) bool {
	ep, seq, err := f.counter(ctx)
	return err == nil && ep == f.epoch.Load() && seq == f.applied.Load()
}

// counter reads the table's epoch and change counter (0, 0 before the
// first change, or once Redis has lost them).
func (f *follower) counter(ctx context.Context) (epoch, seq int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	v, err := f.c.MGet(ctx, f.seqKey, f.epochKey).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("%w: redis: %s: %w", limiter.ErrStoreUnavailable, f.name, err)
	}
	num := func(x any) int64 {
		s, _ := x.(string)
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	seq, epoch = num(v[0]), num(v[1])
	if seq == 0 {
		epoch = 0 // a counter without epoch, or the reverse: both lost
	}
	return epoch, seq, nil
}

// order places a message of change seq of epoch ep in the stream, and
// reports whether the mirror is now stale: a message of another epoch, a
// gap before it, or a number the stream has passed (Redis lost changes).
// The message is applied either way (versions order it). Called by the
// follow goroutine only.
func (f *follower) order(ep, seq int64) (stale bool) {
	if ep != f.epoch.Load() {
		f.saw(ep, seq)
		return true
	}
	f.saw(ep, seq)
	last := f.applied.Load()
	if seq <= last {
		// Before the stream has moved past the last resync, messages it
		// already holds may still arrive; after, a number seen again
		// means the counter went back.
		if f.streamed {
			f.lost.Store(true)
			return true
		}
		return false
	}
	f.applied.Store(seq)
	f.streamed = true
	return seq != last+1
}

// saw records a change of epoch ep numbered seq, made here or streamed:
// a resync that finds the counter below it knows Redis lost changes. A
// change of another epoch than the mirror's wakes the follower.
func (f *follower) saw(ep, seq int64) {
	if ep != f.epoch.Load() {
		// The mirror may hold records of the epoch it knows that Redis
		// no longer has: the resync writes them back.
		f.lost.Store(true)
		select {
		case f.wake <- struct{}{}:
		default:
		}
		return
	}
	for s := f.seen.Load(); seq > s && !f.seen.CompareAndSwap(s, seq); s = f.seen.Load() {
	}
}

// check reads the counter at the start of a resync, and reports whether
// Redis lost changes since the mirror's last resync (see follower).
func (f *follower) check(ctx context.Context) (epoch, seq int64, lost bool, err error) {
	epoch, seq, err = f.counter(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	lost = f.lost.Load() || epoch != f.epoch.Load() || seq < f.seen.Load()
	return epoch, seq, lost, nil
}

// synced records a resync that read epoch and seq.
func (f *follower) resynced(epoch, seq int64) {
	f.lost.Store(false)
	f.epoch.Store(epoch)
	f.applied.Store(seq)
	f.seen.Store(seq)
	f.streamed = false
}

// Reseeds returns how many times this instance wrote its records back to
// Redis after Redis had lost changes.
func (f *follower) Reseeds() int64 { return f.reseeds.Load() }

// table is what a follower keeps current.
type table interface {
	// receive applies a message's payload; true if the mirror is now
	// stale (a message was missed, or could not be read).
	receive(payload string) bool
	// resync reloads the whole table.
	resync(ctx context.Context) error
}

// Errors returns how many calls to Redis failed.
func (f *follower) Errors() int64 { return f.errors.Load() }

// LastError returns the last error Redis gave, or nil.
func (f *follower) LastError() error {
	if p := f.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (f *follower) fail(err error) error {
	f.errors.Add(1)
	f.lastErr.Store(&err)
	return err
}

// follow keeps t current until ctx is done, then returns nil. A resync
// that fails is retried a second later (or at the next check, if sooner);
// meanwhile the mirror answers as it is.
func (f *follower) follow(ctx context.Context, t table) error {
	ps := f.c.Subscribe(ctx, f.channel)
	msgs := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	defer func() {
		ps.Close()
		for range msgs { // until go-redis's receiving goroutine has ended
		}
	}()
	retry := min(time.Second, f.every)
	timer := time.NewTimer(f.every)
	defer timer.Stop()
	var (
		stale    bool // a full resync is due
		backoff  bool // the last one failed: wait for the timer
		checks   int
		kickedBy []chan struct{}
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			switch m := m.(type) {
			case *redis.Subscription:
				// (Re)subscribed: messages may have been missed.
				stale = stale || m.Kind == "subscribe"
			case *redis.Message:
				stale = t.receive(m.Payload) || stale
			}
		case <-timer.C:
			backoff = false
			if checks++; !stale {
				stale = checks%fullEvery == 0 || !f.current(ctx)
			}
			timer.Reset(f.every)
		case done := <-f.kick:
			stale = true
			kickedBy = append(kickedBy, done)
		case <-f.wake:
			stale = true
		}
		if !stale || backoff {
			continue
		}
		if err := t.resync(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			f.fail(err)
			backoff = true
			timer.Reset(retry)
			continue
		}
		stale = false
		for _, done := range kickedBy {
			close(done)
		}
		kickedBy = nil
		f.once.Do(func() { close(f.synced) })
	}
}
