package proxy

import (
	"errors"
	"sync"
	"time"
)

// A request body must arrive at min_body_rate, averaged over
// body_rate_window, whether it is buffered or streamed: client_body_timeout
// alone bounds only the gap between two reads, so a client sending a byte
// every few seconds would hold its request (and, streamed, an upstream
// connection) for as long as it likes. This is Apache's mod_reqtimeout
// MinRate, measured as a leaky bucket of time: each byte buys 1/rate of
// waiting, at most a window's worth can be banked, and the first window is
// the grace a body has to get going.

// errBodyTooSlow is the error of a body cut for arriving below its
// upstream's min_body_rate.
var errBodyTooSlow = errors.New("arrived slower than min_body_rate")

// bodyRate is the minimum-rate account of one body, in waiting time: the
// time the proxy spent waiting for the client to send, so that an upstream
// that takes a streamed body slowly never counts against the client. Not
// safe for concurrent use (rateWatch guards it).
type bodyRate struct {
	rate   int64         // bytes a second; > 0
	window time.Duration // most waiting time that can be banked
	waited time.Duration // waiting time, up to the end of the last read
	due    time.Duration // the waiting time the client has paid for
}

func newBodyRate(rate int64, window time.Duration) bodyRate {
	return bodyRate{rate: rate, window: window, due: window}
}

// received accounts for n bytes that arrived after the proxy waited d for
// them: they pay for n/rate more waiting, banked up to a window ahead.
func (b *bodyRate) received(d time.Duration, n int) {
	b.waited += d
	b.due = min(b.due+time.Duration(int64(n)*int64(time.Second)/b.rate), b.waited+b.window)
}

// left is how much longer the proxy may wait for the client, after it has
// waited d since the last read ended, before the body is below the rate
// (<= 0: it is).
func (b *bodyRate) left(d time.Duration) time.Duration { return b.due - b.waited - d }

// rateWatch enforces a bodyRate on the reads of one body: a timer, armed
// while a read waits on the client, fires when the rate is spent and
// then cuts the pending read by moving its read deadline to now (over
// HTTP/2 that ends the stream's body at once, over HTTP/1 it unblocks the
// connection's read). Safe for concurrent use: the timer runs on its own
// goroutine.
type rateWatch struct {
	mu      sync.Mutex
	r       bodyRate
	now     func() time.Time
	dl      deadliner // nil: a pending read cannot be cut, the next one fails
	timeout time.Duration
	timer   *time.Timer
	reading bool
	since   time.Time // when the pending read began
	cut     bool      // the rate was spent: every read fails
	done    bool      // the body ended; the timer is stopped
}

// begin is called before each read: it sets the read's deadline
// (client_body_timeout from now) and arms the timer for what the rate
// leaves, under the lock, so that a cut the timer makes is never undone
// by a deadline set after it. It fails once the body has been cut.
func (w *rateWatch) begin() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cut {
		return errBodyTooSlow
	}
	now := w.now()
	if w.dl != nil {
		w.dl.SetReadDeadline(now.Add(w.timeout))
	}
	w.reading, w.since = true, now
	left := w.r.left(0)
	if left <= 0 {
		w.cutLocked()
		return errBodyTooSlow
	}
	if w.timer == nil {
		w.timer = time.AfterFunc(left, w.fire)
	} else {
		w.timer.Reset(left)
	}
	return nil
}

// end is called after each read that returned n bytes. It reports whether
// the read was cut for the rate (its error, then, is the cut's).
func (w *rateWatch) end(n int) (cut bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.r.received(w.now().Sub(w.since), n)
	w.reading = false
	return w.cut
}

// fire runs when the time the rate left a pending read is up: it cuts the
// read if the client still has not paid for more, or re-arms.
func (w *rateWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.reading || w.cut || w.done {
		return
	}
	if left := w.r.left(w.now().Sub(w.since)); left > 0 {
		w.timer.Reset(left)
		return
	}
	w.cutLocked()
}

// cutLocked marks the body cut and ends a pending read. Requires w.mu
// held.
func (w *rateWatch) cutLocked() {
	w.cut = true
	if w.dl != nil {
		w.dl.SetReadDeadline(w.now())
	}
}

// stop ends the watch (at the end of the body, or of the request).
func (w *rateWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
}
