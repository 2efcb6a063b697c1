package proxy

import (
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/limitproxy/limitproxy/policy/config"
)

// maxRefusedDrain is the most of a refused request's body read so that
// its connection can serve the next request, in bytes; a longer (or
// chunked) body closes the connection instead.
const maxRefusedDrain = 64 << 10

// readRefusedBody readies an HTTP/1 connection for an answer of the
// proxy's own (a 429, a 503…) to a request whose body nobody read.
//
// Left to itself net/http reads up to 256 KiB of such a body before it
// writes the answer, and with no deadline: a client that declared a body
// and sent none got no answer and held its connection for as long as it
// liked. Here a body of known length up to maxRefusedDrain is read (and
// dropped) by timeout, the whole of it, so that the connection serves the
// next request; one that does not come whole by then, a longer one or a
// chunked one gets the answer at once with "Connection: close", and no
// more of it is read than net/http does while closing; so does a request
// that sent "Expect: 100-continue", never asked for its body.
func readRefusedBody(rec *recorder, r *http.Request, timeout time.Duration) {
	if r.ProtoMajor != 1 || r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody || rec.dl == nil {
		return
	}
	if timeout <= 0 {
		timeout = config.DefaultClientBodyTimeout
	}
	// A client that sent "Expect: 100-continue" is not asked for its body
	// (reading it would send 100 Continue).
	expect := strings.EqualFold(r.Header.Get("Expect"), "100-continue")
	if !expect && r.ContentLength > 0 && r.ContentLength <= maxRefusedDrain {
		rec.dl.SetReadDeadline(time.Now().Add(timeout))
		if _, err := io.Copy(io.Discard, r.Body); err == nil {
			return // read whole: the connection stays open
		}
	}
	rec.Header().Set("Connection", "close")
	// What net/http still reads of the body as the exchange ends is cut
	// short: the connection closes after the answer.
	rec.dl.SetReadDeadline(time.Now())
}
