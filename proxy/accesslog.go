package proxy

import (
	"net/http"
	"net/netip"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// accessFields are what a request's access-log line carries beyond its
// outcome, and the request id its answer carries.
type accessFields struct {
	requestID string
	idValue   []string   // requestID as a header value, for the request forwarded and the answer alike; nil until needed
	sent      int64      // bytes of response body written to the client
	body      *timedBody // the request body as read, if it was; nil: none read
	log       *config.Log
	srv       *config.Server
}

// maxLoggedUserAgent bounds the user agent the access log carries, in
// bytes: a client's header is up to max_header_bytes, and a flood of
// such lines would be the client's to write.
const maxLoggedUserAgent = 256

// beginRequest is the first thing done with a request: it settles its
// request id (requestid.go), which the answer carries and the upstream
// receives (forwardRequestID), and what its access-log line will need
// from snap.
func (h *Handler) beginRequest(r *http.Request, rec *recorder, snap *snapshot) {
	cfg := snap.set.Config
	rec.access.log, rec.access.srv = &cfg.Log, &cfg.Server
	rec.access.requestID = requestID(r, &cfg.Server)
}

// forwardRequestID sets the request id on r as it goes to the upstream,
// replacing what the client sent. (Not before: the policies match and
// key on the request's headers as the client sent them.)
func forwardRequestID(r *http.Request, rec *recorder) {
	r.Header[requestIDHeader] = rec.access.idHeader()
}

// idHeader returns the request id as a header's values: one slice for
// both headers that carry it (neither is changed in place).
func (a *accessFields) idHeader() []string {
	if a.idValue == nil {
		a.idValue = []string{a.requestID}
	}
	return a.idValue
}

// stampHeader sets the request id on the answer, once, as its head is
// written: an upstream's own X-Request-Id is replaced, so that the client
// holds the id the access log has.
func (r *recorder) stampHeader() {
	if r.access.requestID != "" {
		r.Header()[requestIDHeader] = r.access.idHeader()
	}
}

// logAccess writes docs/metrics.md's access-log line: at info level for
// every request, rejections included (so that the log says who was
// refused); at warn for one whose exchange failed after its status went
// out, with an error field. The line is encoded here and written out off
// the request's time (the server gives the access logger a buffered
// destination).
func (h *Handler) logAccess(r *http.Request, rec *recorder, start time.Time, p *policy.Policy, decision Decision, wait time.Duration, o *owed) {
	if h.acc == nil {
		return
	}
	level := zapcore.InfoLevel
	if rec.err != "" {
		level = zapcore.WarnLevel
	}
	ce := h.acc.Check(level, "request")
	if ce == nil {
		return
	}
	name := ""
	if p != nil {
		name = p.Name
	}
	key := ""
	if rec.key != "" && h.hasher != nil {
		key = h.hasher.Key(rec.key)
	}
	var received int64
	if rec.access.body != nil {
		received = rec.access.body.read.Load()
	}
	ua := r.Header.Get("User-Agent")
	if len(ua) > maxLoggedUserAgent {
		ua = ua[:maxLoggedUserAgent]
	}
	fields := [...]zap.Field{
		zap.String("method", r.Method),
		zap.String("host", r.Host),
		zap.String("path", r.URL.Path),
		zap.Int("status", rec.statusCode()),
		zap.Duration("duration", h.now().Sub(start)),
		zap.String("policy", name),
		zap.String("decision", decision.String()),
		zap.String("upstream", rec.upstream),
		zap.Duration("queue_wait", wait),
		zap.String("client", h.loggedClient(r, rec)),
		zap.String("key", key),
		zap.Int64("bytes_sent", rec.access.sent),
		zap.Int64("bytes_received", received),
		zap.String("user_agent", ua),
		zap.String("request_id", rec.access.requestID),
		zap.String("error", rec.err),
		{}, // cost
	}
	n := len(fields) - 1
	if rec.err == "" {
		n-- // no error field on a line that has none
	}
	if o != nil && o.cost >= 0 {
		fields[n] = zap.Int64("cost", o.cost)
		n++
	}
	if rec.replay != nil {
		ce.Write(rec.replay.fields(fields[:n])...)
		return
	}
	ce.Write(fields[:n]...)
}

// loggedClient is the access log's client field: the address the ip key
// part resolves, as [log] client_address shows it; "" for none (a Unix
// socket).
func (h *Handler) loggedClient(r *http.Request, rec *recorder) string {
	if rec.access.srv == nil {
		return ""
	}
	a, ok := clientIP(r, rec.access.srv)
	if !ok {
		return ""
	}
	switch rec.access.log.ClientAddress {
	case config.ClientMasked:
		return maskAddr(a).String()
	case config.ClientHashed:
		if h.hasher == nil {
			return ""
		}
		return h.hasher.Addr(a)
	}
	return a.String()
}

// maskAddr returns a's network as a masked client address shows it: an
// IPv4 address's /24, an IPv6 address's /48 (as Caddy's and Matomo's
// masks).
func maskAddr(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	bits := 48
	if a.Is4() {
		bits = 24
	}
	p, _ := a.Prefix(bits)
	return p
}
