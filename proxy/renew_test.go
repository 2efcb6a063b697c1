package proxy

import (
	"testing"
	"testing/synctest"
	"time"
)

// writeDeadlines records the write deadlines set on it.
type writeDeadlines struct{ set []time.Time }

func (w *writeDeadlines) SetReadDeadline(time.Time) error { return nil }
func (w *writeDeadlines) SetWriteDeadline(t time.Time) error {
	w.set = append(w.set, t)
	return nil
}

// TestRenewDeadline: the recorder gives each write send_timeout from
// now, moving the connection's deadline at its first write and then only
// once an eighth of send_timeout has passed since it last did, so that a
// write is given between 7/8 and all of send_timeout.
func TestRenewDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 8 * time.Second
		d := &writeDeadlines{}
		r := &recorder{dl: d, sendTimeout: timeout}
		start := time.Now()
		r.renewDeadline()
		time.Sleep(timeout/8 - time.Millisecond)
		r.renewDeadline() // within the eighth: kept
		time.Sleep(time.Millisecond)
		r.renewDeadline() // an eighth since: moved
		at := time.Now()
		r.renewDeadline()
		want := []time.Time{start.Add(timeout), at.Add(timeout)}
		if len(d.set) != len(want) {
			t.Fatalf("deadlines set: %v, want %v", d.set, want)
		}
		for i := range want {
			if !d.set[i].Equal(want[i]) {
				t.Errorf("deadline %d: %v, want %v", i, d.set[i], want[i])
			}
		}
		// Without a timeout, or a connection's deadlines, nothing is set.
		(&recorder{dl: d}).renewDeadline()
		(&recorder{sendTimeout: timeout}).renewDeadline()
		if len(d.set) != len(want) {
			t.Errorf("deadlines set without a timeout: %v", d.set[len(want):])
		}
	})
}
