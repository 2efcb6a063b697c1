package h1

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// dateOf returns the value of the Date field in head, "" if none.
func dateOf(head string) string {
	for l := range strings.SplitSeq(head, "\r\n") {
		if v, ok := strings.CutPrefix(l, "Date: "); ok {
			return v
		}
	}
	return ""
}

// TestResponseDateIsNow: the Date field the front adds (RFC 9110,
// 6.6.1) is the current time as an IMF-fixdate, on the common path and
// WriteWhole's, and follows the clock from one second to the next.
func TestResponseDateIsNow(t *testing.T) {
	srv := &Server{fallback: &http.Server{}}
	heads := map[string]func() string{
		"WriteHeader": func() string {
			w := newTestResponse("GET")
			w.c.srv = srv
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte("x"))
			w.done = true
			w.commitPending()
			return string(w.c.out)
		},
		"WriteWhole": func() string {
			w := newTestResponse("GET")
			w.c.srv = srv
			var fields [10]string
			fields[0] = "Content-Length: 1\r\nContent-Type: text/plain\r\n"
			if !w.WriteWhole(http.StatusTooManyRequests, fields, []byte("x")) {
				t.Fatal("WriteWhole declined")
			}
			return string(w.c.out)
		},
	}
	check := func(name, head string, from, to time.Time) time.Time {
		t.Helper()
		v := dateOf(head)
		d, err := time.Parse(http.TimeFormat, v)
		if err != nil {
			t.Fatalf("%s: Date %q: %v (head %q)", name, v, err, head)
		}
		if d.Before(from.Truncate(time.Second)) || d.After(to) {
			t.Errorf("%s: Date %s, want between %s and %s", name, v, from.UTC().Format(http.TimeFormat), to.UTC().Format(http.TimeFormat))
		}
		return d
	}
	for range 2 {
		// Just after a second starts, so that both paths write within it.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 10*time.Millisecond)))
		var dates []time.Time
		for _, name := range []string{"WriteHeader", "WriteWhole", "WriteHeader"} {
			from := time.Now()
			head := heads[name]()
			dates = append(dates, check(name, head, from, time.Now()))
		}
		if !dates[0].Equal(dates[1]) || !dates[1].Equal(dates[2]) {
			t.Errorf("Dates within one second differ: %v", dates)
		}
	}
}

// TestResponseWriteAfterFailureWritesNothing: once writing to the
// connection has failed, a Write takes nothing more and returns the
// error (0, err), as net/http's buffered writer does.
func TestResponseWriteAfterFailureWritesNothing(t *testing.T) {
	c1, c2 := net.Pipe()
	c2.Close()
	defer c1.Close()
	w := newTestResponse("GET")
	w.c.rwc = c1
	if _, err := w.Write(make([]byte, 5000)); err == nil {
		t.Fatal("a large Write on a closed connection succeeded")
	}
	for _, size := range []int{1, 5000} {
		if n, err := w.Write(make([]byte, size)); n != 0 || err == nil {
			t.Errorf("Write of %d bytes after a failure: %d, %v; want 0 and an error", size, n, err)
		}
	}
	if err := w.FlushError(); err == nil {
		t.Error("Flush after a failure: nil, want the error")
	}
	if len(w.pending) != 0 {
		t.Errorf("%d bytes held after a failure", len(w.pending))
	}
}
