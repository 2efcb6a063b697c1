package driver_test

import (
	"fmt"
	"time"

	"github.com/limitproxy/limitproxy/limiter/driver"
)

// What a store does for one key of a token bucket: it keeps the 16-byte
// state, and under its own lock applies the step at the instant the
// Limiter passes in. A store deciding several limits at once Peeks each
// first and Steps them only if all admit.
func ExampleLimit_StepTokenBucket() {
	l, err := driver.NewTokenBucket(driver.TokenBucketParams{Rate: driver.Rate{N: 1, Per: time.Second}, Burst: 1})
	if err != nil {
		panic(err)
	}
	var s driver.TokenBucketState // the zero state is a fresh, full bucket
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 0, 250 * time.Millisecond, time.Second} {
		if p := l.PeekTokenBucket(&s, t0.Add(at), 1); !p.Allowed {
			fmt.Printf("t+%v: rejected, retry after %v\n", at, p.RetryAfter)
			continue
		}
		d := l.StepTokenBucket(&s, t0.Add(at), 1)
		fmt.Printf("t+%v: allowed, %d left\n", at, d.Remaining)
	}
	// Output:
	// t+0s: allowed, 0 left
	// t+0s: rejected, retry after 1s
	// t+250ms: rejected, retry after 750ms
	// t+1s: allowed, 0 left
}
