package leases_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/leases"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// TestCountsForwarded: the tier's counters are its shared store's.
func TestCountsForwarded(t *testing.T) {
	shared := memstore.New(memstore.Options{})
	var tier limiter.Store = leases.New(shared, leases.Options{})
	ctr, ok := tier.(limiter.Counter)
	if !ok {
		t.Fatal("the tier keeps no counters")
	}
	ctx, now := context.Background(), time.Now()
	if c, err := ctr.AddCount(ctx, "k", 2, time.Minute, now); err != nil || c != 2 {
		t.Fatalf("AddCount: %d, %v", c, err)
	}
	if c, err := shared.Count(ctx, "k", now); err != nil || c != 2 {
		t.Fatalf("the shared store's count: %d, %v", c, err)
	}
	if c, err := ctr.Count(ctx, "k", now); err != nil || c != 2 {
		t.Fatalf("Count: %d, %v", c, err)
	}
}
