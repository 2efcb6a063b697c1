package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/limitproxy/limitproxy/proxy/internal/clientkey"
)

// requestIDHeader carries a request's id: to the upstream, back to the
// client, and in the access log's request_id.
const requestIDHeader = "X-Request-Id"

// maxRequestID is the longest request id taken from a trusted proxy, in
// bytes.
const maxRequestID = 128

// requestID returns r's id: the X-Request-Id a trusted proxy (a peer in
// trusted_proxies, on a connection not marked peer-only: c.Trusted) sent,
// if it sent exactly one of 1 to maxRequestID visible ASCII characters;
// otherwise a new one, 32 random hex digits. A client that is not behind
// a trusted proxy cannot choose the id its request is logged and
// forwarded under.
func requestID(r *http.Request, c *clientkey.Client) string {
	if vs := r.Header[requestIDHeader]; len(vs) == 1 && c.Trusted && validRequestID(vs[0]) {
		return vs[0]
	}
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand, go1.24+)
	return hex.EncodeToString(b[:])
}

func validRequestID(s string) bool {
	if s == "" || len(s) > maxRequestID {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
