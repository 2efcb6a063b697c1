package replay

import (
	"context"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay/logread"
	"github.com/limitproxy/limitproxy/proxy"
)

// Placeholder is the client address a request is given when its record
// has none (limitproxy's access log without [log] access_replay): every
// such request then counts under the same ip key. Report.Read.NoClient
// counts them.
var Placeholder = netip.IPv4Unspecified()

// fieldCost is the field of limitproxy's access log that holds the cost
// an answer reported (cost_from), which logread leaves in Record.Extra.
const fieldCost = "cost"

// request returns the request the proxy read for rec, as Evaluate takes
// it: Method, Host, URL and RequestURI, Proto, Header, its token's claims
// (proxy.WithClaims) when the record has them, and RemoteAddr
// "ip:0" of the record's client (its peer if it has no client, else
// Placeholder; hasClient is false then). A record with no Method (a
// line nginx logged for something that was not a request) gives nil.
func request(rec *logread.Record) (r *http.Request, hasClient bool) {
	if rec.Method == "" {
		return nil, false
	}
	r = &http.Request{
		Method:     rec.Method,
		Host:       rec.Host,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     make(http.Header, len(rec.Header)+1),
		Body:       http.NoBody,
	}
	if rec.Proto != "" {
		if major, minor, ok := http.ParseHTTPVersion(rec.Proto); ok {
			r.Proto, r.ProtoMajor, r.ProtoMinor = rec.Proto, major, minor
		}
	}
	// The target exactly as sent when the log has it (nginx): the server
	// parses it as net/http does, and canonicalizes the path from it.
	if rec.Target != "" {
		if u, err := url.ParseRequestURI(rec.Target); err == nil {
			r.URL, r.RequestURI = u, rec.Target
			if u.Host != "" {
				r.Host = u.Host
			}
		}
	}
	if r.URL == nil {
		// limitproxy's log: the path as it logged it, canonical and
		// decoded; RequestURI stays "" so that the path is taken from
		// URL (re-escaped) rather than read as a raw target.
		r.URL = &url.URL{Path: rec.Path, RawQuery: rec.RawQuery}
		if r.URL.Path == "" {
			r.URL.Path = "/"
		}
	}
	for _, f := range rec.Header {
		r.Header[f.Name] = append(r.Header[f.Name], f.Value)
	}
	if len(rec.Claims) > 0 {
		byPath := make(map[string]string, len(rec.Claims))
		for _, f := range rec.Claims {
			byPath[f.Name] = f.Value
		}
		r = r.WithContext(proxy.WithClaims(context.Background(), byPath))
	}
	client := rec.Client
	if !client.IsValid() {
		client = rec.Peer
	}
	hasClient = client.IsValid()
	if !hasClient {
		client = Placeholder
	}
	r.RemoteAddr = netip.AddrPortFrom(client, 0).String()
	return r, hasClient
}

// cost returns the cost the answer reported as limitproxy logged it
// (its cost field), or -1.
func cost(rec *logread.Record) int64 {
	if rec.Format != logread.Limitproxy {
		return -1
	}
	v, ok := rec.ExtraValue(fieldCost)
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}
