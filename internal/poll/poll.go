// Package poll waits, in tests, for a condition that another goroutine or
// another process makes true: a reload applied, a gauge reaching a value,
// a listener closed. It replaces a fixed sleep that guesses how long the
// other side takes with a bounded wait that ends as soon as the condition
// holds, so a test is as fast as the code on an idle machine and still
// passes on a busy one.
//
// Poll only what has no event to wait on. A channel, a callback or a hook
// the code already offers is better; time-dependent logic is better
// tested with an injected clock or inside a testing/synctest bubble.
package poll

import (
	"fmt"
	"testing"
	"time"
)

// firstPause and maxPause bound the pause between two calls of a
// condition: it starts at firstPause, so that a condition met within a
// millisecond is seen at once, and doubles up to maxPause, so that a
// condition that costs a request to a server under test is called at most
// about 40 times a second.
const (
	firstPause = time.Millisecond
	maxPause   = 25 * time.Millisecond
)

// Until calls cond, at once and then after pauses of 1 ms doubling up to
// 25 ms, until it returns true or timeout has passed since the call, and
// reports whether it returned true. cond is called from the caller's
// goroutine, so it may call t.Fatal.
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	pause := firstPause
	for {
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, maxPause)
	}
}

// For is Until that fails the test when timeout passes first, with the
// message "after <timeout>: " and what (formatted with args when there
// are any, at the failure).
func For(t testing.TB, timeout time.Duration, cond func() bool, what string, args ...any) {
	t.Helper()
	if !Until(timeout, cond) {
		t.Fatalf("after %v: %s", timeout, fmt.Sprintf(what, args...))
	}
}
