package logread_test

import (
	"errors"
	"io"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay/logread"
)

func nginxReader(t *testing.T, src string, o logread.NginxOptions) *logread.NginxReader {
	t.Helper()
	r, err := logread.NewNginxReader(strings.NewReader(src), "access.log", logread.Options{Nginx: o})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// readOne reads the one record of line.
func readOne(t *testing.T, line string, o logread.NginxOptions) logread.Record {
	t.Helper()
	rec, err := nginxReader(t, line+"\n", o).Next()
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestCombinedFields: every field of a combined line.
func TestCombinedFields(t *testing.T) {
	line := `203.0.113.7 - alice [22/Nov/2026:18:46:44 +0100] "GET /search/caf%C3%A9?q=a+b&x=%2F HTTP/1.1" 200 5120 "https://example.com/start" "Mozilla/5.0 (X11; Linux x86_64)"`
	got := readOne(t, line, logread.NginxOptions{})
	end := time.Date(2026, 11, 22, 18, 46, 44, 0, time.FixedZone("", 3600))
	want := logread.Record{
		File: "access.log", Line: 1, Format: logread.Nginx,
		Has:  logread.HasTime | logread.HasStatus | logread.HasBodyBytes,
		Time: end, End: end, Resolution: time.Second,
		Client: netip.MustParseAddr("203.0.113.7"), Peer: netip.MustParseAddr("203.0.113.7"), User: "alice",
		Method: "GET", Request: "GET /search/caf%C3%A9?q=a+b&x=%2F HTTP/1.1", Target: "/search/caf%C3%A9?q=a+b&x=%2F",
		Path: "/search/café", RawQuery: "q=a+b&x=%2F", Proto: "HTTP/1.1",
		Header: []logread.Field{{Name: "Referer", Value: "https://example.com/start"}, {Name: "User-Agent", Value: "Mozilla/5.0 (X11; Linux x86_64)"}},
		Status: 200, BodyBytes: 5120,
	}
	if !equalRecord(got, want) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
	if _, off := got.End.Zone(); off != 3600 {
		t.Errorf("offset %d, want the logged +0100", off)
	}
	if ua, ok := got.HeaderValue("User-Agent"); !ok || ua != "Mozilla/5.0 (X11; Linux x86_64)" {
		t.Errorf("HeaderValue = %q, %v", ua, ok)
	}
}

// TestCombinedOdd: what real nginx logs hold besides well-formed requests.
func TestCombinedOdd(t *testing.T) {
	const tail = ` - - [22/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1" 200 0 "-" "-"`
	req := func(request string) string {
		return `198.51.100.1 - - [22/Nov/2026:18:46:44 +0000] "` + request + `" 400 157 "-" "-"`
	}
	tests := []struct {
		name, line string
		check      func(t *testing.T, r logread.Record)
	}{
		{"IPv6", "2001:db8::1" + tail, func(t *testing.T, r logread.Record) {
			if r.Client != netip.MustParseAddr("2001:db8::1") {
				t.Errorf("Client %v", r.Client)
			}
		}},
		{"IPv4-mapped", "::ffff:192.0.2.9" + tail, func(t *testing.T, r logread.Record) {
			if r.Client != netip.MustParseAddr("192.0.2.9") || !r.Client.Is4() {
				t.Errorf("Client %v, want it unmapped", r.Client)
			}
		}},
		{"IPv4 with port", "192.0.2.9:51234" + tail, func(t *testing.T, r logread.Record) {
			if r.Client != netip.MustParseAddr("192.0.2.9") {
				t.Errorf("Client %v", r.Client)
			}
		}},
		{"IPv6 with port", "[2001:db8::2]:443" + tail, func(t *testing.T, r logread.Record) {
			if r.Client != netip.MustParseAddr("2001:db8::2") {
				t.Errorf("Client %v", r.Client)
			}
		}},
		{"dash fields", "192.0.2.9" + tail, func(t *testing.T, r logread.Record) {
			if r.User != "" || r.Header != nil || r.Status != 200 || r.BodyBytes != 0 || r.Has&logread.HasBodyBytes == 0 {
				t.Errorf("%+v", r)
			}
		}},
		{"escapes", `192.0.2.9 - - [22/Nov/2026:18:46:44 +0000] "GET /a\x22b HTTP/1.1" 200 1 "-" "say \x22hi\x22 \x5Cn caf\xC3\xA9 \xFF"`, func(t *testing.T, r logread.Record) {
			if ua, _ := r.HeaderValue("User-Agent"); ua != "say \"hi\" \\n café \xff" {
				t.Errorf("User-Agent %q", ua)
			}
			if r.Path != `/a"b` || r.Target != `/a"b` {
				t.Errorf("Path %q, Target %q", r.Path, r.Target)
			}
		}},
		{"Apache quotes", `192.0.2.9 - - [22/Nov/2026:18:46:44 +0000] "GET /x HTTP/1.1" 200 1 "ref \"q\" \\" "ua \"quoted\" end"`, func(t *testing.T, r logread.Record) {
			ref, _ := r.HeaderValue("Referer")
			ua, _ := r.HeaderValue("User-Agent")
			if ref != `ref "q" \` || ua != `ua "quoted" end` {
				t.Errorf("Referer %q, User-Agent %q", ref, ua)
			}
		}},
		{"absolute form", req("GET http://Example.COM:8080/p/a%20b?q=1 HTTP/1.1"), func(t *testing.T, r logread.Record) {
			if r.Host != "Example.COM:8080" || r.Path != "/p/a b" || r.RawQuery != "q=1" || r.Target != "http://Example.COM:8080/p/a%20b?q=1" || r.Method != "GET" {
				t.Errorf("%+v", r)
			}
		}},
		{"absolute form, no path", req("GET https://user@example.com HTTP/1.1"), func(t *testing.T, r logread.Record) {
			if r.Host != "example.com" || r.Path != "" {
				t.Errorf("Host %q, Path %q", r.Host, r.Path)
			}
		}},
		{"CONNECT", req("CONNECT example.com:443 HTTP/1.1"), func(t *testing.T, r logread.Record) {
			if r.Method != "CONNECT" || r.Host != "example.com:443" || r.Path != "" {
				t.Errorf("%+v", r)
			}
		}},
		{"OPTIONS *", req("OPTIONS * HTTP/1.1"), func(t *testing.T, r logread.Record) {
			if r.Method != "OPTIONS" || r.Path != "*" {
				t.Errorf("%+v", r)
			}
		}},
		{"HTTP/0.9", req("GET /old"), func(t *testing.T, r logread.Record) {
			if r.Method != "GET" || r.Path != "/old" || r.Proto != "" {
				t.Errorf("%+v", r)
			}
		}},
		{"TLS handshake", req(`\x16\x03\x01\x00\xA5\x01\x00\x00\xA1\x03\x03\x8E`), func(t *testing.T, r logread.Record) {
			if r.Method != "" || r.Target != "" || r.Path != "" || r.Request != "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\x8e" || r.Status != 400 {
				t.Errorf("%+v", r)
			}
		}},
		{"empty request", req(""), func(t *testing.T, r logread.Record) {
			if r.Method != "" || r.Request != "" || r.Status != 400 {
				t.Errorf("%+v", r)
			}
		}},
		{"spaces in target", req("GET /a b HTTP/1.1"), func(t *testing.T, r logread.Record) {
			if r.Method != "GET" || r.Target != "/a b" || r.Proto != "HTTP/1.1" {
				t.Errorf("%+v", r)
			}
		}},
		{"not a version", req("GET /a b"), func(t *testing.T, r logread.Record) {
			if r.Method != "" {
				t.Errorf("%+v", r)
			}
		}},
		{"bad percent", req("GET /%zz HTTP/1.1"), func(t *testing.T, r logread.Record) {
			if r.Path != "/%zz" {
				t.Errorf("Path %q", r.Path)
			}
		}},
		{"status 499, no body", "192.0.2.9 - - [22/Nov/2026:18:46:44 +0000] \"POST /upload HTTP/2.0\" 499 0 \"-\" \"curl/8.5.0\"", func(t *testing.T, r logread.Record) {
			if r.Status != 499 || r.Proto != "HTTP/2.0" || r.Method != "POST" {
				t.Errorf("%+v", r)
			}
		}},
		{"CRLF", "192.0.2.9" + tail + "\r", func(t *testing.T, r logread.Record) {
			if ua, ok := r.HeaderValue("User-Agent"); ok {
				t.Errorf("User-Agent %q", ua)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, readOne(t, tt.line, logread.NginxOptions{}))
		})
	}
}

// TestNginxErrors: lines that are not in the format name file:line and
// what is wrong, and the reader goes on.
func TestNginxErrors(t *testing.T) {
	good := `192.0.2.9 - - [22/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1" 200 0 "-" "-"`
	tests := []struct{ line, err string }{
		{`192.0.2.9 - - [22/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1" abc 0 "-" "-"`, `$status: "abc" is not a status`},
		{`192.0.2.9 - - [22/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1" 200 -1 "-" "-"`, `$body_bytes_sent: "-1" is not a number of bytes`},
		{`192.0.2.9 - - [22/Nov/2026:18:46:44] "GET / HTTP/1.1" 200 0 "-" "-"`, `$time_local: "22/Nov/2026:18:46:44" is not a time`},
		{`192.0.2.9 - - [31/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1" 200 0 "-" "-"`, `$time_local: "31/Nov/2026:18:46:44 +0000" is not a time`},
		{`192.0.2.9 - - [22/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1" 200 0 "-" "-`, `does not end with "\"" after $http_user_agent, as the log format does`},
		{`192.0.2.9 - - [22/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1`, `no "\" " after $request at column 45`},
		{`192.0.2.9 [22/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1" 200 0 "-" "-"`, `no " - " after $remote_addr at column 1`},
		{`unix: - - [22/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1" 200 0 "-" "-"`, `$remote_addr: "unix:" is not an IP address`},
		{`{"not":"nginx"}`, `no " - " after $remote_addr at column 1`},
		// The official nginx image's "main" format read as combined.
		{`192.0.2.9 - - [22/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1" 200 0 "-" "curl/8.5.0" "203.0.113.1"`,
			`$http_user_agent holds a quote that nginx would have escaped: does the line have more fields than the log format?`},
	}
	for _, tt := range tests {
		r := nginxReader(t, tt.line+"\n"+good+"\n", logread.NginxOptions{})
		_, err := r.Next()
		if err == nil || !errors.Is(err, logread.ErrMalformed) || err.Error() != "access.log:1: "+tt.err {
			t.Errorf("%s:\n got %v\nwant access.log:1: %s", tt.line, err, tt.err)
			continue
		}
		if rec, err := r.Next(); err != nil || rec.Line != 2 {
			t.Errorf("%s: after the error: %+v, %v", tt.line, rec, err)
		}
		if st := r.Stats(); st.Malformed != 1 || st.Records != 1 || st.Lines != 2 {
			t.Errorf("%s: %+v", tt.line, st)
		}
	}
}

// The format of a server behind a load balancer, with the times and the
// variables limitproxy's keys can use.
const lbFormat = `log_format lb '$remote_addr $realip_remote_addr "$http_x_forwarded_for" [$time_iso8601] $msec '
                  '"$request_method $request_uri $server_protocol" $host $status $bytes_sent $request_time '
                  '"$http_x_api_key" "$cookie_session" $upstream_addr';`

// TestForwardedFor: the client address from X-Forwarded-For, rightmost
// untrusted by default, leftmost on request, the peer when empty.
func TestForwardedFor(t *testing.T) {
	line := func(xff string) string {
		return `10.0.0.2 10.0.0.2 "` + xff + `" [2026-11-22T18:46:44+00:00] 1795373204.250 "GET /api/x?k=1 HTTP/1.1" api.example.com 200 312 0.250 "key1" "s1" 10.1.0.5:8080`
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	tests := []struct {
		xff     string
		pick    logread.Pick
		trusted []netip.Prefix
		want    string
	}{
		{"203.0.113.7", logread.RightmostUntrusted, nil, "203.0.113.7"},
		{"1.1.1.1, 203.0.113.7", logread.RightmostUntrusted, nil, "203.0.113.7"},
		{"1.1.1.1, 203.0.113.7, 10.0.0.9", logread.RightmostUntrusted, nil, "10.0.0.9"},
		{"1.1.1.1, 203.0.113.7, 10.0.0.9", logread.RightmostUntrusted, trusted, "203.0.113.7"},
		{"1.1.1.1,203.0.113.7:4444,[2001:db8:ffff::1]:80", logread.RightmostUntrusted, trusted, "203.0.113.7"},
		{"10.0.0.7, 10.0.0.9", logread.RightmostUntrusted, trusted, "10.0.0.7"},
		{"1.1.1.1, unknown, 10.0.0.9", logread.RightmostUntrusted, trusted, "10.0.0.9"},
		{"unknown", logread.RightmostUntrusted, trusted, "10.0.0.2"},
		{"-", logread.RightmostUntrusted, nil, "10.0.0.2"},
		{"1.1.1.1, 203.0.113.7, 10.0.0.9", logread.Leftmost, nil, "1.1.1.1"},
		{"junk, ::ffff:1.1.1.1, 203.0.113.7", logread.Leftmost, nil, "1.1.1.1"},
		// RFC 7239 elements in X-Forwarded-For are not addresses: the walk
		// stops there as the live proxy's does ($http_forwarded reads
		// them: TestClientVarFollowsLiveRules).
		{`for=1.1.1.1;proto=https, for="[2001:db8::7]:4711";by=10.0.0.1, for=10.0.0.9`, logread.RightmostUntrusted, trusted, "10.0.0.2"},
		{`for=_hidden, 10.0.0.9`, logread.RightmostUntrusted, trusted, "10.0.0.9"},
		{`proto=https;for=1.1.1.1`, logread.Leftmost, nil, "1.1.1.1"},
	}
	for _, tt := range tests {
		o := logread.NginxOptions{LogFormat: lbFormat, ClientVar: "$http_x_forwarded_for", ForwardedFor: tt.pick, TrustedProxies: tt.trusted}
		r := readOne(t, line(tt.xff), o)
		if r.Client != netip.MustParseAddr(tt.want) || r.Peer != netip.MustParseAddr("10.0.0.2") {
			t.Errorf("X-Forwarded-For %q (pick %d, trusted %v): Client %v, Peer %v; want Client %s", tt.xff, tt.pick, tt.trusted, r.Client, r.Peer, tt.want)
		}
	}

	// The rest of that format.
	r := readOne(t, line("203.0.113.7"), logread.NginxOptions{LogFormat: lbFormat, ClientVar: "http_x_forwarded_for"})
	end := time.Unix(1795373204, 250e6).UTC()
	want := logread.Record{
		File: "access.log", Line: 1, Format: logread.Nginx,
		Has:  logread.HasTime | logread.HasStatus | logread.HasBytesSent | logread.HasDuration,
		Time: end.Add(-250 * time.Millisecond), End: end, Resolution: time.Millisecond,
		Client: netip.MustParseAddr("203.0.113.7"), Peer: netip.MustParseAddr("10.0.0.2"),
		Method: "GET", Host: "api.example.com", Target: "/api/x?k=1", Path: "/api/x", RawQuery: "k=1", Proto: "HTTP/1.1",
		Header:    []logread.Field{{Name: "X-Forwarded-For", Value: "203.0.113.7"}, {Name: "X-Api-Key", Value: "key1"}},
		Status:    200,
		BytesSent: 312, Duration: 250 * time.Millisecond,
		Extra: []logread.Field{{Name: "cookie_session", Value: "s1"}, {Name: "upstream_addr", Value: "10.1.0.5:8080"}},
	}
	if !equalRecord(r, want) {
		t.Errorf("\n got %+v\nwant %+v", r, want)
	}
}

// TestNginxTimes: which time wins and what Time is.
func TestNginxTimes(t *testing.T) {
	tests := []struct {
		format, line string
		time, end    time.Time
		res          time.Duration
	}{
		{`$remote_addr [$time_local] "$request" $request_time`, `192.0.2.1 [22/Nov/2026:18:46:44 -0700] "GET / HTTP/1.1" 1.500`,
			time.Date(2026, 11, 23, 1, 46, 42, 500e6, time.UTC), time.Date(2026, 11, 23, 1, 46, 44, 0, time.UTC), time.Second},
		{`$remote_addr [$time_iso8601] "$request"`, `192.0.2.1 [2026-11-22T18:46:44+05:30] "GET / HTTP/1.1"`,
			time.Date(2026, 11, 22, 13, 16, 44, 0, time.UTC), time.Date(2026, 11, 22, 13, 16, 44, 0, time.UTC), time.Second},
		{`$remote_addr [$time_local] $msec "$request" $request_time`, `192.0.2.1 [22/Nov/2026:18:46:44 +0000] 1795373204.999 "GET / HTTP/1.1" 0.000`,
			time.Unix(1795373204, 999e6), time.Unix(1795373204, 999e6), time.Millisecond},
	}
	for _, tt := range tests {
		r := readOne(t, tt.line, logread.NginxOptions{LogFormat: tt.format})
		if !r.Time.Equal(tt.time) || !r.End.Equal(tt.end) || r.Resolution != tt.res || r.Has&logread.HasTime == 0 {
			t.Errorf("%s: Time %v End %v Resolution %v; want %v, %v, %v", tt.line, r.Time, r.End, r.Resolution, tt.time, tt.end, tt.res)
		}
	}
}

// TestNginxVariables: the separate request variables, host precedence and
// escape=json.
func TestNginxVariables(t *testing.T) {
	f := `log_format j escape=json '{"t":"$time_iso8601","a":"$remote_addr","m":"$request_method",'
	      '"u":"$uri","q":"$args","h":"$http_host","s":"$server_name","ua":"$http_user_agent"}';`
	line := `{"t":"2026-11-22T18:46:44+00:00","a":"192.0.2.1","m":"PUT","u":"/a b/é","q":"x=1","h":"Host.example:81","s":"srv","ua":"x \"y\" \\ \u0001"}`
	r := readOne(t, line, logread.NginxOptions{LogFormat: f})
	if r.Method != "PUT" || r.Path != "/a b/é" || r.RawQuery != "x=1" || r.Host != "Host.example:81" || r.Target != "" {
		t.Errorf("%+v", r)
	}
	if ua, _ := r.HeaderValue("User-Agent"); ua != "x \"y\" \\ \x01" {
		t.Errorf("User-Agent %q", ua)
	}
	// $host wins over $http_host; an absolute URI's host over both.
	f2 := `$remote_addr [$time_local] "$request" $host "$http_host" $server_name`
	r = readOne(t, `192.0.2.1 [22/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1" a.example "b.example:8080" c`, logread.NginxOptions{LogFormat: f2})
	if r.Host != "a.example" {
		t.Errorf("Host %q, want $host's", r.Host)
	}
	r = readOne(t, `192.0.2.1 [22/Nov/2026:18:46:44 +0000] "GET http://d.example/ HTTP/1.1" a.example "b.example:8080" c`, logread.NginxOptions{LogFormat: f2})
	if r.Host != "d.example" {
		t.Errorf("Host %q, want the request line's", r.Host)
	}
	r = readOne(t, `192.0.2.1 [22/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1" - "-" c`, logread.NginxOptions{LogFormat: `$remote_addr [$time_local] "$request" $server_name "$http_host" ${server_name}`})
	if r.Host != "" {
		t.Errorf("Host %q, want $http_host's (empty) over $server_name", r.Host)
	}
	// escape=none: the last field may hold anything.
	r = readOne(t, `192.0.2.1 [22/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1" "a "quoted" \x41 ua"`,
		logread.NginxOptions{LogFormat: `log_format n escape=none '$remote_addr [$time_local] "$request" "$http_user_agent"';`})
	if ua, _ := r.HeaderValue("User-Agent"); ua != `a "quoted" \x41 ua` {
		t.Errorf("User-Agent %q", ua)
	}
}

// TestLogFormatErrors: formats that cannot be read by.
func TestLogFormatErrors(t *testing.T) {
	tests := []struct{ format, client, err string }{
		{`$remote_addr$remote_user [$time_local]`, "", "log format: $remote_addr and $remote_user have nothing between them, so a line cannot be split"},
		{`$remote_addr "$request"`, "", "log format has no time variable ($msec, $time_iso8601 or $time_local): requests cannot be replayed in time"},
		{`no variables`, "", "log format: no variables"},
		{`$remote_addr [$time_local] $`, "", `log format: invalid variable name "$"`},
		{`$remote_addr [$time_local] ${oops`, "", "log format: unterminated ${ at byte 27"},
		{`log_format x '$remote_addr [$time_local]`, "", "log_format: unterminated ' string"},
		{`log_format x escape=xml '$remote_addr [$time_local]';`, "", "log_format: unknown escape=xml (default, json or none)"},
		{`log_format x;`, "", "log_format: no format string"},
		{`log_format x '$remote_addr [$time_local]'; more`, "", `log_format: text after ';': "more"`},
		{logread.Combined, "$http_x_forwarded_for", "client variable $http_x_forwarded_for is not in the log format " + strconv.Quote(logread.Combined)},
	}
	for _, tt := range tests {
		_, err := logread.NewNginxReader(strings.NewReader(""), "x", logread.Options{Nginx: logread.NginxOptions{LogFormat: tt.format, ClientVar: tt.client}})
		if err == nil || err.Error() != tt.err {
			t.Errorf("%s:\n got %v\nwant %s", tt.format, err, tt.err)
		}
	}
	f, err := logread.ParseLogFormat("log_format main '$remote_addr - $remote_user [$time_local] \"$request\" '\n    '$status $body_bytes_sent \"$http_referer\" '\n    '\"$http_user_agent\" \"$http_x_forwarded_for\"';")
	if err != nil {
		t.Fatal(err)
	}
	r, err := logread.NewNginxReader(strings.NewReader(`192.0.2.1 - - [22/Nov/2026:18:46:44 +0000] "GET / HTTP/1.1" 200 0 "-" "ua" "203.0.113.1, 198.51.100.1"`+"\n"),
		"x", logread.Options{Nginx: logread.NginxOptions{LogFormat: f.String(), ClientVar: "$http_x_forwarded_for"}})
	if err != nil {
		t.Fatal(err)
	}
	recs, errs := readAll(t, r)
	if len(errs) > 0 || len(recs) != 1 || recs[0].Client != netip.MustParseAddr("198.51.100.1") {
		t.Errorf("%+v %q", recs, errs)
	}
	want := []logread.Field{{Name: "User-Agent", Value: "ua"}, {Name: "X-Forwarded-For", Value: "203.0.113.1, 198.51.100.1"}}
	if !reflect.DeepEqual(recs[0].Header, want) {
		t.Errorf("Header %+v", recs[0].Header)
	}
}

// TestCombinedFixture reads testdata/combined.log: lines from the
// internet as nginx logs them.
func TestCombinedFixture(t *testing.T) {
	f, err := logread.Open("testdata/combined.log", logread.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, errs := readAll(t, f)
	if len(errs) != 1 || errs[0] != `testdata/combined.log:9: no " - " after $remote_addr at column 1` {
		t.Errorf("errors %q", errs)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Client.String()+" "+r.Method+" "+r.Path)
	}
	want := []string{
		"203.0.113.7 GET /",
		"203.0.113.7 GET /static/app.css",
		"2001:db8::42 POST /login",
		"198.51.100.23 GET /api/v1/items",
		"192.0.2.200  ",
		"198.51.100.23 GET /search",
		"203.0.113.7 GET /wp-login.php",
		"192.0.2.201 GET /",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if st := f.Stats(); st != (logread.Stats{Lines: 10, Records: 8, Skipped: 1, Malformed: 1}) {
		t.Errorf("%+v", st)
	}
	if _, err := f.Next(); err != io.EOF {
		t.Error(err)
	}
}

// TestClientVarFollowsLiveRules: with -client-var, the client is taken
// from the logged list by the live proxy's rules (the client-address
// walk of internal/proxy): an X-Forwarded-For list is a list of
// addresses, so an RFC 7239 element in it is not an address and stops
// the walk as it stops the proxy's; a Forwarded list is split at commas
// outside quotes, so a quoted for= holding a comma is one element, not
// an address. Before, the log reader had a walk of its own that read
// both as addresses a client wrote and keyed the request by them.
func TestClientVarFollowsLiveRules(t *testing.T) {
	const format = `$remote_addr "$http_x_forwarded_for" "$http_forwarded" [$time_iso8601] "$request"`
	line := func(xff, fwd string) string {
		return `10.0.0.2 "` + xff + `" "` + fwd + `" [2026-11-22T18:46:44+00:00] "GET /x HTTP/1.1"`
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tt := range []struct {
		clientVar, xff, fwd string
		want                string
	}{
		{"$http_x_forwarded_for", "203.0.113.7, 10.0.0.9", "-", "203.0.113.7"},
		{"$http_x_forwarded_for", "203.0.113.7, for=198.51.100.1, 10.0.0.9", "-", "10.0.0.9"},
		{"$http_x_forwarded_for", "for=198.51.100.1", "-", "10.0.0.2"},
		{"$http_forwarded", "-", "for=203.0.113.7, for=10.0.0.9", "203.0.113.7"},
		{"$http_forwarded", "-", `for=203.0.113.7, for="198.51.100.1, 10.0.0.8", for=10.0.0.9`, "10.0.0.9"},
		{"$http_forwarded", "-", `for=203.0.113.7;proto=https, for="[2001:db8::7]:4711";by=10.0.0.1, for=10.0.0.9`, "2001:db8::7"},
	} {
		o := logread.NginxOptions{LogFormat: format, ClientVar: tt.clientVar, TrustedProxies: trusted}
		r := readOne(t, line(tt.xff, tt.fwd), o)
		if r.Client != netip.MustParseAddr(tt.want) {
			t.Errorf("%s, X-Forwarded-For %q, Forwarded %q: Client %v, want %s", tt.clientVar, tt.xff, tt.fwd, r.Client, tt.want)
		}
	}
}

// TestClientVarTrustedHops: NginxOptions.TrustedHops is [server]
// trusted_hops: the N-th element from the right, whatever its address;
// the peer with fewer elements or a non-address there.
func TestClientVarTrustedHops(t *testing.T) {
	const format = `$remote_addr "$http_x_forwarded_for" [$time_iso8601] "$request"`
	for _, tt := range []struct {
		xff  string
		hops int
		want string
	}{
		{"1.1.1.1, 203.0.113.7, 10.0.0.9", 1, "10.0.0.9"},
		{"1.1.1.1, 203.0.113.7, 10.0.0.9", 2, "203.0.113.7"},
		{"1.1.1.1, 203.0.113.7, 10.0.0.9", 3, "1.1.1.1"},
		{"1.1.1.1, 203.0.113.7, 10.0.0.9", 4, "10.0.0.2"},
		{"junk, 10.0.0.9", 2, "10.0.0.2"},
		{"1.1.1.1", 0, "1.1.1.1"},
	} {
		o := logread.NginxOptions{LogFormat: format, ClientVar: "$http_x_forwarded_for", TrustedHops: tt.hops,
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
		r := readOne(t, `10.0.0.2 "`+tt.xff+`" [2026-11-22T18:46:44+00:00] "GET /x HTTP/1.1"`, o)
		if r.Client != netip.MustParseAddr(tt.want) {
			t.Errorf("X-Forwarded-For %q, trusted_hops %d: Client %v, want %s", tt.xff, tt.hops, r.Client, tt.want)
		}
	}
}
