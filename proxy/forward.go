package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
)

// The common exchange, forwarded without httputil.ReverseProxy's copies.
//
// For every request, ReverseProxy clones the request (a Request, a URL, a
// header map and its values), wraps its context twice for a client trace,
// and for every response parses the media type and copies the header
// value by value: about a dozen allocations a request, a third of what a
// forwarded request costs. For the common exchange, target.direct does
// what ReverseProxy does with it, in the same order and with the same
// functions of the target's (Rewrite, ModifyResponse, ErrorHandler,
// BufferPool, ErrorLog), sharing instead of copying what neither side
// changes. The common exchange: a request without a body or an upgrade
// that the sync transport sends itself, and a final response of known
// length that is not an event stream. Anything else goes through the
// target's ReverseProxy, before the request is sent, or with the
// response once it is in (replay). forward_test.go holds the two paths
// to the same bytes, at the upstream and at the client.

// outbound is what direct builds of a request: one allocation.
type outbound struct {
	req http.Request
	url url.URL
	pr  httputil.ProxyRequest
}

// noUserAgent is the User-Agent ReverseProxy sets on a request without
// one, so that none is sent. Shared: header values are never changed in
// place.
var noUserAgent = []string{""}

// direct forwards r to t as t.proxy would, and reports true, if r is a
// request of the common exchange; otherwise it reports false, having
// written nothing, and the caller uses t.proxy.
func (t *target) direct(w http.ResponseWriter, r *http.Request) bool {
	st, ok := t.proxy.Transport.(*syncTransport)
	if !ok || r.ContentLength != 0 || (r.Body != nil && r.Body != http.NoBody) || len(r.TransferEncoding) != 0 ||
		r.Trailer != nil || r.URL == nil || r.Header == nil {
		return false
	}
	// An upgrade or a Te (ReverseProxy turns "trailers" into a field of
	// its own): ReverseProxy's. An Expect is not forwarded (Rewrite drops
	// it), so the request is the common exchange without it.
	if r.Header["Upgrade"] != nil || r.Header["Te"] != nil {
		return false
	}

	// The outbound request: what ReverseProxy's Clone, hop-by-hop
	// removal and Rewrite make of r, the header's values shared with r's
	// (neither is changed in place: fields are only set or deleted).
	o := new(outbound)
	o.req = *r
	o.url = *r.URL
	o.req.URL = &o.url
	o.req.Body = nil
	o.req.Close = false
	h := make(http.Header, len(r.Header)+3)
	for k, vv := range r.Header {
		switch k {
		case "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
			continue // the client's: Rewrite sets ours
		}
		h[k] = vv
	}
	removeHopByHop(h)
	o.req.Header = h
	o.pr = httputil.ProxyRequest{In: r, Out: &o.req}
	t.proxy.Rewrite(&o.pr)
	out := o.pr.Out
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = noUserAgent
	}
	if !st.handles(out) {
		return false
	}

	res, err := st.RoundTrip(out)
	if err != nil {
		t.proxy.ErrorHandler(w, out, err)
		return true
	}
	if res.StatusCode == http.StatusSwitchingProtocols || res.ContentLength < 0 || len(res.Trailer) > 0 ||
		eventStream(res.Header["Content-Type"]) {
		// A switch, a body to flush as it comes, trailers: the response
		// is ReverseProxy's to pass on.
		t.replay.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), replayKey{}, res)))
		return true
	}
	removeHopByHop(res.Header)
	if err := t.proxy.ModifyResponse(res); err != nil {
		res.Body.Close()
		t.proxy.ErrorHandler(w, out, err)
		return true
	}
	dst := w.Header()
	for k, vv := range res.Header {
		switch old, ok := dst[k]; {
		case len(vv) == 0:
		case ok:
			dst[k] = append(old, vv...)
		default:
			dst[k] = vv[:len(vv):len(vv)] // an append to it copies
		}
	}
	w.WriteHeader(res.StatusCode)
	buf := t.proxy.BufferPool.Get()
	err = copyBody(w, res.Body, buf, t.proxy)
	t.proxy.BufferPool.Put(buf)
	if err != nil {
		// As ReverseProxy: the response cannot be finished; under a
		// server, the handler is aborted (forward's recover reads it).
		defer res.Body.Close()
		if r.Context().Value(http.ServerContextKey) == nil {
			t.proxy.ErrorLog.Printf("suppressing panic for copyResponse error in test; copy error: %v", err)
			return true
		}
		panic(http.ErrAbortHandler)
	}
	res.Body.Close()
	return true
}

// copyBody copies src to dst through buf as ReverseProxy's copyBuffer
// does: a read error other than EOF and cancellation is logged, and
// returned once what was read before it is written.
func copyBody(dst io.Writer, src io.Reader, buf []byte, p *httputil.ReverseProxy) error {
	if len(buf) == 0 {
		buf = make([]byte, 32*1024)
	}
	for {
		nr, rerr := src.Read(buf)
		if rerr != nil && rerr != io.EOF && rerr != context.Canceled {
			p.ErrorLog.Printf("httputil: ReverseProxy read error during body copy: %v", rerr)
		}
		if nr > 0 {
			nw, werr := dst.Write(buf[:nr])
			if werr != nil {
				return werr
			}
			if nr != nw {
				return io.ErrShortWrite
			}
		}
		if rerr != nil {
			if rerr == io.EOF {
				rerr = nil
			}
			return rerr
		}
	}
}

// hopHeaders are the fields ReverseProxy removes, both ways, besides
// those a Connection field names.
var hopHeaders = [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// removeHopByHop removes the hop-by-hop fields from h, as ReverseProxy
// does: those its Connection fields name (RFC 9110, 7.6.1), then the
// fixed list.
func removeHopByHop(h http.Header) {
	for _, f := range h["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, f := range hopHeaders {
		delete(h, f)
	}
}

// eventStream reports whether a response whose Content-Type fields are
// vs might be an event stream, which ReverseProxy flushes as it comes:
// true for every value mime.ParseMediaType reads as text/event-stream
// (and a few more), without parsing.
func eventStream(vs []string) bool {
	if len(vs) == 0 {
		return false
	}
	const es = "event-stream"
	v := vs[0]
	for i := 0; i+len(es) <= len(v); i++ {
		if strings.EqualFold(v[i:i+len(es)], es) {
			return true
		}
	}
	return false
}

// replayKey is the context key under which direct hands a response to
// the target's replay proxy.
type replayKey struct{}

// replayTransport is the transport of a target's replay proxy: it
// returns the response direct has already received.
type replayTransport struct{}

// RoundTrip returns the response stored in req's context.
func (replayTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return req.Context().Value(replayKey{}).(*http.Response), nil
}
