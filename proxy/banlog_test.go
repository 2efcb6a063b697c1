package proxy

import (
	"net/http"
	"testing"
)

// TestBanLogNamesKey: "key banned" names the banned key by its key hash,
// the one the access log's lines and the admin API's bans list show, so
// that an operator can tell whom a ban is for.
func TestBanLogNamesKey(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	addr, logs := startAccess(t, "", "", up)
	for _, want := range []int{200, 429} {
		if resp := doGet(t, addr); resp.StatusCode != want {
			t.Fatalf("status %d, want %d", resp.StatusCode, want)
		}
	}
	// Logged as the offence is decided, before the 429 is written.
	key := accessHasher.Key(ipKeyOf(t, "127.0.0.1"))
	ls := logs.FilterMessage("key banned").All()
	if len(ls) != 1 {
		t.Fatalf(`%d "key banned" lines, want 1`, len(ls))
	}
	if got := ls[0].ContextMap()["key"]; got != key {
		t.Fatalf("key banned: key %v, want the key hash %s", got, key)
	}
}
