package leases

import (
	"context"
	"errors"
	"time"

	"github.com/limitproxy/limitproxy/limiter/driver"
)

// Interface guard.
var _ driver.Counter = (*Store)(nil)

// errNoCounter is AddCount's and Count's error when the shared store
// keeps no counters.
var errNoCounter = errors.New("leases: the shared store keeps no counters")

// AddCount implements driver.Counter: the shared store's, unchanged (a
// count is never leased).
func (s *Store) AddCount(ctx context.Context, key string, n int64, ttl time.Duration, now time.Time) (int64, error) {
	c, ok := s.shared.(driver.Counter)
	if !ok {
		return 0, errNoCounter
	}
	return c.AddCount(ctx, key, n, ttl, now)
}

// Count implements driver.Counter: the shared store's.
func (s *Store) Count(ctx context.Context, key string, now time.Time) (int64, error) {
	c, ok := s.shared.(driver.Counter)
	if !ok {
		return 0, errNoCounter
	}
	return c.Count(ctx, key, now)
}
