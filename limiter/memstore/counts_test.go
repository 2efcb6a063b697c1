package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// TestCounts: AddCount adds and sets the expiry (0 too), Count reads; a
// count past its expiry is 0, and is dropped by the sweep; a full shard
// drops the counter that expires first of a sample.
func TestCounts(t *testing.T) {
	s := New(Options{MaxKeys: 64 * 4})
	ctx, t0 := context.Background(), time.Unix(1_800_000_000, 0)
	add := func(key string, n int64, ttl time.Duration, at time.Time) int64 {
		t.Helper()
		c, err := s.AddCount(ctx, key, n, ttl, at)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := add("k", 3, time.Minute, t0); c != 3 {
		t.Fatalf("3: %d", c)
	}
	if c := add("k", 4, time.Second, t0); c != 7 {
		t.Fatalf("3+4: %d", c)
	}
	if c, _ := s.Count(ctx, "k", t0.Add(999*time.Millisecond)); c != 7 {
		t.Fatalf("Count before the expiry: %d", c)
	}
	// The last addition's expiry (a second) counts, not the first's.
	if c, _ := s.Count(ctx, "k", t0.Add(time.Second)); c != 0 {
		t.Fatalf("Count at the expiry: %d", c)
	}
	if c := add("k", 0, time.Minute, t0.Add(2*time.Second)); c != 0 {
		t.Fatalf("0 after the expiry: %d", c)
	}
	if c := add("k", 1, time.Minute, t0.Add(time.Minute)); c != 1 {
		t.Fatalf("0 set the expiry: %d", c)
	}
	// Expired counters go with the sweep, which additions run.
	for i := range 1000 {
		add(strconv.Itoa(i), 1, time.Second, t0)
	}
	later := t0.Add(time.Hour)
	for i := range 2000 {
		add("later"+strconv.Itoa(i%4), 1, time.Second, later)
	}
	held := 0
	for i := range s.counts.shards {
		held += len(s.counts.shards[i].m)
	}
	if held > 64*4 {
		t.Errorf("%d counters held, above the store's %d keys", held, 64*4)
	}
	if c, _ := s.Count(ctx, "later1", later); c != 500 {
		t.Errorf("later1: %d, want 500", c)
	}
}
