package proxy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
)

// TestKeyHasherIsHMAC: the key hash is HMAC-SHA-256 (crypto/hmac's) of
// the stored key under the secret, short and long secrets alike, and
// costs no allocation beyond its result.
func TestKeyHasherIsHMAC(t *testing.T) {
	for _, secret := range []string{"0123456789abcdef", strings.Repeat("s", 64), strings.Repeat("long", 40)} {
		h := NewKeyHasher([]byte(secret))
		for _, key := range []string{"9:127.0.0.1;", "", "4:x/%y;"} {
			m := hmac.New(sha256.New, []byte(secret))
			m.Write([]byte(StoreKey(key)))
			want := hex.EncodeToString(m.Sum(nil)[:8])
			if got := h.Key(key); got != want {
				t.Errorf("secret %d bytes, key %q: %s, want %s", len(secret), key, got, want)
			}
			if got := h.Stored(StoreKey(key)); got != want {
				t.Errorf("Stored(StoreKey(%q)) = %s, want %s", key, got, want)
			}
		}
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte("addr:2001:db8::1"))
		if got, want := h.Addr(netip.MustParseAddr("2001:db8::1")), hex.EncodeToString(m.Sum(nil)[:8]); got != want {
			t.Errorf("Addr: %s, want %s", got, want)
		}
	}
	h := NewKeyHasher(nil)
	if n := testing.AllocsPerRun(100, func() { h.Key("9:127.0.0.1;") }); n > 1 {
		t.Errorf("Key: %v allocations, want 1", n)
	}
}
