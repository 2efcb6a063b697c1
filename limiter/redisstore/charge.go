package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
)

// Interface guard.
var _ driver.Charger = (*Store)(nil)

// maxChargeUnits bounds the units one Charge sends: no limit applies more
// than twice its capacity (limiter.MaxWindowLimit at most, a fixed
// window's; limiter.MaxCount for the others), and the bound keeps the
// script's arithmetic on exact integers.
const maxChargeUnits = 2*limiter.MaxWindowLimit + 1

// Charge implements driver.Charger in one round trip: decide.lua charges
// every limit (mode 2 of its per-decision flag) with the rules of the
// limiter's Charge… steps, and reports their state, batched with the
// decisions like any other (batch.go); on Redis Cluster the limits must
// share a client key, as for Decide (ErrClusterKeys). The reservation
// instant is sent as its age at now, so that it reads on the script's
// clock (Redis's TIME) whatever the proxy's clock says.
//
// When Redis cannot be reached in time, or the breaker is open, a charge
// follows on_error as far as it can: "local" charges the Fallback store
// (which made the decisions meanwhile, so its limits see the true costs)
// and returns its Decision; "allow" and "deny" have no decision to make,
// and the charge is lost: Charge returns the error (wrapping
// limiter.ErrStoreUnavailable) for the caller to report. Failures count
// in Errors and towards the breaker, as decisions' do.
func (s *Store) Charge(ctx context.Context, limits []driver.Limit, keys driver.Keys, now, reservedAt time.Time, n int64) (driver.Decision, error) {
	for i := range limits {
		if err := limits[i].CheckCharge(); err != nil {
			return driver.Decision{}, err
		}
	}
	br := s.guard(ctx, keys.For(0), now)
	ok, probe := br.allow(now)
	if !ok {
		return s.degradedCharge(ctx, limits, keys, now, reservedAt, n,
			fmt.Errorf("%w: redis: circuit breaker open", limiter.ErrStoreUnavailable))
	}
	d, err := s.charge(ctx, limits, keys, now, reservedAt, n)
	if err != nil && !errors.Is(err, limiter.ErrStoreUnavailable) {
		// A parameter the store cannot take: not Redis's fault.
		br.done(now, probe, nil)
		return d, err
	}
	if s.failed(ctx, br, now, probe, err) {
		return s.degradedCharge(ctx, limits, keys, now, reservedAt, n, err)
	}
	return d, nil
}

// degradedCharge charges without Redis, per on_error; err is why.
func (s *Store) degradedCharge(ctx context.Context, limits []driver.Limit, keys driver.Keys, now, reservedAt time.Time, n int64, err error) (driver.Decision, error) {
	if s.onError == "local" {
		if c, ok := s.fallback.(driver.Charger); ok {
			return c.Charge(ctx, limits, keys, now, reservedAt, n)
		}
	}
	return driver.Decision{}, err
}

// charge runs the script's charge.
func (s *Store) charge(ctx context.Context, limits []driver.Limit, clientKeys driver.Keys, now, reservedAt time.Time, n int64) (driver.Decision, error) {
	if _, one := clientKeys.Single(); s.cluster != nil && !one {
		return driver.Decision{}, ErrClusterKeys
	}
	n = max(-maxChargeUnits, min(n, maxChargeUnits))
	at := int64(-1) // Redis's TIME
	if s.caller {
		at = now.Add(s.skew).UnixNano() / 1000
	}
	// The age in whole µs as the difference of the instants' µs, so that
	// with the caller's time the script sees reservedAt's µs exactly.
	age := max(0, floorMicros(now)-floorMicros(reservedAt))
	keys := make([]string, len(limits))
	args := make([]any, 0, 2+len(limits))
	var head [40]byte
	b := appendInt64s(head[:0], at, n, int64(len(limits)), 2)
	args = append(args, string(b[:32]), string(appendInt64s(b[32:32], age)))
	var buf [256]byte
	for i := range limits {
		enc, err := s.argument(&limits[i], now)
		if err != nil {
			return driver.Decision{}, err
		}
		keys[i] = string(appendKey(buf[:0], s.prefix, clientKeys.For(i), limits[i].Name()))
		args = append(args, enc)
	}
	res, err := s.batch.run(ctx, keys, args)
	if err != nil {
		return driver.Decision{}, fmt.Errorf("%w: redis: %w", limiter.ErrStoreUnavailable, err)
	}
	if len(res) != replyValues*len(limits)+1 {
		return driver.Decision{}, errors.New("redis: unexpected reply from the decide script's charge")
	}
	redisNow := res[len(res)-1]
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	var d driver.Decision
	for i := range limits {
		r := res[replyValues*i : replyValues*i+replyValues]
		x := driver.Decision{
			Allowed:   true,
			Capped:    r[1] == 1,
			Remaining: r[2],
			ResetAt:   now.Add(us(r[3] - redisNow)),
			Limit:     quota(limits[i]),
		}
		if r[5] != 0 {
			x.Next = max(0, us(r[5]-redisNow))
		}
		d.Merge(i, x)
	}
	return d, nil
}

// floorMicros returns t in whole µs since the epoch, rounded down.
func floorMicros(t time.Time) int64 {
	ns := t.UnixNano()
	us := ns / 1000
	if ns%1000 < 0 {
		us--
	}
	return us
}
