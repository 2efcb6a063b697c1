package proxy

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/limitproxy/limitproxy/policy/config"
)

// fuzzLines splits s into header lines (at LF, a CR before it dropped),
// leaving out empty ones (they would end the head early: what follows
// would be a second request, or a body) and those that frame a body
// (Content-Length, Transfer-Encoding: the proxy would wait for a body
// that never comes), and keeps at most most.
func fuzzLines(s string, most int) []string {
	var lines []string
	for l := range strings.SplitSeq(s, "\n") {
		l = strings.TrimSuffix(l, "\r")
		if l == "" || len(lines) == most {
			continue
		}
		name, _, _ := strings.Cut(l, ":")
		if name = strings.TrimSpace(name); strings.EqualFold(name, "Content-Length") || strings.EqualFold(name, "Transfer-Encoding") {
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

// noLineEnds is s without CR and LF, cut to most bytes.
func noLineEnds(s string, most int) string {
	s = strings.NewReplacer("\r", "", "\n", "").Replace(s)
	if len(s) > most {
		s = s[:most]
	}
	return s
}

// fuzzMethods are the methods a fuzz input picks from; past them, its
// own token.
var fuzzMethods = []string{"GET", "HEAD", "DELETE", "OPTIONS", "POST"}

// fuzzRequest is the raw request of a fuzz input, for the path
// /r/NAME/ followed by tail: method picks its method (one of fuzzMethods,
// or token) and its form (HTTP/1.1 in origin-form, HTTP/1.0, or HTTP/1.1
// in absolute-form).
func fuzzRequest(method uint8, token, name, tail, headers string) string {
	var b strings.Builder
	m := int(method) % (len(fuzzMethods) + 1)
	if m < len(fuzzMethods) {
		b.WriteString(fuzzMethods[m])
	} else {
		b.WriteString(noLineEnds(token, 24))
	}
	target, proto := "/r/"+name+"/"+noLineEnds(tail, 256), "HTTP/1.1"
	switch int(method) / (len(fuzzMethods) + 1) % 3 {
	case 1:
		proto = "HTTP/1.0"
	case 2:
		target = "http://example.com" + target
	}
	b.WriteString(" " + target + " " + proto + "\r\nHost: example.com\r\n")
	if m == 4 {
		b.WriteString("Content-Length: 0\r\n")
	}
	for _, l := range fuzzLines(headers, 80) {
		b.WriteString(l + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// fuzzAnswer is the upstream's answer of a fuzz input: one of
// forwardResponses (by index, in name order), or one built of a status
// of 200 to 599, a reason, header lines and a body framed by its
// Content-Length (none after 204 and 304).
func fuzzAnswer(pick uint8, status uint16, reason, headers, body string) string {
	names := sortedKeys(forwardResponses)
	if int(pick) < len(names) {
		return forwardResponses[names[pick]]
	}
	code := 200 + int(status)%400
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", code, noLineEnds(reason, 32))
	for _, l := range fuzzLines(headers, 24) {
		b.WriteString(l + "\r\n")
	}
	if len(body) > 4096 {
		body = body[:4096]
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	if code != http.StatusNoContent && code != http.StatusNotModified {
		b.WriteString(body)
	}
	return b.String()
}

// FuzzForwardDirect holds target.direct to httputil.ReverseProxy on
// generated exchanges, as TestForwardDirectDifferential does on its
// table: a raw request (a method, a path under /r/NAME/ with any bytes
// after it, any header lines but those that frame a body) and an
// upstream answer (one of forwardResponses, or one built of any status
// of 200 to 599, header lines and a Content-Length body) go through a
// proxy that forwards the common exchange itself and through one that
// sends all through ReverseProxy, under one of three configurations
// (default; preserve_host and a target path; response_buffering): the
// upstream receives the same bytes from both (its address, the date and
// request ids aside, a retry's repeat dropped), and the client gets the
// same bytes back (as settled reads them). Every input goes to both
// proxies, so that their limiters count alike (RateLimit fields).
func FuzzForwardDirect(f *testing.F) {
	const custom = 255 // an answer built of the input's fields
	names := sortedKeys(forwardResponses)
	of := func(name string) uint8 { return uint8(slices.Index(names, name)) }
	seeds := []struct {
		method      uint8
		token, tail string
		headers     string
		answer      uint8
		status      uint16
		reason      string
		ansHeaders  string
		body        string
		config      uint8
		note        string // what it covers: forwardRequests and forwardResponses cases
	}{
		{0, "", "get", "User-Agent: t", custom, 0, "OK", "Content-Type: text/plain", "hello", 0, "get"},
		{0, "", "noua", "", custom, 4, "No Content", "X-A: 1", "", 0, "noua"},
		{0, "", "emptyua", "User-Agent:", custom, 104, "Not Modified", "Etag: \"x\"", "", 0, "emptyua"},
		{0, "", "q?a=1;b=2&c=%zz&d=%2F", "", custom, 303, "Service Unavailable", "Retry-After: 3", "down", 1, "query"},
		{0, "", "a%2Fb/%7E/caf%C3%A9", "X-Name: caf\xc3\xa9 \xff\nX-Empty:", custom, 0, "OK", "Connection: X-Hop, keep-alive\nX-Hop: 1\nX-Keep: 2", "ok", 1, "escaped, hightext"},
		{0, "", "keepalive", "Connection: keep-alive\nKeep-Alive: 300\nProxy-Connection: keep-alive\nProxy-Authorization: Basic eA==", custom, 0, "OK", "Keep-Alive: timeout=5\nProxy-Authenticate: Basic\nX-Keep: 1", "ok", 0, "keepalive, proxyauth"},
		{0, "", "close", "Connection: close", custom, 0, "OK", "Set-Cookie: a=1\nSet-Cookie: b=2\nVary: Accept\nVary: Origin", "ok", 2, "close"},
		{0, "", "named", "Connection: X-Secret, x-forwarded-for\nX-Secret: s\nX-Other: o", custom, 0, "OK", "x-lower: v\ncontent-type: TEXT/html", "ok", 0, "named"},
		{0, "", "fwd", "X-Forwarded-For: 1.2.3.4\nX-Forwarded-Host: evil\nX-Forwarded-Proto: https\nForwarded: for=1.2.3.4\nX-Real-IP: 1.2.3.4\nTrue-Client-IP: 5.6.7.8", custom, 0, "OK", "X-Request-Id: upstream-id\nRatelimit: \"up\";r=1", "ok", 0, "forwarded"},
		{0, "", "repeated", "Accept: a\nAccept: b\nCookie: x=1\nCookie: y=2\nX-Request-Id: client-id", of("sse"), 0, "", "", "", 0, "repeated, answer sse"},
		{0, "", "te", "TE: trailers", of("trailers"), 0, "", "", "", 0, "te, answer trailers"},
		{1, "", "head", "", custom, 0, "OK", "Content-Type: text/plain", "hello", 2, "head"},
		{4, "", "post0", "", of("early"), 0, "", "", "", 0, "post0, answer early"},
		{2, "", "delete", "Upgrade: websocket", of("nothing"), 0, "", "", "", 0, "delete, upgrade, answer nothing"},
		{5, "PUT", "token", "Expect: 100-continue", of("untold"), 0, "", "", "", 2, "a method of its own, expect, answer untold"},
		{6, "", "http10", "Connection: keep-alive", custom, 0, "OK", "Connection: close", "ok", 0, "http10"},
		{12, "", "absolute", "", custom, 0, "OK", "Content-Type: text/event-stream", "data: x\n\n", 1, "absolute, answer sse"},
		{5, "PATCH", "patch", "Connection: User-Agent\nUser-Agent: u", custom, 0, "OK", "X-Spaced : v\nContent-Type: text/event-\u017ftream", "ok", 0, "a method of its own, names a field to drop, a field name with a space, what may be an event stream"},
		{0, "", "unframed", "Connection: Te, Upgrade", custom, 0, "OK", "Connection: Content-Length, Content-Type, Date\nContent-Type: text/plain\nDate: then", strings.Repeat("0123456789", 300), 2, "the answer's framing fields named by its Connection"},
		{3, "", "options", "A: 1\nB: 2\nhost: other", of("short"), 0, "", "", "", 0, "options, a second Host"},
		{0, "", "status0", "", of("status0"), 0, "", "", "", 0, "answer status0 (issue 35)"},
		{4, "", "status99", "Expect: 100-continue", of("status99"), 0, "", "", "", 2, "post0, expect, answer status99 (issue 35)"},
	}
	for _, s := range seeds {
		f.Add(s.method, s.token, s.tail, s.headers, s.answer, s.status, s.reason, s.ansHeaders, s.body, s.config)
	}

	edits := []func(*config.Config){
		nil,
		func(c *config.Config) {
			c.Upstreams[0].PreserveHost = true
			u := *c.Upstreams[0].Targets[0]
			u.Path = "/base/"
			c.Upstreams[0].Targets[0] = &u
		},
		func(c *config.Config) { c.Upstreams[0].ResponseBuffering = true },
	}
	type pair struct{ direct, reverse *forwardRig }
	pairs := make([]pair, len(edits))
	for i, edit := range edits {
		pairs[i] = pair{startForwardRig(f, false, edit), startForwardRig(f, true, edit)}
	}
	var inputs atomic.Int64

	f.Fuzz(func(t *testing.T, method uint8, token, tail, headers string, answer uint8, status uint16, reason, ansHeaders, body string, cfg uint8) {
		name := "f" + strconv.FormatInt(inputs.Add(1), 10)
		raw := fuzzRequest(method, token, name, tail, headers)
		p := pairs[int(cfg)%len(pairs)]
		a := fuzzAnswer(answer, status, reason, ansHeaders, body)
		p.direct.up.set(name, a)
		p.reverse.up.set(name, a)

		gotD, gotR := settled(p.direct.exchange(t, raw)), settled(p.reverse.exchange(t, raw))
		upD, upR := p.direct.up.take(name), p.reverse.up.take(name)
		if gotD != gotR {
			t.Errorf("the client got\ndirect:  %q\nreverse: %q", gotD, gotR)
		}
		if !slices.Equal(upD, upR) {
			t.Errorf("the upstream got\ndirect:  %q\nreverse: %q", upD, upR)
		}
		if t.Failed() {
			t.Logf("request %q\nanswer %q\nconfiguration %d", raw, fuzzAnswer(answer, status, reason, ansHeaders, body), int(cfg)%len(pairs))
		}
	})
}
