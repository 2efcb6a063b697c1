package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/textproto"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/net/http/httpguts"
)

// oracleRequest reads b as net/http's server reads a request head: with
// http.ReadRequest, then the checks of the server's conn.readRequest
// (HTTP/1.x only, a Host field present and valid unless CONNECT, valid
// field names and values), then without the Host field. err is not nil
// when net/http's server refuses b.
func oracleRequest(b []byte) (*http.Request, error) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		return nil, err
	}
	// http1ServerSupportsRequest.
	if req.ProtoMajor != 1 && !(req.ProtoMajor == 2 && req.ProtoMinor == 0 && req.Method == "PRI" && req.RequestURI == "*") {
		return nil, fmt.Errorf("unsupported protocol version %q", req.Proto)
	}
	// ReadRequest deleted the Host fields; read them as the server sees
	// them (it reads the header with the same textproto reader).
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(b)))
	if _, err := tp.ReadLine(); err != nil {
		return nil, err
	}
	mh, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, err
	}
	hosts, haveHost := mh["Host"]
	isH2Upgrade := req.Method == "PRI" && len(mh) == 0 && req.URL.Path == "*" && req.Proto == "HTTP/2.0"
	if req.ProtoAtLeast(1, 1) && (!haveHost || len(hosts) == 0) && !isH2Upgrade && req.Method != "CONNECT" {
		return nil, fmt.Errorf("missing required Host header")
	}
	if len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]) {
		return nil, fmt.Errorf("malformed Host header")
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("invalid header name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, fmt.Errorf("invalid header value %q", v)
			}
		}
	}
	delete(req.Header, "Host")
	return req, nil
}

// checkParseHead runs parseHead on b and, when it accepts b, holds what
// it found to what net/http reads, and to the subset the front serves.
func checkParseHead(t *testing.T, b []byte) bool {
	t.Helper()
	var h head
	in := bytes.Clone(b)
	if !parseHead(in, &h) {
		return false
	}
	if !bytes.Equal(in, b) {
		t.Errorf("parseHead(%q) modified its input to %q", b, in)
	}
	req, err := oracleRequest(b)
	if err != nil {
		t.Errorf("parseHead(%q) accepts a head net/http refuses: %v", b, err)
		return true
	}
	if h.method != req.Method {
		t.Errorf("parseHead(%q): method %q, net/http %q", b, h.method, req.Method)
	}
	if h.target != req.RequestURI {
		t.Errorf("parseHead(%q): target %q, net/http RequestURI %q", b, h.target, req.RequestURI)
	}
	if h.url == nil {
		t.Errorf("parseHead(%q): nil URL", b)
	} else {
		if h.url.String() != req.URL.String() {
			t.Errorf("parseHead(%q): URL %q, net/http %q", b, h.url.String(), req.URL.String())
		}
		if !reflect.DeepEqual(h.url, req.URL) {
			t.Errorf("parseHead(%q): URL %#v, net/http %#v", b, h.url, req.URL)
		}
	}
	if h.host != req.Host {
		t.Errorf("parseHead(%q): host %q, net/http %q", b, h.host, req.Host)
	}
	if !headersEqual(h.header, req.Header) {
		t.Errorf("parseHead(%q): header %q, net/http %q", b, h.header, req.Header)
	}
	if h.close != req.Close {
		t.Errorf("parseHead(%q): close %v, net/http Close %v", b, h.close, req.Close)
	}
	// The subset the front serves: what net/http reads as HTTP/1.1,
	// origin-form, without a body and without the fields it answers
	// specially.
	if req.Proto != "HTTP/1.1" || req.ProtoMajor != 1 || req.ProtoMinor != 1 {
		t.Errorf("parseHead(%q) accepts protocol %q", b, req.Proto)
	}
	if !strings.HasPrefix(req.RequestURI, "/") {
		t.Errorf("parseHead(%q) accepts target %q, not origin-form", b, req.RequestURI)
	}
	if req.ContentLength != 0 || len(req.TransferEncoding) != 0 || req.Body != http.NoBody {
		t.Errorf("parseHead(%q) accepts a request with a body: ContentLength %d, TransferEncoding %q", b, req.ContentLength, req.TransferEncoding)
	}
	for _, k := range []string{"Expect", "Upgrade", "Trailer", "Transfer-Encoding", "Http2-Settings"} {
		if _, ok := req.Header[k]; ok {
			t.Errorf("parseHead(%q) accepts a %s field", b, k)
		}
	}
	if len(req.Trailer) != 0 {
		t.Errorf("parseHead(%q) accepts trailers %q", b, req.Trailer)
	}
	return true
}

// headersEqual compares two headers as maps of value lists (not caring
// for nil versus empty, nor for the slices' capacities).
func headersEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, av := range a {
		bv, ok := b[k]
		if !ok || !slices.Equal(av, bv) {
			return false
		}
	}
	return true
}

// reqHead builds a head from a request line and field lines, each ended
// with CRLF, and the blank line.
func reqHead(line string, fields ...string) string {
	var b strings.Builder
	b.WriteString(line)
	b.WriteString("\r\n")
	for _, f := range fields {
		b.WriteString(f)
		b.WriteString("\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

func manyFields(n int) []string {
	f := []string{"Host: example.com"}
	for i := range n {
		f = append(f, fmt.Sprintf("X-Field-%d: value %d", i, i))
	}
	return f
}

// acceptedHeads are heads the front must serve itself (parseHead true),
// and read as net/http does.
var acceptedHeads = []string{
	reqHead("GET / HTTP/1.1", "Host: example.com"),
	reqHead("GET /a/b?c=d&e=f HTTP/1.1", "Host: example.com:8080", "User-Agent: test/1.0", "Accept: */*"),
	reqHead("GET /a? HTTP/1.1", "Host: example.com"), // ForceQuery
	reqHead("HEAD /x HTTP/1.1", "Host: example.com"),
	reqHead("DELETE /x HTTP/1.1", "Host: example.com", "Content-Length: 0"),
	reqHead("POST /x HTTP/1.1", "Host: example.com", "Content-Length: 0"),
	reqHead("POST /x HTTP/1.1", "Host: example.com", "content-length:0"),
	reqHead("POST /x HTTP/1.1", "Host: example.com", "Content-Length:  0  "),
	reqHead("POST /x HTTP/1.1", "Host: example.com", "Content-Length:\t0\t"),
	reqHead("GET / HTTP/1.1", "host: example.com"),
	reqHead("GET / HTTP/1.1", "HOST:example.com"),
	reqHead("GET / HTTP/1.1", "Host: [::1]:80"),
	reqHead("GET / HTTP/1.1", "Host: 127.0.0.1"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "accept-encoding: gzip", "x-request-id: abc", "x-CUSTOM-name: v"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X-A: 1", "x-a: 2", "X-A: 3"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X-Empty:", "X-Spaces:    ", "X-Tab:\tv\t"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X-Obs: caf\xc3\xa9 \x80\xff"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X_Under_Score: v", "x-a.b!c#d$e%f&g'h*i+j^k`l|m~n: v"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Pragma: no-cache"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Pragma: no-cache", "Cache-Control: max-age=0"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Pragma: no-cache", "Pragma: x"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Pragma: x", "Pragma: no-cache"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Pragma: No-Cache"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Connection: close"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Connection: keep-alive, Close"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Connection: keep-alive", "Connection: CLOSE"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Connection: close-ish, closed"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Connection: \tclose\t,"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Connection: keep-alive"),
	reqHead("GET /%41%2Fb?q=%20 HTTP/1.1", "Host: example.com"),
	reqHead("GET /caf\xc3\xa9/\xff\x80 HTTP/1.1", "Host: example.com"),
	reqHead("GET //evil.example/x HTTP/1.1", "Host: example.com"),
	reqHead("GET /a#frag HTTP/1.1", "Host: example.com"),
	reqHead("GET /a/../b/./c HTTP/1.1", "Host: example.com"),
	reqHead("CONNECT /rpc HTTP/1.1", "Host: example.com"),
	reqHead("M-SEARCH /x HTTP/1.1", "Host: example.com"),
	reqHead("get / HTTP/1.1", "Host: example.com"),
	reqHead("GET / HTTP/1.1", "Host:"),
	reqHead("GET / HTTP/1.1", "Host: ", "X: y"),
	reqHead("GET / HTTP/1.1", "Te: trailers", "Host: example.com"),
	reqHead("GET / HTTP/1.1", "Transfer_Encoding: chunked", "Host: example.com"),
	reqHead("GET / HTTP/1.1", "Content-Lengthx: 5", "Host: example.com"),
	reqHead("GET / HTTP/1.1", manyFields(40)...),
	reqHead("GET / HTTP/1.1", manyFields(maxFields-1)...), // maxFields fields, Host among them
	reqHead("GET /~user/a~b HTTP/1.1", "Host: example.com"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X-"+strings.Repeat("long-", 30)+"name: v"),
	// From the fuzzer's corpus.
	"0 / HTTP/1.1\r\nHost:0000\r\n\r\n",
	"00000000000000000000000000000000 / HTTP/1.1\r\nHost:\r\n\r\n",
	"0 / HTTP/1.1\r\nHost:000000000\r\n0:00000000000000000000000\r\n\r\n",
	"0 / HTTP/1.1\r\nHost:\r\n0:00000000\r\n000:00000000\r\n0000000000:00000000\r\n\r\n",
	reqHead("GET / HTTP/1.1", "Host: example.com", "x-"+strings.Repeat("lOnG-", 30)+"NAME: v"),
}

// handedOffHeads are heads the front must hand to net/http (parseHead
// false): bodies, other protocols and forms, fields net/http answers
// specially, and anything malformed.
var handedOffHeads = []string{
	"",
	"\r\n",
	"\r\n\r\n",
	"\r\n" + reqHead("GET / HTTP/1.1", "Host: example.com"),
	reqHead("GET / HTTP/1.1"),
	reqHead("GET / HTTP/1.1", "X: y"),
	reqHead("GET / HTTP/1.1", "Host: a.example", "Host: b.example"),
	reqHead("GET / HTTP/1.1", "Host: a.example", "host: a.example"),
	reqHead("GET / HTTP/1.1", "Host: user@example.com"),
	reqHead("GET / HTTP/1.1", "Host: exa mple.com"),
	reqHead("GET / HTTP/1.1", "Host: example.com/path"),
	reqHead("GET / HTTP/1.1", "Host: \xc3\xa9.example"),
	// Bodies.
	reqHead("POST / HTTP/1.1", "Host: example.com", "Content-Length: 5"),
	reqHead("POST / HTTP/1.1", "Host: example.com", "Content-Length: 00"),
	reqHead("POST / HTTP/1.1", "Host: example.com", "Content-Length: +0"),
	reqHead("POST / HTTP/1.1", "Host: example.com", "Content-Length: 0, 0"),
	reqHead("POST / HTTP/1.1", "Host: example.com", "Content-Length: 0", "Content-Length: 0"),
	reqHead("POST / HTTP/1.1", "Host: example.com", "Content-Length: 0", "Content-Length: 5"),
	reqHead("POST / HTTP/1.1", "Host: example.com", "Content-Length: -1"),
	reqHead("POST / HTTP/1.1", "Host: example.com", "Transfer-Encoding: chunked"),
	reqHead("POST / HTTP/1.1", "Host: example.com", "transfer-encoding: chunked"),
	reqHead("POST / HTTP/1.1", "Host: example.com", "TRANSFER-ENCODING: CHUNKED"),
	reqHead("POST / HTTP/1.1", "Host: example.com", "tRaNsFeR-eNcOdInG: identity"),
	reqHead("POST / HTTP/1.1", "Host: example.com", "Transfer-Encoding: gzip, chunked"),
	reqHead("POST / HTTP/1.1", "Host: example.com", "Content-Length: 0", "Transfer-Encoding: chunked"),
	reqHead("POST / HTTP/1.1", "Host: example.com", "Transfer-Encoding: chunked", "Content-Length: 0"),
	reqHead("POST / HTTP/1.1", "Host: example.com", "Content-Length: 5", "Transfer-Encoding: chunked"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Transfer-Encoding:"),
	// Fields net/http answers specially.
	reqHead("POST / HTTP/1.1", "Host: example.com", "Expect: 100-continue", "Content-Length: 0"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Expect: something"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Upgrade: websocket", "Connection: Upgrade"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Upgrade: h2c", "Connection: Upgrade, HTTP2-Settings", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Trailer: X-T"),
	// Malformed field lines.
	reqHead("GET / HTTP/1.1", "Host: example.com", "X-Fold: a", " b"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X-Fold: a", "\tb"),
	reqHead("GET / HTTP/1.1", " Host: example.com"),
	reqHead("GET / HTTP/1.1", "Host : example.com"),
	reqHead("GET / HTTP/1.1", "Host\t: example.com"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X-Foo : bar"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X Foo: bar"),
	reqHead("GET / HTTP/1.1", "Host: example.com", ": no name"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "no colon"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X-\x00: v"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X-\x7f: v"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X-\x80: v"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X-caf\xc3\xa9: v"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X-(x): v"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X: a\x00b"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X: a\x7fb"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X: a\x01b"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X: a\x0bb"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X: a\rb"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "X: a\nb"),
	"GET / HTTP/1.1\nHost: example.com\n\n",
	"GET / HTTP/1.1\r\nHost: example.com\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\n\n",
	"GET / HTTP/1.1\nHost: example.com\r\n\r\n",
	"GET / HTTP/1.1\rHost: example.com\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\rX: y\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\n",
	"GET / HTTP/1.1\r\nHost: example.com",
	"GET / HTTP/1.1\r\nHost: example.com\r\n\r\nGET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\n\r\nx",
	// Request lines.
	reqHead("GET http://example.com/ HTTP/1.1", "Host: example.com"),
	reqHead("GET https://example.com/ HTTP/1.1", "Host: other.example"),
	reqHead("OPTIONS * HTTP/1.1", "Host: example.com"),
	reqHead("CONNECT example.com:443 HTTP/1.1", "Host: example.com:443"),
	reqHead("CONNECT example.com:443 HTTP/1.1"),
	reqHead("GET / HTTP/1.0", "Host: example.com"),
	reqHead("GET / HTTP/1.0"),
	reqHead("GET / HTTP/1.10", "Host: example.com"),
	reqHead("GET / HTTP/1.01", "Host: example.com"),
	reqHead("GET / HTTP/01.1", "Host: example.com"),
	reqHead("GET / http/1.1", "Host: example.com"),
	reqHead("GET / Http/1.1", "Host: example.com"),
	reqHead("GET / HTTP/2.0", "Host: example.com"),
	reqHead("GET / HTTP/1.1 ", "Host: example.com"),
	reqHead("GET / HTTP/1.1\t", "Host: example.com"),
	reqHead("GET /", "Host: example.com"),
	reqHead("GET", "Host: example.com"),
	reqHead("GET  / HTTP/1.1", "Host: example.com"),
	reqHead("GET /  HTTP/1.1", "Host: example.com"),
	reqHead(" GET / HTTP/1.1", "Host: example.com"),
	reqHead(" / HTTP/1.1", "Host: example.com"), // no method
	reqHead("GET\t/ HTTP/1.1", "Host: example.com"),
	reqHead("GET /a b HTTP/1.1", "Host: example.com"),
	reqHead("GET /a\tb HTTP/1.1", "Host: example.com"),
	reqHead("GET /a\x00b HTTP/1.1", "Host: example.com"),
	reqHead("GET /a\x7fb HTTP/1.1", "Host: example.com"),
	reqHead("GET /a\x01b HTTP/1.1", "Host: example.com"),
	reqHead("GET a HTTP/1.1", "Host: example.com"),
	reqHead("GET ?a HTTP/1.1", "Host: example.com"),
	reqHead("G(T / HTTP/1.1", "Host: example.com"),
	reqHead("G\xc3\xa9T / HTTP/1.1", "Host: example.com"),
	reqHead("/ HTTP/1.1", "Host: example.com"),
	reqHead("GET /%zz HTTP/1.1", "Host: example.com"),
	reqHead("GET /%41%2F%zz?%zz HTTP/1.1", "Host: example.com"),
	reqHead("GET /%4 HTTP/1.1", "Host: example.com"),
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	"PRI * HTTP/2.0\r\n\r\n",
	// From the fuzzer's corpus.
	"0 / HTTP/1.1\r\n00:\r\n\r\n",
	"0 / HTTP/1.1\r\n0:0\r\n",
	"0 / HTTP/1.1\r\n0\n",
	"0\r",
	// Too many fields for the front.
	reqHead("GET / HTTP/1.1", manyFields(200)...),
	reqHead("GET / HTTP/1.1", manyFields(maxFields)...),
}

func TestParseHeadAccepts(t *testing.T) {
	for _, s := range acceptedHeads {
		if !checkParseHead(t, []byte(s)) {
			req, err := oracleRequest([]byte(s))
			t.Errorf("parseHead(%q) = false, want true (net/http: %v, err %v)", s, req != nil, err)
		}
	}
}

func TestParseHeadHandsOff(t *testing.T) {
	for _, s := range handedOffHeads {
		var h head
		if parseHead([]byte(s), &h) {
			_, err := oracleRequest([]byte(s))
			t.Errorf("parseHead(%q) = true, want false (handed to net/http; net/http's reading: err %v)", s, err)
		}
	}
}

// divergentHeads are heads found by review or by the fuzzer that the
// differential check holds: parseHead may accept or refuse them, but
// what it accepts must read as net/http reads it.
var divergentHeads = []string{
	// Found in review, now fixed: parseHead reads "Connection: clo\u017fe" (LATIN SMALL LETTER
	// LONG S, which strings.EqualFold folds to "s") as the token
	// "close" and marks the request Close; net/http's shouldClose
	// (httpguts.HeaderValuesContainsToken, ASCII-only) does not, and
	// keeps the connection alive.
	reqHead("GET / HTTP/1.1", "Host: example.com", "Connection: clo\u017fe"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Connection: keep-alive, \u017fclose"),
	reqHead("GET / HTTP/1.1", "Host: example.com", "Connection: CLO\u017fE"),
}

func TestParseHeadDifferential(t *testing.T) {
	for _, s := range divergentHeads {
		checkParseHead(t, []byte(s))
	}
	for _, s := range acceptedHeads {
		checkParseHead(t, []byte(s))
	}
	for _, s := range handedOffHeads {
		checkParseHead(t, []byte(s))
	}
}

func FuzzParseHead(f *testing.F) {
	for _, s := range acceptedHeads {
		f.Add([]byte(s))
	}
	for _, s := range handedOffHeads {
		f.Add([]byte(s))
	}
	// Not divergentHeads: a failing seed stops the fuzzer before it
	// starts; TestParseHeadDifferential checks them.
	f.Fuzz(func(t *testing.T, b []byte) {
		checkParseHead(t, b)
	})
}

// TestParseHeadRefusesMalformedBytesWithoutAllocating: a head whose
// request line or field lines are malformed is handed over on the cheap
// checks of its bytes, before parseHead copies anything.
func TestParseHeadRefusesMalformedBytesWithoutAllocating(t *testing.T) {
	for _, s := range []string{
		reqHead("GET /a\x00b HTTP/1.1", "Host: example.com"),
		reqHead("GET /a\x01b HTTP/1.1", "Host: example.com"),
		reqHead("GET /a\tb HTTP/1.1", "Host: example.com"),
		reqHead("GET /a\x7fb HTTP/1.1", "Host: example.com"),
		reqHead(" / HTTP/1.1", "Host: example.com"),
		reqHead("G(T / HTTP/1.1", "Host: example.com"),
		reqHead("GET * HTTP/1.1", "Host: example.com"),
		reqHead("GET / HTTP/1.0", "Host: example.com"),
		reqHead("GET / HTTP/1.1", "Host: example.com", "X: a\x01b"),
		reqHead("GET / HTTP/1.1", "Host: example.com", "X Foo: bar"),
		reqHead("GET / HTTP/1.1", manyFields(maxFields)...),
		"GET / HTTP/1.1\r\nHost: example.com\n\r\n",
	} {
		b := []byte(s)
		var h head
		if parseHead(b, &h) {
			t.Errorf("parseHead(%q) = true, want false", s)
			continue
		}
		if n := testing.AllocsPerRun(10, func() { parseHead(b, &h) }); n != 0 {
			t.Errorf("parseHead(%q) refuses it after %v allocations, want 0", s, n)
		}
	}
}

// TestParseHeadCommonHeadAllocatesOnlyItsText: a connection's next head
// of the common kind (a path of unreserved characters and slashes,
// canonical field names) costs one allocation, the copy of its text: the
// URL is not parsed, the header map and the values' array are the
// connection's, used again even when the head fills the array exactly.
func TestParseHeadCommonHeadAllocatesOnlyItsText(t *testing.T) {
	for _, s := range []string{
		reqHead("GET /azAZ09-._~/x?q=1 HTTP/1.1", "Host: example.com"),
		// Eight fields, the values' array's first size.
		reqHead("GET /abcdefghijklmnopqrstuvwxyz/ABCDEFGHIJKLMNOPQRSTUVWXYZ/0123456789 HTTP/1.1",
			"Host: example.com", "User-Agent: test", "Accept: */*", "Accept-Encoding: gzip",
			"Accept-Language: en", "Cache-Control: no-cache", "Referer: /", "X-Request-Id: 1"),
	} {
		b := []byte(s)
		if !checkParseHead(t, b) {
			t.Errorf("parseHead(%q) = false, want true", s)
			continue
		}
		var h head
		parseHead(b, &h)
		if n := testing.AllocsPerRun(10, func() { parseHead(b, &h) }); n != 1 {
			t.Errorf("parseHead(%q) again: %v allocations, want 1", s, n)
		}
	}
}

// TestParseHeadMethodDoesNotKeepHeadText: the common methods are the
// constants, not slices of the head's text, so that a request's method
// kept past the request (in a log, a key) does not keep the head alive.
func TestParseHeadMethodDoesNotKeepHeadText(t *testing.T) {
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"} {
		var h head
		if !parseHead([]byte(reqHead(m+" /x HTTP/1.1", "Host: example.com")), &h) {
			t.Errorf("parseHead refuses %s", m)
			continue
		}
		// The target is the text's bytes len(m)+1 on.
		text := uintptr(unsafe.Pointer(unsafe.StringData(h.target))) - uintptr(len(m)+1)
		if p := uintptr(unsafe.Pointer(unsafe.StringData(h.method))); h.method != m || p >= text && p < text+uintptr(len(m)) {
			t.Errorf("parseHead(%s): method %q is a slice of the head's text", m, h.method)
		}
	}
}
