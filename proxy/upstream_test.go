package proxy

import (
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/policy/config"
)

// TestPassiveHealth: targets are served round-robin; a target that fails
// max_fails times in a row is skipped for fail_timeout, so after those
// failures every request reaches the live one.
func TestPassiveHealth(t *testing.T) {
	live := newUpstream(t, nil)
	dead := newUpstream(t, nil)
	dead.Close()
	deadURL, _ := url.Parse(dead.URL)
	liveURL, _ := url.Parse(live.URL)
	e := start(t, "minimal.toml", live, newClock(), func(c *config.Config) {
		c.Upstreams[0].Targets = []*url.URL{deadURL, liveURL}
		c.Upstreams[0].MaxFails = 2
		c.Upstreams[0].FailTimeout = time.Hour
	})
	bad := 0
	for range 20 {
		switch s := e.get(t, "/x").StatusCode; s {
		case 200:
		case 502:
			bad++
		default:
			t.Fatalf("status %d", s)
		}
	}
	if bad != 2 {
		t.Errorf("%d requests failed on the dead target, want max_fails = 2 before it is skipped", bad)
	}
	if n := len(live.seen()); n != 18 {
		t.Errorf("the live target served %d, want 18", n)
	}
	// An hour later (the injected clock) the dead target is tried again.
	e.clock.advance(time.Hour)
	bad = 0
	for range 4 {
		if e.get(t, "/x").StatusCode == 502 {
			bad++
		}
	}
	if bad == 0 {
		t.Error("after fail_timeout the dead target was never retried")
	}
}

// TestPreserveHost: the upstream sees the target's host, or with
// preserve_host the client's.
func TestPreserveHost(t *testing.T) {
	for _, preserve := range []bool{false, true} {
		up := newUpstream(t, nil)
		e := start(t, "minimal.toml", up, newClock(), func(c *config.Config) { c.Upstreams[0].PreserveHost = preserve })
		e.get(t, "/x", "Host", "api.example.com")
		got := up.seen()[0].host
		want := up.Listener.Addr().String()
		if preserve {
			want = "api.example.com"
		}
		if got != want {
			t.Errorf("preserve_host = %v: upstream saw Host %q, want %q", preserve, got, want)
		}
	}
}

// TestTransportSwitch: [[upstream]] transport picks the client under each
// target's ReverseProxy, limitproxy's by default and http.Transport with
// "net/http" (always for h2c), and both forward.
func TestTransportSwitch(t *testing.T) {
	t.Parallel()
	up := startScriptUpstream(t, nil)
	for _, c := range []struct {
		name string
		edit func(*config.Config)
		own  bool
	}{
		{"default", nil, true},
		{"net/http", func(c *config.Config) { c.Upstreams[0].Transport = config.ImplNetHTTP }, false},
	} {
		h := forwardHandler(t, up.ln.Addr().String(), "rate = \"1000000/s\"\nburst = 1000000", c.edit)
		tr := h.snap.Load().pools["app"].targets[0].proxy.Transport
		if _, own := tr.(*syncTransport); own != c.own {
			t.Errorf("%s: the transport is a %T", c.name, tr)
		}
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "http://example.com/x", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		h.ServeHTTP(w, r)
		if w.Code != 200 || w.Body.String() != "ok" {
			t.Errorf("%s: %d %q, want 200 \"ok\"", c.name, w.Code, w.Body)
		}
	}
}
