package policy

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// DefaultDebounce is how long a Watcher waits after the first event of a
// burst before it reports a change: editors write a file in several steps,
// and all of them within this time make one report.
const DefaultDebounce = 100 * time.Millisecond

// Watcher reports changes to a configuration file. It watches the file's
// directory, not the file, so that every way of replacing a file is seen:
// a write in place, a temporary file renamed over it (most editors), and
// the swap of the "..data" symlink by which Kubernetes updates a mounted
// ConfigMap (the file itself is then a symlink that never changes). Events
// are debounced: the first of a burst arms a timer, later ones join it,
// and the change is reported when it fires. The delay is bounded, not
// reset by each event, so that a file rewritten without pause is still
// reloaded every debounce interval instead of never.
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
// 0 means DefaultDebounce; a nil log means no logging. Run must be called,
// or Close, to release the watch.
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

// Close releases the watch; Run does it when it returns.
func (w *Watcher) Close() error { return w.fw.Close() }

// Run reports changes until ctx is done, then releases the watch and
// returns nil. changed is never called after Run returns.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.fw.Close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armed := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.fw.Events:
			if !ok {
				return nil
			}
			if w.relevant(ev) && !armed {
				timer.Reset(w.debounce)
				armed = true
			}
		case err, ok := <-w.fw.Errors:
			if !ok {
				return nil
			}
			w.log.Warn("config watcher error", zap.String("dir", w.dir), zap.Error(err))
		case <-timer.C:
			armed = false
			w.changed()
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
