package proxy

import (
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy/internal/clientkey"
)

// The forward-auth endpoint (docs/forward-auth.md) answers another proxy
// (nginx auth_request, Traefik forwardAuth, Caddy forward_auth) whether a
// request it received may pass: the request is rebuilt from what that
// proxy says of it, decided by decide as ServeHTTP decides one, and
// answered 200 where the proxy would forward it, the proxy's own answer
// (429 and Retry-After, a ban's status, 400, 404, 405) where it would
// not. Nothing is forwarded.

// The headers that describe the original request, each read only from a
// trusted sender: nginx's usual recipe sets the X-Original ones,
// Traefik and Caddy the X-Forwarded ones.
const (
	hdrForwardedMethod = "X-Forwarded-Method"
	hdrForwardedURI    = "X-Forwarded-Uri"
	hdrForwardedHost   = "X-Forwarded-Host"
	hdrOriginalMethod  = "X-Original-Method"
	hdrOriginalURI     = "X-Original-Uri"
)

// ForwardAuth returns h's forward-auth decision endpoint, configured by
// the [forward_auth] of the policy set each request sees (a reload
// changes its trusted_senders, deny_status and max_wait). It shares h's
// limits, penalty box, overrides, metrics and access log. Safe for
// concurrent use.
func (h *Handler) ForwardAuth() http.Handler { return forwardAuth{h} }

type forwardAuth struct{ h *Handler }

func (f forwardAuth) ServeHTTP(w http.ResponseWriter, in *http.Request) {
	h := f.h
	start := h.now()
	snap := h.snap.Load()
	fa := &snap.set.Config.ForwardAuth
	// The settings the request is judged by: the set's, with the trusted
	// senders believed as proxies (originalRequest).
	srv := snap.set.Config.Server
	x := h.newExchange(w, in, snap, &srv, start)
	r, problemDetail := originalRequest(in, fa, &srv)
	// Its facts are the original request's: the client behind the
	// sender, the target as sent.
	h.arrive(x, r)
	// The answer goes to the asking proxy, never to a gRPC client: a
	// refusal must be a refusal by its HTTP status.
	x.w.grpc, x.w.h2 = false, false
	// The endpoint never sees the answer: what limits that read it are
	// owed is settled as for an answer nobody saw (settle).
	x.rec.unseen = true
	var (
		keys [limiter.MaxLimits]string
		// The asking proxy forwards the target as its client sent it:
		// its path is read as sent too (readings.go).
		o    = ruling{keys: keys[:], verbatim: true}
		wait time.Duration
	)
	defer func() { h.done(x, &o, wait) }()
	if problemDetail != "" {
		o.refuse(Invalid, replyInvalid, http.StatusBadRequest)
		o.detail = problemDetail
		h.answer(x, &o)
		return
	}
	h.decide(in.Context(), x, &o)
	x.rec.key = o.recordedKey() // the access log's key, as a proxied request's
	if o.owes != nil {
		defer h.settle(x, o.owes)
	}
	h.inform(&x.w, snap, start, &o)
	if o.reply == noReply && o.decision == Queued {
		// A turn further than max_wait is refused as over the limit, its
		// place in the queue given back: by then a request waits
		// max_wait at most.
		var ok bool
		if wait, ok = h.waitTurn(x, &o, fa.MaxWait); !ok {
			return
		}
	}
	if o.reply != noReply {
		// A request refused for its form (a path some upstream reads
		// as another policy's, a fragment) gets deny_status too: nginx's
		// auth_request passes only 401 and 403 on as a refusal.
		deny := fa.DenyStatus != 0 && (o.reply == replyLimit || o.reply == replyBan || o.reply == replyInvalid)
		if deny {
			x.w.ResponseWriter = statusWriter{x.w.ResponseWriter, fa.DenyStatus}
			if o.reply == replyInvalid {
				o.status = fa.DenyStatus // the problem's status member too
			}
		}
		h.answer(x, &o)
		if deny {
			x.w.status, x.w.head = fa.DenyStatus, fa.DenyStatus
		}
		return
	}
	// Allowed: the caller forwards it. Counted as forwarded, so that
	// limits that read the answer are charged (settle).
	x.rec.forwarded = true
	x.w.Header().Set("Cache-Control", "no-store")
	x.w.Header().Set("Content-Length", "0")
	x.w.WriteHeader(http.StatusOK)
}

// statusWriter writes every status as status: [forward_auth]
// deny_status.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s statusWriter) WriteHeader(int) { s.ResponseWriter.WriteHeader(s.status) }

// Unwrap returns the underlying ResponseWriter.
func (s statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// originalRequest rebuilds the request the asking proxy received from in,
// and sets in srv whom the client-address header is read from. From a
// peer inside fa.TrustedSenders: the method of X-Forwarded-Method or
// X-Original-Method, the URI of X-Forwarded-Uri or X-Original-URI (a
// request-target, read as the proxy face's server reads one: readTarget),
// the host of X-Forwarded-Host (or of an absolute-form URI), each else
// in's own; its other headers (cookies, keys, the client-address
// header) are the original's, as the three proxies send them, and the
// sender is trusted as a proxy for client_ip_header (walked by the
// proxy's rules: trusted_proxies, trusted_hops). From any other peer,
// none of these is read: in is decided as the request it is, its peer's
// client address found as the proxy finds it. A describing header given
// twice, or by both families with different values, or not well formed,
// makes detail non-empty: the request is refused (400), never guessed.
func originalRequest(in *http.Request, fa *config.ForwardAuth, srv *config.Server) (r *http.Request, detail string) {
	r = in.Clone(in.Context())
	r.Body, r.ContentLength = http.NoBody, 0
	peer, ok := clientkey.ParsePeer(in.RemoteAddr)
	if !ok || !clientkey.Trusted(peer, fa.TrustedSenders) {
		return r, ""
	}
	srv.TrustedProxies = append(append(make([]netip.Prefix, 0, len(fa.TrustedSenders)+len(srv.TrustedProxies)), fa.TrustedSenders...), srv.TrustedProxies...)
	method, d := describing(in.Header, hdrForwardedMethod, hdrOriginalMethod)
	if d != "" {
		return r, d
	}
	uri, d := describing(in.Header, hdrForwardedURI, hdrOriginalURI)
	if d != "" {
		return r, d
	}
	host, d := describing(in.Header, hdrForwardedHost, "")
	if d != "" {
		return r, d
	}
	for _, n := range [...]string{hdrForwardedMethod, hdrForwardedURI, hdrOriginalMethod, hdrOriginalURI} {
		delete(r.Header, n)
	}
	if method != "" {
		if !validMethod(method) {
			return r, "the original method is not a method: " + method
		}
		r.Method = method
	}
	if uri != "" {
		if d := readTarget(r, uri); d != "" {
			return r, d
		}
	}
	if host != "" {
		if strings.ContainsAny(host, ", \t/@") {
			return r, "the original host is not one host: " + hdrForwardedHost + " must hold one"
		}
		if r.URL.Host != "" && normalizeHost(host) != normalizeHost(r.URL.Host) {
			// An absolute-form URI names its host too.
			return r, "the original URI's host and " + hdrForwardedHost + " disagree"
		}
		r.Host = host
	}
	r.URL.Host, r.URL.Scheme = "", ""
	return r, ""
}

// readTarget makes target the request-target of r, read as net/http's
// server reads a request line's (url.ParseRequestURI; in absolute form
// its host is r's Host, any Host header ignored, RFC 9112 section 3.2.2),
// so that canonicalize then reads it exactly as it reads a request the
// proxy face received: "//api/x", "/api/./x" and "/%61pi/x" are /api/x
// on both faces, and what the proxy face refuses is refused here too. A
// target the server would not take (not a URI: "api/x", a control
// character) is refused with detail, as the server answers it 400.
func readTarget(r *http.Request, target string) (detail string) {
	u, err := url.ParseRequestURI(target)
	if err != nil || strings.IndexByte(target, ' ') >= 0 {
		// A space ends the target on a request line: the server reads
		// no such request.
		return "the original URI is not a request-target (a path and query)"
	}
	r.URL, r.RequestURI = u, target
	if u.Host != "" {
		r.Host = u.Host
	}
	return ""
}

// describing returns the value of the describing header a (or b, if not
// ""): one field line each, equal when both are given; "" when neither
// is. detail says why not.
func describing(h http.Header, a, b string) (v, detail string) {
	for _, name := range [...]string{a, b} {
		if name == "" {
			continue
		}
		vs, ok := h[name]
		if !ok {
			continue
		}
		if len(vs) != 1 || vs[0] == "" {
			return "", name + " must be given once, not empty"
		}
		if v != "" && vs[0] != v {
			return "", a + " and " + b + " disagree"
		}
		v = vs[0]
	}
	return v, ""
}

// validMethod reports whether m is an RFC 9110 token.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
