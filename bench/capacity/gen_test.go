package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/bench/internal/loadgen"
	"github.com/limitproxy/limitproxy/internal/poll"
)

// TestLoadTimeout runs the generator against a server that never answers
// every other request: those time out at their deadline (their
// connection closed, which the server sees), the others are answered,
// and the schedule holds.
func TestLoadTimeout(t *testing.T) {
	var calls, gone atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/work" || r.Header.Get("User-Agent") != "capacity" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1)%2 == 0 {
			select {
			case <-r.Context().Done():
				gone.Add(1)
			case <-time.After(5 * time.Second):
			}
			return
		}
		io.WriteString(w, "ok\n")
	}))
	defer srv.Close()
	l := load(srv.Listener.Addr().String(), 200, 50*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond)
	started := time.Time{}
	l.OnStart = func(s time.Time) { started = s }
	began := time.Now()
	res, err := l.Run()
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the run took %v: 250 ms of schedule and a 100 ms timeout", took)
	}
	if !started.Equal(res.Start) || res.First != 10 || len(res.Out) != 50 {
		t.Fatalf("start %v (onStart %v), first %d, %d outcomes; want the same start, 10, 50", res.Start, started, res.First, len(res.Out))
	}
	p := summarise(res.Out, l.Rate, l.Warm, l.Warm+l.Dur, l.Timeout)
	if p.requests != 40 || p.good+p.timeouts != 40 || p.good < 15 || p.timeouts < 15 || p.errors != 0 {
		t.Errorf("requests %d good %d timeouts %d errors %d; want 40, about half answered, half timed out", p.requests, p.good, p.timeouts, p.errors)
	}
	for i, o := range res.Out {
		// Not before its deadline; soon after it, however busy the
		// machine (or the race detector).
		if o.TimedOut && (o.End < loadgen.Instant(i, l.Rate)+l.Timeout || o.End > loadgen.Instant(i, l.Rate)+l.Timeout+500*time.Millisecond) {
			t.Errorf("request %d timed out at %v, its deadline %v", i, o.End, loadgen.Instant(i, l.Rate)+l.Timeout)
		}
	}
	// The server saw the clients of the requests it held go away.
	poll.Until(5*time.Second, func() bool { return gone.Load() >= calls.Load()/2-1 })
	if gone.Load() < calls.Load()/2-1 {
		t.Errorf("the server saw %d of its %d held requests' clients go", gone.Load(), calls.Load()/2)
	}
}
