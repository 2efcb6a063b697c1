package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestStreamsPerKeyBoundPerClient: max_streams_per_key bounds one client's
// streams, never everyone's. A key that names no client — one whose parts
// are missing under on_missing = "shared" ("-;"), a limit's skip marker,
// or no key at all — is counted per client address, so that a client
// without the keyed header cannot take every place of all the others
// that lack it. A key that names one (here a header value) stays one
// bound for all its addresses.
func TestStreamsPerKeyBoundPerClient(t *testing.T) {
	s := &config.Server{}
	u := &config.Upstream{Name: "up", MaxStreamsPerKey: 1}
	lim := bodyLimits{}
	parts := []config.KeyPart{{Kind: config.KeyHeader, Name: "X-Tenant"}}
	req := func(addr, tenant string) *http.Request {
		r := httptest.NewRequest("POST", "/s", strings.NewReader("x"))
		r.RemoteAddr = addr + ":1234"
		if tenant != "" {
			r.Header.Set("X-Tenant", tenant)
		}
		return r
	}
	admit := func(h *Handler, key string, r *http.Request) bool {
		x := testExchange(h, httptest.NewRecorder(), r, s)
		x.rec.key = key
		_, ok := h.admitStream(x, u, lim)
		return ok
	}
	shared, res := keyOf(req("192.0.2.1", ""), parts, config.MissingShared, s)
	if res != keyOK || shared == "" {
		t.Fatalf("keyOf without the header: %q %v", shared, res)
	}
	for _, key := range []string{shared, limiter.SkipKey, ""} {
		h := &Handler{}
		if !admit(h, key, req("192.0.2.1", "")) {
			t.Fatalf("key %q: the first stream of 192.0.2.1 refused", key)
		}
		if admit(h, key, req("192.0.2.1", "")) {
			t.Errorf("key %q: a second stream of 192.0.2.1 admitted over max_streams_per_key 1", key)
		}
		if !admit(h, key, req("198.51.100.2", "")) {
			t.Errorf("key %q: 198.51.100.2's first stream refused because 192.0.2.1 holds one: the bound is global", key)
		}
	}
	h := &Handler{}
	tenant, _ := keyOf(req("192.0.2.1", "acme"), parts, config.MissingShared, s)
	if !admit(h, tenant, req("192.0.2.1", "acme")) || admit(h, tenant, req("198.51.100.2", "acme")) {
		t.Errorf("key %q: one client key from two addresses must share its bound", tenant)
	}
}
