package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/driver"
)

// TestEachOnce: the decisions a Cluster batch sends with a script call
// each (those a cross-slot call left undecided, or whose master the slot
// map does not name) are each counted once, even when the first of them
// meets a slot that a migration has split (TRYAGAIN: some of its keys
// moved). Sent as one pipeline, go-redis would send that master's other
// decisions again after the TRYAGAIN, though they had run.
func TestEachOnce(t *testing.T) {
	t.Parallel()
	addrs := redistest.Cluster(t) // its own: a slot moves
	c := NewClient(ClientOptions{Addrs: addrs, Timeout: 5 * time.Second}).(*redis.ClusterClient)
	t.Cleanup(func() { c.Close() })
	s, err := New(c, Options{Timeout: 5 * time.Second, OnError: "deny", Prefix: "each:"})
	if err != nil {
		t.Fatal(err)
	}
	fw, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 100, Window: time.Hour})
	tb, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: 100})
	limits, err := driver.Bind("each", []driver.Limit{fw.Driver(), tb.Driver()}) // two keys a decision
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A call as Store.run makes it: Redis's clock, one unit.
	mk := func(key string) *call {
		keys := make([]string, len(limits))
		args := []any{string(appendInt64s(nil, -1, 1, int64(len(limits)), 0))}
		for i := range limits {
			enc, err := s.encoded(&limits[i])
			if err != nil {
				t.Fatal(err)
			}
			keys[i] = string(appendKey(nil, s.prefix, key, limits[i].Name()))
			args = append(args, enc)
		}
		return &call{keys: keys, args: args, done: make(chan struct{})}
	}
	// "split" and three clients of other slots of its master.
	src, err := c.MasterForKey(ctx, mk("split").keys[0])
	must(t, err)
	slot := HashSlot("split")
	keys := []string{"split"}
	for i := 0; len(keys) < 4; i++ {
		k := "other-" + strconv.Itoa(i)
		if m, err := c.MasterForKey(ctx, mk(k).keys[0]); err == nil && m.Options().Addr == src.Options().Addr && HashSlot(k) != slot {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if _, err := s.Decide(ctx, limits, driver.OneKey(k), time.Now(), 1); err != nil {
			t.Fatal(err)
		}
	}
	// The slot of "split" migrating, one of its two keys moved.
	other := addrs[0]
	if other == src.Options().Addr {
		other = addrs[1]
	}
	dst := redis.NewClient(&redis.Options{Addr: other})
	t.Cleanup(func() { dst.Close() })
	id := func(n *redis.Client) string {
		v, err := n.Do(ctx, "CLUSTER", "MYID").Text()
		must(t, err)
		return v
	}
	must(t, dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", id(src)).Err())
	must(t, src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", id(dst)).Err())
	host, port, _ := strings.Cut(dst.Options().Addr, ":")
	must(t, src.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", mk("split").keys[0]).Err())

	var calls []*call
	for _, k := range keys {
		calls = append(calls, mk(k))
	}
	s.batch.each(ctx, calls)
	if err := calls[0].err; err == nil || !strings.Contains(err.Error(), "TRYAGAIN") {
		t.Errorf("the decision of a split slot: %v, want TRYAGAIN", err)
	}
	for i, k := range keys[1:] {
		// The reply's remaining units of the first limit, then a
		// decision more to read them again on Redis.
		if c := calls[i+1]; c.err != nil || len(c.res) < replyValues || c.res[2] != 98 {
			t.Errorf("%s, its second decision of 100: %v, %v; want 98 remaining", k, c.res, c.err)
		}
		if d, err := s.Decide(ctx, limits, driver.OneKey(k), time.Now(), 1); err != nil || d.Remaining != 97 {
			t.Errorf("%s, its third decision of 100: %+v, %v; want 97 remaining", k, d, err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
