package config

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// startWatcher runs a Watcher on a real file (inotify: real time, no
// synctest bubble); each change it reports is counted and signalled on
// changed.
func startWatcher(t *testing.T, debounce time.Duration) (path string, changes *atomic.Int64, changed <-chan struct{}, stop func()) {
	t.Helper()
	dir := t.TempDir()
	path = filepath.Join(dir, "c.toml")
	os.WriteFile(path, []byte("a"), 0o644)
	changes = &atomic.Int64{}
	signal := make(chan struct{}, 100)
	w, err := NewWatcher(path, debounce, nil, func() {
		changes.Add(1)
		select {
		case signal <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	return path, changes, signal, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// TestWatcherBurst: a burst of writes within the debounce is one change;
// writes to other files of the directory are none.
func TestWatcherBurst(t *testing.T) {
	path, changes, changed, stop := startWatcher(t, 200*time.Millisecond)
	defer stop()
	os.WriteFile(filepath.Join(filepath.Dir(path), "other.toml"), []byte("x"), 0o644)
	for range 5 {
		os.WriteFile(path, []byte("b"), 0o644)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("after 10s: no change reported")
	}
	// Twice the debounce of real time: nothing more may come (a negative
	// on real inotify events; TestDebounce pins the instants in a bubble).
	time.Sleep(400 * time.Millisecond)
	if n := changes.Load(); n != 1 {
		t.Errorf("5 writes in one burst reported %d changes, want 1", n)
	}
}

// TestWatcherContinuousWrites: a file rewritten without pause is still
// reported while it goes on (DefaultMaxDelay after the first write), not
// only once it stops.
func TestWatcherContinuousWrites(t *testing.T) {
	path, changes, _, stop := startWatcher(t, 50*time.Millisecond)
	defer stop()
	begin := time.Now()
	for time.Since(begin) < DefaultMaxDelay+3*time.Second && changes.Load() == 0 {
		os.WriteFile(path, []byte(time.Now().String()), 0o644)
		time.Sleep(10 * time.Millisecond) // a writer on the real file, faster than the debounce
	}
	if changes.Load() == 0 {
		t.Errorf("%v of writes every 10ms reported no change; a debounce that waits for quiet alone starves", time.Since(begin))
	}
}

// TestDebounce pins the debounce's instants on a fake clock: a change is
// reported once the events have been quiet for the interval, so a file
// saved in two writes 150ms apart is applied once, after the second; and
// at the latest maxDelay after the first event of a burst that never
// falls quiet.
func TestDebounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		events := make(chan struct{})
		var reported []time.Duration
		start := time.Now()
		done := make(chan struct{})
		go func() {
			debounce(ctx, events, DefaultDebounce, DefaultMaxDelay, func() { reported = append(reported, time.Since(start)) })
			close(done)
		}()
		event := func(at time.Duration) {
			time.Sleep(at - time.Since(start))
			events <- struct{}{}
		}
		// Two writes 150ms apart: one change, 300ms after the second.
		event(0)
		event(150 * time.Millisecond)
		// A write every 30ms from 1s to 3.97s never leaves 300ms of
		// quiet: the max delay reports at 3s; the writes after it make a
		// new burst, reported 300ms after its last write.
		for at := time.Second; at < 4*time.Second; at += 30 * time.Millisecond {
			event(at)
		}
		time.Sleep(6*time.Second - time.Since(start))
		cancel()
		<-done
		want := []time.Duration{450 * time.Millisecond, 3 * time.Second, 4270 * time.Millisecond}
		if !slices.Equal(reported, want) {
			t.Errorf("changes reported at %v, want %v", reported, want)
		}
	})
}
