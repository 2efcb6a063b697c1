package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
)

// Share limits between instances through Redis, falling back to this
// instance's own memory store while Redis cannot answer within the
// timeout. (This example needs a redis-server on 127.0.0.1:6379, so it is
// compiled but not run: its output would depend on what that server
// holds. The package's tests start their own servers.)
func Example() {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer c.Close()
	store, err := redisstore.New(c, redisstore.Options{
		Timeout:  50 * time.Millisecond,
		OnError:  "local",
		Fallback: memstore.New(memstore.Options{}),
	})
	if err != nil {
		panic(err)
	}
	tb, err := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 100, Per: time.Minute}, Burst: 100})
	if err != nil {
		panic(err)
	}
	// A limit the Redis store cannot decide exactly (a period that is not
	// whole microseconds, figures past 2^53) is refused here, not later.
	if err := redisstore.Check(tb); err != nil {
		panic(err)
	}
	l, err := limiter.New(store, "api", tb)
	if err != nil {
		panic(err)
	}
	d, err := l.Allow(context.Background(), "203.0.113.9", time.Now(), 1)
	switch {
	case errors.Is(err, limiter.ErrStoreUnavailable):
		fmt.Println("no decision:", err) // only with OnError "" and no Fallback
	case d.Degraded:
		fmt.Println("decided locally:", d.Allowed)
	default:
		fmt.Println("decided on Redis:", d.Allowed, d.Remaining)
	}
}
