package server

import (
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// The access log's destination: the request path never waits on stderr.
// Access lines go into a bounded buffer that one goroutine writes out in
// batches — every accessFlushEvery, or sooner once accessFlushAt bytes are
// waiting — so a log line costs its encoding and a copy, not a write(2) of
// its own, and a stderr that blocks (a full pipe, a stalled journald)
// holds no request: once accessBufferMax bytes wait, further lines are
// dropped and counted (limitproxy_access_log_dropped_total). Close writes
// out what remains.
const (
	accessBufferMax  = 4 << 20
	accessFlushAt    = 64 << 10
	accessFlushEvery = 100 * time.Millisecond
)

// accessWriter is that destination. Its Write never blocks on out; Sync
// and Close do. Safe for concurrent use.
type accessWriter struct {
	out io.Writer // shared with the main log, under the same lock

	mu  sync.Mutex
	buf []byte

	flushMu sync.Mutex // one batch written at a time, in order
	spare   []byte

	full    chan struct{} // a batch is ready
	stop    chan struct{}
	done    chan struct{}
	close   sync.Once
	dropped atomic.Int64
}

func newAccessWriter(out io.Writer) *accessWriter {
	w := &accessWriter{out: out, full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// Write queues p, one encoded line, or drops it if the buffer is full.
func (w *accessWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if len(w.buf)+len(p) > accessBufferMax {
		w.mu.Unlock()
		w.dropped.Add(1)
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	n := len(w.buf)
	w.mu.Unlock()
	if n >= accessFlushAt {
		select {
		case w.full <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// Sync writes out what is queued.
func (w *accessWriter) Sync() error {
	w.flush()
	if s, ok := w.out.(interface{ Sync() error }); ok {
		return s.Sync()
	}
	return nil
}

// Dropped returns how many lines were dropped because the buffer was full.
func (w *accessWriter) Dropped() int64 { return w.dropped.Load() }

// Close writes out what is queued and stops the writer (the proxy has
// stopped by then; a line written later waits for Sync).
func (w *accessWriter) Close() error {
	w.close.Do(func() { close(w.stop) })
	<-w.done
	return w.Sync()
}

func (w *accessWriter) run() {
	defer close(w.done)
	tick := time.NewTicker(accessFlushEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-w.full:
		case <-w.stop:
			w.flush()
			return
		}
		w.flush()
	}
}

// flush writes the queued lines out as one batch.
func (w *accessWriter) flush() {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	w.mu.Lock()
	batch := w.buf
	w.buf = w.spare[:0]
	w.mu.Unlock()
	if len(batch) > 0 {
		w.out.Write(batch)
	}
	if cap(batch) <= accessBufferMax { // keep a buffer of the usual size
		w.spare = batch[:0]
	}
}
