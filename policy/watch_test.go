package policy

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

func startWatcher(t *testing.T, debounce time.Duration) (path string, changes *atomic.Int64, stop func()) {
	t.Helper()
	dir := t.TempDir()
	path = filepath.Join(dir, "c.toml")
	os.WriteFile(path, []byte("a"), 0o644)
	changes = &atomic.Int64{}
	w, err := NewWatcher(path, debounce, nil, func() { changes.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	return path, changes, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWatcherBurst: a burst of writes within the debounce is one change;
// writes to other files of the directory are none.
func TestWatcherBurst(t *testing.T) {
	path, changes, stop := startWatcher(t, 200*time.Millisecond)
	defer stop()
	os.WriteFile(filepath.Join(filepath.Dir(path), "other.toml"), []byte("x"), 0o644)
	for range 5 {
		os.WriteFile(path, []byte("b"), 0o644)
	}
	waitFor(t, "one change reported", func() bool { return changes.Load() >= 1 })
	time.Sleep(400 * time.Millisecond) // twice the debounce: nothing more may come
	if n := changes.Load(); n != 1 {
		t.Errorf("5 writes in one burst reported %d changes, want 1", n)
	}
}

// TestWatcherContinuousWrites: a file rewritten without pause is still
// reported while it goes on, not only once it stops.
func TestWatcherContinuousWrites(t *testing.T) {
	path, changes, stop := startWatcher(t, 50*time.Millisecond)
	defer stop()
	begin := time.Now()
	for time.Since(begin) < time.Second && changes.Load() < 3 {
		os.WriteFile(path, []byte(time.Now().String()), 0o644)
		time.Sleep(10 * time.Millisecond)
	}
	if n := changes.Load(); n < 3 {
		t.Errorf("a second of writes every 10ms reported %d changes; a debounce that resets on every event starves", n)
	}
}
