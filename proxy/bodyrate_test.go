package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestBodyRate steps the minimum-rate account: 1000 bytes/s over a 2s
// window. The first window is grace; each byte buys a millisecond of
// waiting; at most a window can be banked; time not spent waiting for the
// client (between reads) never counts.
func TestBodyRate(t *testing.T) {
	const ms = time.Millisecond
	type step struct {
		wait     time.Duration // waited for this read
		n        int           // bytes it returned
		wantLeft time.Duration // left(0) after it
	}
	for i, c := range []struct {
		name  string
		steps []step
	}{
		{"grace, then nothing", []step{{0, 0, 2000 * ms}, {1500 * ms, 0, 500 * ms}, {500 * ms, 0, 0}}},
		{"at the rate exactly", []step{{1000 * ms, 1000, 2000 * ms}, {1000 * ms, 1000, 2000 * ms}, {1000 * ms, 1000, 2000 * ms}}},
		{"a burst banks one window only", []step{{0, 1_000_000, 2000 * ms}, {2000 * ms, 0, 0}}},
		{"a fifth of the rate drains the bank", []step{{1000 * ms, 200, 1200 * ms}, {1000 * ms, 200, 400 * ms}, {400 * ms, 80, 80 * ms}}},
		{"a byte a second", []step{{1000 * ms, 1, 1001 * ms}, {1000 * ms, 1, 2 * ms}}},
	} {
		b := newBodyRate(1000, 2*time.Second)
		for j, s := range c.steps {
			b.received(s.wait, s.n)
			if got := b.left(0); got != s.wantLeft {
				t.Errorf("case %d (%s) step %d: received(%v, %d); left(0) = %v, want %v", i, c.name, j, s.wait, s.n, got, s.wantLeft)
			}
		}
	}
	b := newBodyRate(1000, 2*time.Second)
	if got := b.left(1500 * ms); got != 500*ms {
		t.Errorf("left(1.5s) in the grace = %v, want 500ms", got)
	}
}

// pipeDeadline is the deadliner of a body read from a pipe: a read
// deadline at or before now ends the pending read as the server's would,
// with os.ErrDeadlineExceeded. Only the past matters to these tests.
type pipeDeadline struct {
	mu  sync.Mutex
	pw  *io.PipeWriter
	set []time.Time
}

func (d *pipeDeadline) SetReadDeadline(t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.set = append(d.set, t)
	if !t.IsZero() && !t.After(time.Now()) {
		d.pw.CloseWithError(fmt.Errorf("%w", os.ErrDeadlineExceeded))
	}
	return nil
}

func (d *pipeDeadline) SetWriteDeadline(time.Time) error { return nil }

// TestRateWatch: a body read through timedBody with min_body_rate 1000
// bytes/s over 1s is cut while its read waits, once the rate is spent —
// at once for a client that sends nothing after the grace, about 1s/(1-f)
// after the start for one that sends at a fraction f of the rate — with
// 408 and errBodyTooSlow; a body at the rate, or one whose reader (the
// upstream) pauses between reads, is never cut. In a synctest bubble: the
// clock is the bubble's.
func TestRateWatch(t *testing.T) {
	for _, c := range []struct {
		name   string
		every  time.Duration // between two writes of the client
		n      int           // bytes a write
		pause  time.Duration // the reader's pause between reads
		writes int
		cutAt  time.Duration // 0: never cut
	}{
		{"silent", time.Hour, 1, 0, 1, 1001 * time.Millisecond},
		{"a byte every 100ms", 100 * time.Millisecond, 1, 0, 100, 1100 * time.Millisecond},
		{"at the rate", 100 * time.Millisecond, 100, 0, 50, 0},
		{"a slow reader", 100 * time.Millisecond, 100, 10 * time.Second, 5, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pr, pw := io.Pipe()
				dl := &pipeDeadline{pw: pw}
				tb := &timedBody{body: pr, dl: dl, timeout: time.Hour, left: 1 << 30, max: 1 << 30,
					rate: &rateWatch{r: newBodyRate(1000, time.Second), now: time.Now, dl: dl, timeout: time.Hour}}
				start := time.Now()
				done := make(chan struct{})
				go func() {
					defer pw.Close()
					for range c.writes {
						if _, err := pw.Write(make([]byte, c.n)); err != nil {
							return
						}
						select {
						case <-time.After(c.every):
						case <-done:
							return
						}
					}
				}()
				defer close(done)
				buf := make([]byte, 1024)
				var err error
				for err == nil {
					_, err = tb.Read(buf)
					time.Sleep(c.pause) // a reader slow in real time on a real socket: the pause is the test
				}
				elapsed := time.Since(start) - c.pause
				tb.Close()
				if c.cutAt == 0 {
					if err != io.EOF {
						t.Fatalf("read: %v after %v, want io.EOF (never cut)", err, elapsed)
					}
					return
				}
				var ce *clientBodyError
				if !errors.As(err, &ce) || ce.status != http.StatusRequestTimeout || !errors.Is(err, errBodyTooSlow) {
					t.Fatalf("read: %v, want 408 for min_body_rate", err)
				}
				// The silent client: exactly the grace. The byte every
				// 100ms (f = 0.01): it has 1s banked at 0, loses 0.99s of
				// it a second, and is cut within the 100ms read that
				// overruns it (1.0101s), at the 1.1s read's start latest.
				if elapsed < c.cutAt-100*time.Millisecond || elapsed > c.cutAt {
					t.Errorf("cut after %v, want within 100ms before %v", elapsed, c.cutAt)
				}
			})
		})
	}
}

// TestStreamCounts: a key takes at most limit places, other keys and
// upstreams are apart, a release frees one place once, and an idle key
// leaves no entry.
func TestStreamCounts(t *testing.T) {
	var s streamCounts
	a, b := streamKey{"up", "key a"}, streamKey{"up", "key b"}
	r1, ok1 := s.acquire(a, 2)
	_, ok2 := s.acquire(a, 2)
	_, ok3 := s.acquire(a, 2)
	_, okB := s.acquire(b, 2)
	_, okOther := s.acquire(streamKey{"other", "key a"}, 2)
	if !ok1 || !ok2 || ok3 || !okB || !okOther {
		t.Fatalf("acquire: %v %v %v (key a, limit 2), %v (key b), %v (other upstream); want true true false true true", ok1, ok2, ok3, okB, okOther)
	}
	r1()
	r1() // a second release is a no-op
	if _, ok := s.acquire(a, 2); !ok {
		t.Fatal("no place after a release")
	}
	if _, ok := s.acquire(a, 2); ok {
		t.Fatal("a double release freed two places")
	}
	var e streamCounts
	r, _ := e.acquire(a, 1)
	r()
	if len(e.n) != 0 {
		t.Errorf("%d entries after every release, want 0", len(e.n))
	}
}
