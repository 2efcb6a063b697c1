package server

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/limitproxy/limitproxy/policy/config"
)

// lockedBuffer is a destination tests read while the writer writes.
type lockedBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
	gate   chan struct{} // if not nil, each Write waits for it
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	if l.gate != nil {
		<-l.gate
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes++
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAccessWriterBatches: lines reach the destination within
// accessFlushEvery, many lines in one write, in order; Close writes out
// the rest.
func TestAccessWriterBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &lockedBuffer{}
		w := newAccessWriter(out)
		var want strings.Builder
		for i := range 100 {
			line := strings.Repeat("x", i%7) + "\n"
			want.WriteString(line)
			w.Write([]byte(line))
		}
		if out.String() != "" {
			t.Fatal("written before its time: the request path must not write")
		}
		time.Sleep(accessFlushEvery)
		synctest.Wait()
		if out.String() != want.String() || out.writes != 1 {
			t.Fatalf("after %v: %d writes, %q", accessFlushEvery, out.writes, out.String())
		}
		w.Write([]byte("last\n"))
		w.Close()
		if !strings.HasSuffix(out.String(), "last\n") {
			t.Fatal("Close did not write out the queued line")
		}
	})
}

// TestAccessWriterNeverBlocks: with a destination that blocks, Write
// returns at once, drops (and counts) what does not fit in the buffer,
// and everything kept is written, in order, once the destination moves.
func TestAccessWriterNeverBlocks(t *testing.T) {
	out := &lockedBuffer{gate: make(chan struct{})}
	w := newAccessWriter(out)
	line := []byte(strings.Repeat("y", 1023) + "\n")
	start := time.Now()
	n := 3 * accessBufferMax / len(line) // three buffers' worth
	for range n {
		w.Write(line)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("%d writes to a blocked destination took %v", n, d)
	}
	dropped := w.Dropped()
	// The first batch went to the blocked Write; a buffer more waits.
	if dropped < int64(n)/3 || dropped > int64(n)-int64(accessBufferMax/len(line)) {
		t.Fatalf("%d of %d lines dropped", dropped, n)
	}
	close(out.gate)
	w.Close()
	if got := int64(strings.Count(out.String(), "\n")); got != int64(n)-dropped {
		t.Fatalf("%d lines written, want the %d kept", got, int64(n)-dropped)
	}
}

// BenchmarkAccessLog: one access-log line written straight to a file
// (/dev/null: a write(2) a line, as stderr without the buffer) and
// through accessWriter (a copy a line, a write(2) a batch).
//
//	go test -run '^$' -bench AccessLog ./cmd/limitproxy/internal/server
func BenchmarkAccessLog(b *testing.B) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	level := zap.NewAtomicLevelAt(zap.InfoLevel)
	line := func(log *zap.Logger) {
		log.Info("request", zap.String("method", "GET"), zap.String("host", "api.example"), zap.String("path", "/api/x"),
			zap.Int("status", 200), zap.Duration("duration", 1234567), zap.String("policy", "api"), zap.String("decision", "allowed"),
			zap.String("upstream", "legacy"), zap.Duration("queue_wait", 0))
	}
	b.Run("direct", func(b *testing.B) {
		log := newLogger(config.Log{Format: config.FormatJSON}, level, zapcore.Lock(null))
		b.ReportAllocs()
		for b.Loop() {
			line(log)
		}
	})
	b.Run("buffered", func(b *testing.B) {
		w := newAccessWriter(zapcore.Lock(null))
		defer w.Close()
		log := newLogger(config.Log{Format: config.FormatJSON}, level, zapcore.AddSync(w))
		b.ReportAllocs()
		for b.Loop() {
			line(log)
		}
	})
}
