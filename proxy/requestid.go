package proxy

import (
	"crypto/rand"
	"encoding/hex"
	mrand "math/rand/v2"
	"net/http"
	"sync"

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
// otherwise a new one, 32 random hex digits (newRequestID). A client that
// is not behind a trusted proxy cannot choose the id its request is
// logged and forwarded under.
func requestID(r *http.Request, c *clientkey.Client) string {
	if vs := r.Header[requestIDHeader]; len(vs) == 1 && c.Trusted && validRequestID(vs[0]) {
		return vs[0]
	}
	return newRequestID()
}

// idSources holds *mrand.ChaCha8: ChaCha8 generators, each seeded from
// crypto/rand when made, and used by one request at a time. A request id
// read from one is as unpredictable as one read from crypto/rand (ChaCha8
// is a cryptographically strong generator, and each keys itself anew as
// it goes), without crypto/rand's system call for every request (0.4 µs,
// a sixtieth of the 429 path on the development machine).
var idSources = sync.Pool{New: func() any {
	var seed [32]byte
	rand.Read(seed[:]) // never fails (crypto/rand, go1.24+)
	return mrand.NewChaCha8(seed)
}}

// newRequestID returns 32 random hex digits: 128 bits from a ChaCha8
// generator of idSources. Safe for concurrent use.
func newRequestID() string {
	g := idSources.Get().(*mrand.ChaCha8)
	var b [16]byte
	g.Read(b[:]) // never fails
	idSources.Put(g)
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
