package redisstore

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/redistest"
)

// TestFollowStops: each mirror's Run (the penalty box's, the overrides')
// returns when its context ends, after its first full resync, leaving no
// goroutine behind (its subscription's included). It counts only the
// goroutines of the mirror's code and of go-redis's subscriptions, so that
// it may run beside other tests.
func TestFollowStops(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(c *redis.Client) (func(context.Context) error, <-chan struct{})
	}{
		{"bans", func(c *redis.Client) (func(context.Context) error, <-chan struct{}) {
			b := NewBans(c, BanOptions{})
			return b.Run, b.synced
		}},
		{"overrides", func(c *redis.Client) (func(context.Context) error, <-chan struct{}) {
			s := NewOverrides(c, OverrideOptions{})
			return s.Run, s.Loaded()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := client(t, redistest.Start(t).Addr())
			cl.Ping(context.Background())
			before := mirrorGoroutines()
			ctx, cancel := context.WithCancel(context.Background())
			run, synced := c.run(cl)
			done := make(chan error, 1)
			go func() { done <- run(ctx) }()
			<-synced
			if n := mirrorGoroutines(); n == 0 {
				t.Fatal("no goroutine of the mirror's found while Run runs: the count below would not see one left behind")
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return within 5s of its context ending")
			}
			deadline := time.Now().Add(2 * time.Second)
			for mirrorGoroutines() > before {
				if time.Now().After(deadline) {
					buf := make([]byte, 1<<16)
					t.Fatalf("%d goroutines of the mirror's before Run, %d after:\n%s", before, mirrorGoroutines(), buf[:runtime.Stack(buf, true)])
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// mirrorGoroutines counts the goroutines running a method of this
// package's or of a go-redis subscription's: other tests' goroutines
// (the shared cluster's start, say) are not counted.
func mirrorGoroutines() int {
	buf := make([]byte, 1<<20)
	n := 0
	for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "limiter/redisstore.(*") || strings.Contains(g, "go-redis/v9.(*PubSub)") || strings.Contains(g, "go-redis/v9.(*channel)") {
			n++
		}
	}
	return n
}

// following runs run (a mirror's Run) until the test ends, and waits for
// it then; it returns once f's mirror has loaded its table.
func following(t testing.TB, run func(context.Context) error, f *follower) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-f.synced:
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not load the table within 10s: %v", f.LastError())
	}
}
