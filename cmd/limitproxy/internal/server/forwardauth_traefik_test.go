package server

import (
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// Traefik is not installed here (no Debian package, and its module
// cannot be built from the Go module proxy: see forwardauth_bypass_test.go),
// so its forwardAuth recipe of docs/forward-auth.md runs simulated:
// runTraefikForwardAuth is a Go front that does, in order, what Traefik
// v3 does with a request on an HTTP entry point with its defaults and a
// router whose middleware is that forwardAuth, as its source builds it
// (traefik/traefik at fd5a576, July 2026):
//
//   - pkg/server/server_entrypoint_tcp.go: denyFragment (400 for a '#'
//     in the raw path), normalizePath (unreserved percent-encodings of
//     the raw path decoded, the others in upper case), sanitizePath
//     (http.sanitizePath, on by default: URL.JoinPath(), which resolves
//     dot segments and merges slashes; RequestURI set from the result);
//   - pkg/middlewares/forwardedheaders: from a peer outside
//     forwardedHeaders.trustedIPs, the client's X-Forwarded-* and
//     X-Real-Ip deleted, then X-Real-Ip, X-Forwarded-Proto, -Port, -Host
//     and -Server set;
//   - pkg/middlewares/headers: the recipe's strip-original middleware
//     (customRequestHeaders X-Original-URI and X-Original-Method set to
//     "": deleted);
//   - pkg/middlewares/auth/forward.go with trustForwardHeader unset (the
//     recipe's: oldWriteHeader): a GET to the address with the request's
//     headers (hop-by-hop ones removed), X-Forwarded-For set to the
//     peer's address, X-Forwarded-Proto, -Method, -Host and -Uri
//     (req.URL.RequestURI()) set; a redirect is not followed; an answer
//     outside 2xx is returned to the client with its headers and body, a
//     2xx copies authResponseHeaders into the request and passes it on;
//   - pkg/proxy/httputil/proxy.go: the service's reverse proxy forwards
//     the path and query parsed from RequestURI (';' in the query as '&'),
//     the client's Host kept (passHostHeader's default).
//
// What Traefik does besides (TLS, tracing, access logs, buffering) has
// no bearing on what the endpoint is told or what the backend receives.

// traefikHopHeaders are the hop-by-hop headers Traefik's forwardAuth
// removes from the headers it copies (its hopHeaders).
var traefikHopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailers", "Transfer-Encoding", "Upgrade"}

// traefikXHeaders are the headers Traefik's forwardedheaders middleware
// deletes from an untrusted peer's request (its XHeadersSet).
var traefikXHeaders = []string{"X-Forwarded-Proto", "X-Forwarded-Scheme", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Port",
	"X-Forwarded-Server", "X-Forwarded-Uri", "X-Forwarded-Method", "X-Forwarded-Prefix", "X-Forwarded-Tls-Client-Cert",
	"X-Forwarded-Tls-Client-Cert-Info", "X-Scheme", "X-Real-Ip"}

// runTraefikForwardAuth starts the simulated Traefik (above) in front of
// backend, asking the forward-auth endpoint at fa, and returns its
// address.
func runTraefikForwardAuth(t *testing.T, backend, fa string) string {
	t.Helper()
	ask := &http.Client{
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	service := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.Out.URL.Scheme, pr.Out.URL.Host = "http", backend
		u := pr.Out.URL
		if parsed, err := url.ParseRequestURI(pr.Out.RequestURI); err == nil {
			u = parsed
		}
		pr.Out.URL.Path, pr.Out.URL.RawPath = u.Path, u.RawPath
		pr.Out.URL.RawQuery = strings.ReplaceAll(u.RawQuery, ";", "&")
		pr.Out.RequestURI = ""
		pr.Out.Host = pr.In.Host
		if client, _, err := net.SplitHostPort(pr.In.RemoteAddr); err == nil {
			pr.Out.Header.Set("X-Forwarded-For", client)
		}
	}}
	hostname, _ := os.Hostname()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// denyFragment.
		if strings.Contains(r.URL.RawPath, "#") {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		// normalizePath.
		if raw := r.URL.RawPath; raw != "" {
			var b strings.Builder
			for i := 0; i < len(raw); i++ {
				if raw[i] != '%' {
					b.WriteByte(raw[i])
					continue
				}
				if i+2 >= len(raw) {
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				enc := strings.ToUpper(raw[i : i+3])
				if d, err := url.PathUnescape(enc); err == nil && len(d) == 1 && isUnreserved(d[0]) {
					b.WriteString(d)
				} else {
					b.WriteString(enc)
				}
				i += 2
			}
			r.URL.RawPath = b.String()
			r.RequestURI = r.URL.RequestURI()
		}
		// sanitizePath.
		r.URL = r.URL.JoinPath()
		r.RequestURI = r.URL.RequestURI()
		// forwardedheaders, from an untrusted peer.
		for _, name := range traefikXHeaders {
			r.Header.Del(name)
		}
		client, _, _ := net.SplitHostPort(r.RemoteAddr)
		r.Header.Set("X-Real-Ip", client)
		r.Header.Set("X-Forwarded-Proto", "http")
		_, port, _ := net.SplitHostPort(r.Host)
		if port == "" {
			port = "80"
		}
		r.Header.Set("X-Forwarded-Port", port)
		r.Header.Set("X-Forwarded-Host", r.Host)
		r.Header.Set("X-Forwarded-Server", hostname)
		// headers (strip-original).
		r.Header.Del("X-Original-Uri")
		r.Header.Del("X-Original-Method")
		// forwardAuth (oldWriteHeader).
		fr, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "http://"+fa, nil)
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		for name, vs := range r.Header {
			fr.Header[name] = append([]string(nil), vs...)
		}
		for _, name := range traefikHopHeaders {
			fr.Header.Del(name)
		}
		fr.Header.Set("X-Forwarded-For", client)
		fr.Header.Set("X-Forwarded-Proto", "http")
		fr.Header.Set("X-Forwarded-Method", r.Method)
		fr.Header.Set("X-Forwarded-Host", r.Host)
		fr.Header.Set("X-Forwarded-Uri", r.URL.RequestURI())
		resp, err := ask.Do(fr)
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if resp.StatusCode < 200 || resp.StatusCode >= 300 {
			for name, vs := range resp.Header {
				w.Header()[name] = vs
			}
			for _, name := range traefikHopHeaders {
				w.Header().Del(name)
			}
			w.WriteHeader(resp.StatusCode)
			w.Write(body)
			return
		}
		for _, name := range []string{"RateLimit", "RateLimit-Policy"} { // authResponseHeaders
			r.Header.Del(name)
			if vs := resp.Header[name]; len(vs) > 0 {
				r.Header[name] = append([]string(nil), vs...)
			}
		}
		r.RequestURI = r.URL.RequestURI()
		service.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// isUnreserved reports whether c is an RFC 3986 unreserved character.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// TestForwardAuthTraefik: Traefik's forwardAuth (simulated, above) asks
// limitproxy, which answers a refusal itself (429 with Retry-After,
// passed to the client as it is): exactly the limit reaches the
// upstream, whatever the client adds to its requests.
func TestForwardAuthTraefik(t *testing.T) {
	up, api := countingUpstream(t)
	fa := startForwardAuth(t, `"127.0.0.1"`, "")
	addr := runTraefikForwardAuth(t, up, fa)

	checkForwardAuthFront(t, addr, api)
}
