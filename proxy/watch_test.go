package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// watchRecorder is a ResponseWriter whose server watches the client only
// when asked, as limitproxy's HTTP/1.1 front: it records what it was
// asked.
type watchRecorder struct {
	*httptest.ResponseRecorder
	asked []time.Duration
}

func (w *watchRecorder) WatchClient(d time.Duration) { w.asked = append(w.asked, d) }

// TestWatchClientWhen: a request refused at once asks for no watch; one
// forwarded asks for it after forwardWatchDelay; one queued by a leaky
// bucket asks for it at once, so that a client that leaves the queue is
// never forwarded (SPEC), however soon its turn would have come.
func TestWatchClientWhen(t *testing.T) {
	up := newUpstream(t, nil)
	cfg, err := config.Load("../testdata/policy/valid/all_algorithms.toml")
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(up.URL)
	for i := range cfg.Upstreams {
		cfg.Upstreams[i].Targets = []*url.URL{target}
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
	if err != nil {
		t.Fatal(err)
	}
	clock := newClock()
	h := New(set, Options{Now: clock.now})
	serve := func(path string) *watchRecorder {
		w := &watchRecorder{ResponseRecorder: httptest.NewRecorder()}
		r := httptest.NewRequest("GET", "http://app.example"+path, nil)
		r.RemoteAddr = "192.0.2.1:1234"
		h.ServeHTTP(w, r)
		return w
	}
	// /tb: a token bucket of 1/h, burst 5 (all_algorithms.toml).
	for range 5 {
		if w := serve("/tb"); w.Code != http.StatusOK || len(w.asked) != 1 || w.asked[0] != forwardWatchDelay {
			t.Errorf("forwarded: %d, asked %v, want 200 and [%v]", w.Code, w.asked, forwardWatchDelay)
		}
	}
	if w := serve("/tb"); w.Code != http.StatusTooManyRequests || len(w.asked) != 0 {
		t.Errorf("refused: %d, asked %v, want 429 and no watch", w.Code, w.asked)
	}
	// /lb: a leaky bucket of 4/s; the first goes at once, the second waits
	// its 250 ms in the queue (the injected clock stands still; the queue
	// waits on real time).
	if w := serve("/lb"); w.Code != http.StatusOK || len(w.asked) != 1 || w.asked[0] != forwardWatchDelay {
		t.Errorf("first of the leaky bucket: %d, asked %v, want 200 and [%v]", w.Code, w.asked, forwardWatchDelay)
	}
	if w := serve("/lb"); w.Code != http.StatusOK || len(w.asked) != 1 || w.asked[0] != 0 {
		t.Errorf("queued: %d, asked %v, want 200 and [0]", w.Code, w.asked)
	}
}
