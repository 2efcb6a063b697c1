package server

import (
	"encoding/json"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// The admin listener's timeouts (docs/admin-api.md#the-admin-listener).
// A request head must arrive within 5 s and a whole request, body
// included (the largest the API reads is 64 KiB), within 10 s; an answer
// must be written within 30 s of its request's head (a /metrics scrape
// takes milliseconds to build, a reload at most a few seconds, a /readyz
// or a Redis-backed call at most the store's timeout); a keep-alive
// connection idle for 30 s is closed (the dashboard polls every 2 s and
// keeps its connection).
const (
	adminReadHeaderTimeout = 5 * time.Second
	adminReadTimeout       = 10 * time.Second
	adminWriteTimeout      = 30 * time.Second
	adminIdleTimeout       = 30 * time.Second
)

// adminTimeouts are the admin listener's timeouts, as its http.Server
// takes them. A process starts with defaultAdminTimeouts; only tests
// change them (lower, to see each one cut a connection in a second).
type adminTimeouts struct {
	readHeader, read, write, idle time.Duration
}

// defaultAdminTimeouts are the admin listener's documented timeouts.
var defaultAdminTimeouts = adminTimeouts{
	readHeader: adminReadHeaderTimeout,
	read:       adminReadTimeout,
	write:      adminWriteTimeout,
	idle:       adminIdleTimeout,
}

// adminGuard refuses, before the token and the API see them, the requests
// a web page can make a browser send to the admin listener: a request whose
// Host names it by a name it does not answer to (DNS rebinding: a page on
// attacker.example whose name now resolves to 127.0.0.1) gets 421, and a
// request that changes something (any method but GET, HEAD and OPTIONS)
// gets 403 when it comes from another origin (Sec-Fetch-Site cross-site or
// same-site, or an Origin not of its Host: every browser sends one of
// them with such a request), and 415 when it carries a body, or a
// Content-Type, other than application/json, which no cross-origin page
// can send without a CORS preflight, which the admin listener never
// grants. A request without a body and without a Content-Type (curl -X
// POST, curl -X DELETE) is taken: it says nothing a type could
// describe.
type adminGuard struct {
	// names are the host names a Host may give, as allowedHost compares
	// them: "name" (any port) or "name:port", in lower case.
	names []string
	csrf  *http.CrossOriginProtection
}

// newAdminGuard returns the guard of an admin listener configured to
// listen on listen that also answers to the names of allowed (validated
// [admin] allowed_hosts entries).
func newAdminGuard(listen string, allowed []string) *adminGuard {
	g := &adminGuard{csrf: http.NewCrossOriginProtection()}
	if host, port, err := net.SplitHostPort(listen); err == nil && host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			// listen = "admin.internal:9091": that name, as a Host.
			g.names = append(g.names, strings.ToLower(strings.TrimSuffix(host, "."))+":"+port)
		}
	}
	g.names = append(g.names, allowed...)
	return g
}

// allowedHost reports whether the admin listener answers a request whose
// Host is host: an IP address (a browser sends one only to that address,
// so no rebound name is involved; probes such as kubelet's use the pod's
// address), localhost, a name of the listen address or of allowed_hosts,
// or no Host at all (HTTP/1.0; a browser always sends one). Ports are
// compared only for names listed with one.
func (g *adminGuard) allowedHost(host string) bool {
	if host == "" {
		return true
	}
	name, port := host, ""
	if h, p, err := net.SplitHostPort(host); err == nil {
		name, port = h, p
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		name = host[1 : len(host)-1]
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == "localhost" {
		return true
	}
	for _, n := range g.names {
		if n == name || port != "" && n == name+":"+port {
			return true
		}
	}
	return false
}

// safeMethod reports whether method changes nothing on the admin API, so
// that a browser may send it from anywhere without harm: it can neither
// read the answer (no CORS grant) nor, on an allowed Host, reach data.
func safeMethod(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}

// wrap returns next behind the guard.
func (g *adminGuard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !g.allowedHost(req.Host) {
			writeProblem(w, http.StatusMisdirectedRequest, "Misdirected Request",
				"the admin listener does not answer to the host "+strconv.Quote(req.Host)+
					": reach it by an IP address or localhost, or add the name to [admin] allowed_hosts")
			return
		}
		if !safeMethod(req.Method) {
			if err := g.csrf.Check(req); err != nil {
				writeProblem(w, http.StatusForbidden, "Forbidden",
					"a cross-origin request cannot change anything on the admin API")
				return
			}
			if !bodiless(req) {
				if mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type")); err != nil || mt != "application/json" {
					writeProblem(w, http.StatusUnsupportedMediaType, "Unsupported Media Type",
						"a "+req.Method+" to the admin API with a body or a Content-Type needs Content-Type: application/json")
					return
				}
			}
		}
		next.ServeHTTP(w, req)
	})
}

// bodiless reports whether req has no body and no Content-Type: an
// HTTP/1 request without Content-Length or Transfer-Encoding, or with
// Content-Length: 0; an HTTP/2 one whose headers ended its stream.
func bodiless(req *http.Request) bool {
	_, typed := req.Header["Content-Type"]
	return !typed && req.ContentLength == 0 && len(req.TransferEncoding) == 0
}

// writeProblem answers an RFC 9457 problem details object.
func writeProblem(w http.ResponseWriter, status int, title, detail string) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", title, status, detail})
}
