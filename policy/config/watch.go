package config

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// DefaultDebounce is how long a file must have been quiet before a Watcher
// reports its change: editors and tools write a file in several steps, and
// a file applied between two of them would be half-written (a save in two
// writes 150ms apart was seen in the wild). Long enough for that, short
// next to how often people save a configuration.
const DefaultDebounce = 300 * time.Millisecond

// DefaultMaxDelay bounds how long after the first event of a burst a
// change is reported even if the file never falls quiet, so that a file
// rewritten without pause is still applied.
const DefaultMaxDelay = 2 * time.Second

// Watcher reports changes to a configuration file. It watches the file's
// directory, not the file, so that every way of replacing a file is seen:
// a write in place, a temporary file renamed over it (most editors), and
// the swap of the "..data" symlink by which Kubernetes updates a mounted
// ConfigMap (the file itself is then a symlink that never changes). Events
// are debounced: a change is reported once no event has come for the
// debounce interval, or at the latest DefaultMaxDelay after the first
// event of a burst. Replacing a file atomically (write a temporary file in
// the same directory, then rename it over the old one) is still the only
// way no reader can ever see half of it.
//
// A Watcher is used by one goroutine, through Run.
type Watcher struct {
	fw       *fsnotify.Watcher
	path     string // cleaned
	dir      string
	debounce time.Duration
	log      *zap.Logger
	changed  func()
}

// NewWatcher starts watching the directory of the file at path, so that
// any change made after it returns is seen, and returns a Watcher whose Run
// calls changed (from Run's goroutine) after the file has changed. debounce
// 0 means DefaultDebounce; a nil log means no logging. Run must be called
// to release the watch.
func NewWatcher(path string, debounce time.Duration, log *zap.Logger, changed func()) (*Watcher, error) {
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	if log == nil {
		log = zap.NewNop()
	}
	path = filepath.Clean(path)
	w := &Watcher{path: path, dir: filepath.Dir(path), debounce: debounce, log: log, changed: changed}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", path, err)
	}
	if err := fw.Add(w.dir); err != nil {
		fw.Close()
		return nil, fmt.Errorf("watch %s: %w", w.dir, err)
	}
	w.fw = fw
	return w, nil
}

// Run reports changes until ctx is done, then releases the watch and
// returns nil. changed is never called after Run returns.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.fw.Close()
	events := make(chan struct{})
	go func() {
		defer close(events)
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.fw.Events:
				if !ok {
					return
				}
				if !w.relevant(ev) {
					continue
				}
				select {
				case events <- struct{}{}:
				case <-ctx.Done():
					return
				}
			case err, ok := <-w.fw.Errors:
				if !ok {
					return
				}
				w.log.Warn("config watcher error", zap.String("dir", w.dir), zap.Error(err))
			}
		}
	}()
	debounce(ctx, events, w.debounce, max(DefaultMaxDelay, w.debounce), w.changed)
	return nil
}

// debounce calls changed once events has been quiet for quiet after one or
// more events, or maxDelay after the first event of a burst if events keep
// coming. It returns when ctx is done or events is closed; changed is
// never called after it returns.
func debounce(ctx context.Context, events <-chan struct{}, quiet, maxDelay time.Duration, changed func()) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var first time.Time // of the burst; zero when none is pending
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				return
			}
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			// Quiet for quiet from now, but never later than maxDelay
			// after the first event.
			timer.Reset(min(quiet, first.Add(maxDelay).Sub(now)))
		case <-timer.C:
			first = time.Time{}
			changed()
		}
	}
}

// relevant reports whether an event in the directory may have changed the
// file: any event on the file's own name, or on Kubernetes' "..data" link.
// Chmod alone changes nothing that matters.
func (w *Watcher) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	name := filepath.Clean(ev.Name)
	return name == w.path || filepath.Base(name) == "..data"
}
