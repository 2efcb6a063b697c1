package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
)

// Interface guard.
var _ driver.Counter = (*Store)(nil)

// countName ends the Redis key of a count (appendKey), so that it is in
// its key's hash slot and never another state's.
const countName = "#count"

// addCountScript is INCRBY and PEXPIRE of one key in one call, as
// envoyproxy/ratelimit pipelines INCRBY and EXPIRE.
var addCountScript = redis.NewScript(`
local c = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return c
`)

// AddCount implements driver.Counter on Redis: the count is a string key
// of the store's prefix, shared by every instance, whose expiry Redis's
// clock keeps. An open breaker, or Redis not answering within the
// store's timeout, returns an error wrapping limiter.ErrStoreUnavailable
// (the caller follows on_error; nothing is counted then), and counts
// towards the breaker as a decision's failure does.
func (s *Store) AddCount(ctx context.Context, key string, n int64, ttl time.Duration, now time.Time) (int64, error) {
	var c int64
	err := s.countCall(ctx, key, now, func(ctx context.Context, k string) (err error) {
		c, err = addCountScript.Run(ctx, s.c, []string{k}, n, max(ttl.Milliseconds(), 1)).Int64()
		return err
	})
	return c, err
}

// Count implements driver.Counter on Redis: a GET.
func (s *Store) Count(ctx context.Context, key string, now time.Time) (int64, error) {
	var c int64
	err := s.countCall(ctx, key, now, func(ctx context.Context, k string) (err error) {
		c, err = s.c.Get(ctx, k).Int64()
		if errors.Is(err, redis.Nil) {
			c, err = 0, nil
		}
		return err
	})
	return c, err
}

// countCall runs call on the Redis key of count key within the store's
// timeout, guarded by the breaker of key's node.
func (s *Store) countCall(ctx context.Context, key string, now time.Time, call func(context.Context, string) error) error {
	br := s.guard(ctx, key, now)
	ok, probe := br.allow(now)
	if !ok {
		return fmt.Errorf("%w: redis: circuit breaker open", limiter.ErrStoreUnavailable)
	}
	var buf [256]byte
	k := string(appendKey(buf[:0], s.prefix, key, countName))
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	err := call(cctx, k)
	cancel()
	if err != nil {
		err = fmt.Errorf("%w: redis: %w", limiter.ErrStoreUnavailable, err)
	}
	s.failed(ctx, br, now, probe, err)
	return err
}
