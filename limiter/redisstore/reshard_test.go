package redisstore_test

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/limitertest"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
)

// TestClusterReshard moves a slot from one master to another while 32
// goroutines decide on keys of that slot and of others (batched: one
// script call a master, whatever the slots): the decisions whose keys the
// call's master no longer serves, or not all of them while the slot
// moves, are left undecided there and sent again on their own, so every
// key admits exactly its limit, no more (a decision counted twice) and no
// less (one lost).
func TestClusterReshard(t *testing.T) {
	t.Parallel()
	addrs := redistest.Cluster(t)
	ctx := context.Background()
	c := redisstore.NewClient(redisstore.ClientOptions{Addrs: addrs, Timeout: 5 * time.Second})
	t.Cleanup(func() { c.Close() })
	// Errors are expected while the slot moves (TRYAGAIN while a
	// multi-key command finds only some keys): they decide nothing.
	s, err := redisstore.New(c, redisstore.Options{Timeout: 5 * time.Second, OnError: "deny"})
	if err != nil {
		t.Fatal(err)
	}
	const limit = 40
	fw, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: limit, Window: time.Hour})
	tb, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1, Per: time.Hour}, Burst: 100})
	l, _ := limiter.New(s, "reshard", fw, tb) // two keys a decision
	// Keys of the slot that moves, and keys elsewhere.
	slot := redisstore.HashSlot("moving-0")
	keys := []string{"moving-0"}
	for i := 1; len(keys) < 4; i++ {
		if k := "moving-" + strconv.Itoa(i); redisstore.HashSlot(k) == slot {
			keys = append(keys, k)
		}
	}
	for i := range 20 {
		keys = append(keys, "other-"+strconv.Itoa(i))
	}
	var mu sync.Mutex
	admitted := map[string]int{}
	var done atomic.Int64
	decide := func(g, rounds int) {
		for i := range rounds {
			key := keys[(g+i)%len(keys)]
			d, err := l.Allow(ctx, key, time.Now(), 1)
			if err != nil {
				t.Error(err)
				return
			}
			if d.Allowed && !d.Degraded {
				mu.Lock()
				admitted[key]++
				mu.Unlock()
			}
			done.Add(1)
		}
	}
	after := func(n int64) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d decisions", n), 20*time.Second, func() bool { return done.Load() >= n })
	}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() { decide(g, 60) }) // 1,920 decisions during the move
	}
	src, dst := slotOwner(t, addrs, slot)
	srcID, dstID := nodeID(t, src), nodeID(t, dst)
	after(300)
	must(t, dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(t, src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	host, port, _ := strings.Cut(dst.Options().Addr, ":")
	for step := int64(1); ; step++ {
		// One key at a time, traffic in between: decisions meet the slot
		// with some of a decision's keys moved and others not.
		ks, err := src.ClusterGetKeysInSlot(ctx, slot, 1).Result()
		must(t, err)
		if len(ks) == 0 {
			break
		}
		must(t, src.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", ks[0]).Err())
		after(300 + 50*step)
	}
	for _, a := range addrs {
		n := redis.NewClient(&redis.Options{Addr: a})
		must(t, n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
		n.Close()
	}
	moving := done.Load()
	wg.Wait()
	// And after the move, on the slot map the client read before it.
	for g := range 32 {
		wg.Go(func() { decide(g, 30) })
	}
	wg.Wait()
	_, _, moved := s.ScriptCalls()
	t.Logf("%d decisions while the slot moved, %d left to a call of their own; %d errors, last %v", moving, moved, s.Errors(), s.LastError())
	if owner, _ := slotOwner(t, addrs, slot); owner.Options().Addr != dst.Options().Addr {
		t.Fatalf("slot %d is on %s after the move, want %s", slot, owner.Options().Addr, dst.Options().Addr)
	}
	for _, k := range keys {
		if admitted[k] != limit {
			t.Errorf("%s (slot %d): admitted %d, want %d", k, redisstore.HashSlot(k), admitted[k], limit)
		}
	}
	if moved == 0 {
		t.Error("no decision was sent again: the move was not seen")
	}
}

// slotOwner returns a client of the master serving slot, and one of
// another master.
func slotOwner(t *testing.T, addrs []string, slot int) (owner, other *redis.Client) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addrs[0]})
	defer c.Close()
	shards, err := c.ClusterShards(context.Background()).Result()
	must(t, err)
	for _, sh := range shards {
		var addr string
		for _, n := range sh.Nodes {
			if n.Role == "master" {
				addr = n.IP + ":" + strconv.FormatInt(n.Port, 10)
			}
		}
		serves := false
		for _, r := range sh.Slots {
			serves = serves || slot >= int(r.Start) && slot <= int(r.End)
		}
		switch {
		case serves && owner == nil:
			owner = redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { owner.Close() })
		case !serves && other == nil && len(sh.Slots) > 0:
			other = redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { other.Close() })
		}
	}
	if owner == nil || other == nil || owner.Options().Addr == other.Options().Addr {
		t.Fatalf("slot %d: no owner and other master in %+v", slot, shards)
	}
	return owner, other
}

func nodeID(t *testing.T, c *redis.Client) string {
	t.Helper()
	id, err := c.Do(context.Background(), "CLUSTER", "MYID").Text()
	must(t, err)
	return id
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var clusterConformance = flag.Bool("cluster-conformance", false, "run the conformance suite on a Redis Cluster of three masters and on one with a replica each (about a minute)")

// conformanceNodeTimeout is the cluster-node-timeout of the conformance
// run's cluster with replicas. A node busy with one script answers no
// peer meanwhile, and once it has been silent for the node timeout its
// peers fail it over: its replica, which the script's writes reach only
// when it ends, takes its slots without them. The suite's longest script
// (Charge/Bounds filling a sliding log of 200,000 entries) runs for over
// a second on a loaded machine; a failover is no part of this run.
const conformanceNodeTimeout = 30 * time.Second

// TestConformanceCluster holds the store on Redis Cluster, with and
// without replicas, to the conformance suite (with -cluster-conformance),
// but for Keys: on Cluster a policy's limits must share one client key.
func TestConformanceCluster(t *testing.T) {
	if !*clusterConformance {
		t.Skip("with -cluster-conformance")
	}
	for name, addrs := range map[string]func(testing.TB) []string{
		"masters": redistest.SharedCluster,
		"replicas": func(t testing.TB) []string {
			var addrs []string
			for _, sh := range redistest.ClusterReplicas(t, conformanceNodeTimeout) {
				addrs = append(addrs, sh.Master.Addr())
			}
			return addrs
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := redisstore.NewClient(redisstore.ClientOptions{Addrs: addrs(t), Timeout: 5 * time.Second})
			t.Cleanup(func() { c.Close() })
			conformance(t, func(t *testing.T) limiter.Store {
				return newStore(t, c, redisstore.Options{CallerTime: true, Timeout: 5 * time.Second, Prefix: redistest.Prefix(t)})
			}, limitertest.Options{Resolution: time.Microsecond, Seeds: 2, Parallel: true, OneKey: true}, false)
		})
	}
}
