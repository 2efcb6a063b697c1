package driver_test

import (
	"fmt"
	"time"

	"github.com/limitproxy/limitproxy/limiter/driver"
)

// What a store does for one key of a limit: it keeps the key's state in
// States the limit makes (here an array of one; the memory store keeps
// one per slot of its hash table), and under its own lock applies the
// limit's step at the instant the Limiter passes in. A store deciding
// several limits at once Peeks each first and Steps them only if all
// admit. Nothing here depends on the algorithm.
func ExampleLimit_Step() {
	l, err := driver.NewLimit(driver.Spec{Algorithm: driver.TokenBucket, Rate: driver.Rate{N: 1, Per: time.Second}, Burst: 1})
	if err != nil {
		panic(err)
	}
	st := l.NewStates(1) // state 0 is a fresh key's: a full bucket
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 0, 250 * time.Millisecond, time.Second} {
		if p := l.Peek(st, 0, nil, t0.Add(at), 1); !p.Allowed {
			fmt.Printf("t+%v: rejected, retry after %v\n", at, p.RetryAfter)
			continue
		}
		d := l.Step(st, 0, nil, t0.Add(at), 1)
		fmt.Printf("t+%v: allowed, %d left\n", at, d.Remaining)
	}
	// Output:
	// t+0s: allowed, 0 left
	// t+0s: rejected, retry after 1s
	// t+250ms: rejected, retry after 750ms
	// t+1s: allowed, 0 left
}
