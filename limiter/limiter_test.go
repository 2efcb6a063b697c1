package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// noCharger is a Store that cannot charge.
type noCharger struct{ limiter.Store }

// TestChargeNoCharger: a Limiter on a Store without Charger says so.
func TestChargeNoCharger(t *testing.T) {
	fw, err := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(noCharger{}, "p", fw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Charge(context.Background(), "k", t0, t0, 1); !errors.Is(err, limiter.ErrNoCharger) {
		t.Fatalf("Charge = %v, want ErrNoCharger", err)
	}
	if _, err := l.ChargeKeys(context.Background(), []string{"k"}, t0, t0, 1); !errors.Is(err, limiter.ErrNoCharger) {
		t.Fatalf("ChargeKeys = %v, want ErrNoCharger", err)
	}
}

// TestDecisionFold: limiter.Decision is driver.Decision (what a Store
// returns reaches the caller as it is), and Fold keeps the rejecting
// limit's figures with the longest RetryAfter.
func TestDecisionFold(t *testing.T) {
	var d driver.Decision = limiter.Decision{Allowed: true, Remaining: 3, Limit: 5}
	d.Fold(1, limiter.Decision{RetryAfter: time.Second, Limit: 2})
	want := limiter.Decision{RetryAfter: time.Second, Limit: 2, Index: 1}
	if d != want {
		t.Fatalf("Fold = %+v, want %+v", d, want)
	}
}

// TestParamErrorFromConstructor: the constructors' errors are
// *limiter.ParamError naming the field.
func TestParamErrorFromConstructor(t *testing.T) {
	_, err := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Second}})
	var pe *limiter.ParamError
	if !errors.As(err, &pe) || pe.Field != "burst" {
		t.Fatalf("NewTokenBucket(burst 0) = %v, want a ParamError for burst", err)
	}
}

// TestParamsRoundTrip: Params gives back what the constructor took, with
// Cost 0 read as 1, for every algorithm.
func TestParamsRoundTrip(t *testing.T) {
	r := limiter.Rate{N: 10, Per: time.Second}
	for _, c := range []struct {
		l    func() (limiter.Limit, error)
		want any
	}{
		{func() (limiter.Limit, error) {
			return limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: r, Burst: 5})
		}, limiter.TokenBucketParams{Rate: r, Burst: 5, Cost: 1}},
		{func() (limiter.Limit, error) {
			return limiter.NewLeakyBucket(limiter.LeakyBucketParams{Rate: r, Queue: 3, MaxWait: time.Second})
		}, limiter.LeakyBucketParams{Rate: r, Queue: 3, MaxWait: time.Second, Cost: 1}},
		{func() (limiter.Limit, error) {
			return limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 4, Window: time.Minute, Cost: 2})
		}, limiter.FixedWindowParams{Limit: 4, Window: time.Minute, Cost: 2}},
		{func() (limiter.Limit, error) {
			return limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 4, Window: time.Minute})
		}, limiter.SlidingLogParams{Limit: 4, Window: time.Minute, Cost: 1}},
		{func() (limiter.Limit, error) {
			return limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: 4, Window: time.Minute, Slots: 6})
		}, limiter.SlidingWindowParams{Limit: 4, Window: time.Minute, Slots: 6, Cost: 1}},
	} {
		l, err := c.l()
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Params(); got != c.want {
			t.Errorf("%v: Params() = %+v, want %+v", l, got, c.want)
		}
	}
	if (limiter.Limit{}).Params() != nil {
		t.Error("the zero Limit has Params")
	}
}

// TestPeekKeys: PeekKeys says what AllowKeys would, for each limit's key
// and skipping SkipKey, and counts nothing.
func TestPeekKeys(t *testing.T) {
	a, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 2, Window: time.Minute})
	b, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 3, Window: time.Minute})
	l, err := limiter.New(memstore.New(memstore.Options{}), "p", a, b)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, keys := range [][]string{{"x", "y"}, {limiter.SkipKey, "y"}} {
		for i := range 5 {
			p, err := l.PeekKeys(ctx, keys, t0, 1)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 { // peeking again changes nothing
				if again, _ := l.PeekKeys(ctx, keys, t0, 1); again != p {
					t.Fatalf("%v call %d: peeks differ: %+v, %+v", keys, i, p, again)
				}
			}
			d, err := l.AllowKeys(ctx, keys, t0, 1)
			if err != nil {
				t.Fatal(err)
			}
			if p.Allowed != d.Allowed || p.Index != d.Index || p.Remaining != d.Remaining {
				t.Errorf("%v call %d: peek %+v, allow %+v", keys, i, p, d)
			}
		}
	}
	if _, err := l.PeekKeys(ctx, []string{"x"}, t0, 1); err == nil {
		t.Error("PeekKeys took 1 key for 2 limits")
	}
}
