package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/limiter"
)

// follower keeps an instance's mirror of a table on Redis current — the
// penalty box (Bans), the per-key overrides (Overrides): it subscribes to
// the table's channel and applies its numbered messages, checks the
// mirror against the table's change counter every `every`, and reloads
// the whole table when a message was missed, on (re)subscribing, when the
// counter shows the mirror behind, and every fullEvery checks regardless.
type follower struct {
	name    string // "bans", "overrides": in errors
	c       redis.UniversalClient
	channel string
	seqKey  string        // the table's change counter
	timeout time.Duration // per call to Redis
	every   time.Duration
	// applied is the number of the latest change the mirror has from the
	// stream of messages or a resync.
	applied atomic.Int64
	errors  atomic.Int64
	lastErr atomic.Pointer[error]
	kick    chan chan struct{} // forces a full resync (tests)
	synced  chan struct{}      // closed by the first full resync
	once    sync.Once
}

func newFollower(name string, c redis.UniversalClient, channel, seqKey string, timeout, every time.Duration) follower {
	return follower{name: name, c: c, channel: channel, seqKey: seqKey, timeout: timeout, every: every,
		kick: make(chan chan struct{}), synced: make(chan struct{})}
}

// current reports whether Redis's change number is the mirror's.
func (f *follower) current(ctx context.Context) bool {
	seq, err := f.seq(ctx)
	return err == nil && seq == f.applied.Load()
}

// seq reads the table's change counter (0 before the first change).
func (f *follower) seq(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	seq, err := f.c.Get(ctx, f.seqKey).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: redis: %s: %w", limiter.ErrStoreUnavailable, f.name, err)
	}
	return seq, nil
}

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
