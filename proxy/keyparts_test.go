package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestKeyedPartTable: how each spelling of a keyed cookie or parameter is
// read, refused or rewritten.
func TestKeyedPartTable(t *testing.T) {
	const amb = "AMBIGUOUS"
	for _, c := range []struct {
		kind            config.KeyKind
		name            string // "" for sid or k
		cookies         []string
		query           string
		reject, rewrite string // the keyed value, "" absent, amb refused
		cookieOut       []string
		queryOut        string
	}{
		// Cookies.
		{kind: config.KeyCookie, cookies: []string{"sid=REAL"}, reject: "REAL", rewrite: "REAL", cookieOut: []string{"sid=REAL"}},
		{kind: config.KeyCookie, cookies: []string{"a=1; sid=REAL; b=2"}, reject: "REAL", rewrite: "REAL", cookieOut: []string{"a=1; sid=REAL; b=2"}},
		{kind: config.KeyCookie, cookies: []string{`sid="REAL"`}, reject: "REAL", rewrite: "REAL", cookieOut: []string{`sid="REAL"`}},
		{kind: config.KeyCookie, cookies: []string{"sid=RE%41L"}, reject: "REAL", rewrite: "REAL", cookieOut: []string{"sid=RE%41L"}},
		{kind: config.KeyCookie, cookies: []string{"sid=a+b%2Bc%20d"}, reject: "a b c d", rewrite: "a b c d", cookieOut: []string{"sid=a+b%2Bc%20d"}},
		{kind: config.KeyCookie, cookies: []string{"sid="}, reject: "", rewrite: "", cookieOut: []string{"sid="}},
		{kind: config.KeyCookie, cookies: []string{"xsid=1; sidx=2"}, reject: "", rewrite: "", cookieOut: []string{"xsid=1; sidx=2"}},
		{kind: config.KeyCookie, cookies: []string{"sid=junk1; sid=REAL"}, reject: amb, rewrite: "REAL", cookieOut: []string{"sid=REAL"}},
		{kind: config.KeyCookie, cookies: []string{"a=1; sid=junk1; b=2; sid=REAL; c=3"}, reject: amb, rewrite: "REAL", cookieOut: []string{"a=1; b=2; sid=REAL; c=3"}},
		{kind: config.KeyCookie, cookies: []string{"sid=junk1", "a=1; sid=REAL"}, reject: amb, rewrite: "REAL", cookieOut: []string{"a=1; sid=REAL"}},
		{kind: config.KeyCookie, cookies: []string{"sid=REAL", "sid=junk1"}, reject: amb, rewrite: "junk1", cookieOut: []string{"sid=junk1"}},
		{kind: config.KeyCookie, cookies: []string{`sid=ju"nk; sid=REAL`}, reject: amb, rewrite: "REAL", cookieOut: []string{"sid=REAL"}},
		{kind: config.KeyCookie, cookies: []string{`sid=REAL"`}, reject: amb, rewrite: "", cookieOut: nil},
		{kind: config.KeyCookie, cookies: []string{`sid=RE AL`}, reject: amb, rewrite: ""},
		{kind: config.KeyCookie, cookies: []string{`sid=RE,AL`}, reject: amb, rewrite: ""},
		{kind: config.KeyCookie, cookies: []string{"sid=RE\\AL"}, reject: amb, rewrite: ""},
		{kind: config.KeyCookie, cookies: []string{"sid; sid=REAL"}, reject: amb, rewrite: "REAL", cookieOut: []string{"sid=REAL"}},
		{kind: config.KeyCookie, cookies: []string{"sid"}, reject: amb, rewrite: ""},
		{kind: config.KeyCookie, cookies: []string{"sid =REAL"}, reject: amb, rewrite: ""},
		{kind: config.KeyCookie, cookies: []string{"SID=junk; sid=REAL"}, reject: amb, rewrite: "REAL", cookieOut: []string{"sid=REAL"}},
		{kind: config.KeyCookie, cookies: []string{"s%69d=junk; sid=REAL"}, reject: amb, rewrite: "REAL", cookieOut: []string{"sid=REAL"}},
		{kind: config.KeyCookie, name: "s_id", cookies: []string{"s.id=junk; s_id=REAL"}, reject: amb, rewrite: "REAL", cookieOut: []string{"s_id=REAL"}},
		{kind: config.KeyCookie, cookies: []string{"sid[x]=junk; sid=REAL"}, reject: amb, rewrite: "REAL", cookieOut: []string{"sid=REAL"}},
		{kind: config.KeyCookie, cookies: []string{"a=x sid=junk; sid=REAL"}, reject: amb, rewrite: "REAL", cookieOut: []string{"sid=REAL"}},
		{kind: config.KeyCookie, cookies: []string{"a=x,sid=junk; sid=REAL; b=2"}, reject: amb, rewrite: "REAL", cookieOut: []string{"sid=REAL; b=2"}},
		{kind: config.KeyCookie, cookies: []string{`a="x; sid=junk"; sid=REAL`}, reject: amb, rewrite: "REAL", cookieOut: []string{`a="x; sid=REAL`}},
		{kind: config.KeyCookie, cookies: []string{"sid=REAL; sid="}, reject: amb, rewrite: "", cookieOut: []string{"sid="}},
		// Queries.
		{kind: config.KeyQuery, query: "k=REAL", reject: "REAL", rewrite: "REAL", queryOut: "k=REAL"},
		{kind: config.KeyQuery, query: "a=1&k=RE%41L+x&b=%zz", reject: "REAL x", rewrite: "REAL x", queryOut: "a=1&k=RE%41L+x&b=%zz"},
		{kind: config.KeyQuery, query: "k%65y=1&kk=2", reject: "", rewrite: "", queryOut: "k%65y=1&kk=2"},
		{kind: config.KeyQuery, query: "k", reject: "", rewrite: "", queryOut: "k"},
		{kind: config.KeyQuery, query: "k=junk1&k=REAL", reject: amb, rewrite: "REAL", queryOut: "k=REAL"},
		{kind: config.KeyQuery, query: "a=1&k=REAL&b=2&k=junk1", reject: amb, rewrite: "junk1", queryOut: "a=1&b=2&k=junk1"},
		{kind: config.KeyQuery, query: "k=%zz1&k=REAL", reject: amb, rewrite: "REAL", queryOut: "k=REAL"},
		{kind: config.KeyQuery, query: "k=%zz1", reject: amb, rewrite: "", queryOut: ""},
		{kind: config.KeyQuery, query: "k=%4", reject: amb, rewrite: ""},
		{kind: config.KeyQuery, query: "%6b=junk&k=REAL", reject: amb, rewrite: "REAL", queryOut: "k=REAL"},
		{kind: config.KeyQuery, query: "%6b=REAL", reject: "REAL", rewrite: "REAL", queryOut: "%6b=REAL"},
		{kind: config.KeyQuery, query: "K=junk&k=REAL", reject: amb, rewrite: "REAL", queryOut: "k=REAL"},
		{kind: config.KeyQuery, query: "k+=junk&k=REAL", reject: amb, rewrite: "REAL", queryOut: "k=REAL"},
		{kind: config.KeyQuery, query: "k%20=junk&k=REAL", reject: amb, rewrite: "REAL", queryOut: "k=REAL"},
		{kind: config.KeyQuery, query: "k[]=junk&k=REAL", reject: amb, rewrite: "REAL", queryOut: "k=REAL"},
		{kind: config.KeyQuery, query: "k=REAL;x", reject: amb, rewrite: "", queryOut: ""},
		{kind: config.KeyQuery, query: "x=1;k=junk&k=REAL", reject: amb, rewrite: "REAL", queryOut: "k=REAL"},
		{kind: config.KeyQuery, query: "k=&k=REAL", reject: amb, rewrite: "REAL", queryOut: "k=REAL"},
		{kind: config.KeyQuery, query: "k&k=REAL", reject: amb, rewrite: "REAL", queryOut: "k=REAL"},
	} {
		name := "sid"
		if c.kind == config.KeyQuery {
			name = "k"
		}
		if c.name != "" {
			name = c.name
		}
		part := config.KeyPart{Kind: c.kind, Name: name}
		for _, mode := range []config.AmbiguousMode{config.AmbiguousReject, config.AmbiguousRewrite} {
			r := &http.Request{Header: http.Header{}, URL: &url.URL{RawQuery: c.query}}
			if c.cookies != nil {
				r.Header["Cookie"] = append([]string(nil), c.cookies...)
			}
			v, st := keyedPart(r, part, mode)
			got := v
			if st == partAmbiguous {
				got = amb
			}
			want := c.reject
			if mode == config.AmbiguousRewrite {
				want = c.rewrite
			}
			if got != want || (st == partPresent) != (want != "" && want != amb) {
				t.Errorf("%s %q %q, %s: %q (state %d), want %q", part, c.cookies, c.query, mode, got, st, want)
			}
			if mode != config.AmbiguousRewrite {
				continue
			}
			rewriteParts(r, []config.KeyPart{part})
			if c.kind == config.KeyCookie && !slices.Equal(r.Header["Cookie"], c.cookieOut) {
				t.Errorf("%s %q rewritten: %q, want %q", part, c.cookies, r.Header["Cookie"], c.cookieOut)
			}
			if c.kind == config.KeyQuery && r.URL.RawQuery != c.queryOut {
				t.Errorf("%s %q rewritten: %q, want %q", part, c.query, r.URL.RawQuery, c.queryOut)
			}
			// Rewritten, the request is unambiguous and keyed alike.
			if v2, st2 := keyedPart(r, part, config.AmbiguousReject); v2 != v || st2 == partAmbiguous {
				t.Errorf("%s %q %q rewritten: keyed %q (state %d), want %q", part, c.cookies, c.query, v2, st2, v)
			}
		}
	}
}

// ambiguousConfig limits /q by query:k, /c by cookie:sid, and /own by a
// limit of its own on query:k beside a per-address one, with a
// [policy.concurrency] on the policy's own key cookie:sid: 2 an hour each.
// The %s is a [server] table, or "" for the defaults.
const ambiguousConfig = `
%s
[[upstream]]
name = "up"
targets = ["http://127.0.0.1:1"]

[[policy]]
name = "q"
upstream = "up"
match = { path = "/q" }
key = ["query:k"]
on_missing = "reject"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 2
  window = "1h"

[[policy]]
name = "c"
upstream = "up"
match = { path = "/c" }
key = ["cookie:sid"]
on_missing = "reject"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 2
  window = "1h"

[[policy]]
name = "own"
upstream = "up"
match = { path = "/own" }
key = ["cookie:sid"]
on_missing = "reject"
  [policy.concurrency]
  limit = 10
  [[policy.limits]]
  key = ["query:k"]
  algorithm = "sliding_log"
  limit = 2
  window = "1h"
  [[policy.limits]]
  key = ["ip"]
  algorithm = "sliding_log"
  limit = 1000
  window = "1h"

[[policy]]
name = "default"
upstream = "up"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 10000
  window = "1h"
`

const rewriteServer = "[server]\nambiguous_key_parts = \"rewrite\""

// keyEcho is an upstream that records, per request, what a Go server
// reads of the key parts (r.Cookie, Query().Get) and the Cookie field
// lines and query it received.
type keyEcho struct {
	*upstream
	mu   sync.Mutex
	seen []echoed
}

type echoed struct {
	path, cookie, query string // as Go reads sid and k
	cookies             []string
	rawQuery            string
}

func newKeyEcho(t *testing.T) *keyEcho {
	e := &keyEcho{}
	e.upstream = newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		s := echoed{path: r.URL.Path, query: r.URL.Query().Get("k"), cookies: r.Header["Cookie"], rawQuery: r.URL.RawQuery}
		if c, err := r.Cookie("sid"); err == nil {
			s.cookie = c.Value
		}
		e.mu.Lock()
		e.seen = append(e.seen, s)
		e.mu.Unlock()
	})
	return e
}

func (e *keyEcho) all() []echoed {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]echoed(nil), e.seen...)
}

// ambiguousProbes are requests, for i, that name a keyed part more than
// once or malformed, with "real" where an upstream may read it: target
// and header lines.
func ambiguousProbes(path string, i int) [][]string {
	q := func(query string, hdr ...string) []string {
		return append([]string{"GET " + path + "?" + query + " HTTP/1.1"}, hdr...)
	}
	c := func(hdr ...string) []string { return append([]string{"GET " + path + "?k=real HTTP/1.1"}, hdr...) }
	var out [][]string
	if path != "/c" {
		out = append(out,
			q(fmt.Sprintf("k=junk%d&k=real", i), "Cookie: sid=real"),
			q(fmt.Sprintf("k=%%zz%d&k=real", i), "Cookie: sid=real"),
			q(fmt.Sprintf("%%6b=junk%d&k=real", i), "Cookie: sid=real"),
			q(fmt.Sprintf("K=junk%d&k=real", i), "Cookie: sid=real"),
			q(fmt.Sprintf("k+=junk%d&k=real", i), "Cookie: sid=real"),
			q(fmt.Sprintf("k[]=junk%d&k=real", i), "Cookie: sid=real"),
			q(fmt.Sprintf("x=%d;k=junk&k=real", i), "Cookie: sid=real"),
			q(fmt.Sprintf("k=real;x=%d", i), "Cookie: sid=real"),
			q(fmt.Sprintf("k=real%%zz%d", i), "Cookie: sid=real"),
		)
	}
	if path != "/q" {
		out = append(out,
			c(fmt.Sprintf("Cookie: sid=junk%d; sid=real", i)),
			c(fmt.Sprintf("Cookie: sid=junk%d", i), "Cookie: sid=real"),
			c(fmt.Sprintf(`Cookie: sid="junk%d; sid=real`, i)),
			c(fmt.Sprintf("Cookie: sid=junk %d; sid=real", i)),
			c(fmt.Sprintf("Cookie: SID=junk%d; sid=real", i)),
			c(fmt.Sprintf("Cookie: s%%69d=junk%d; sid=real", i)),
			c(fmt.Sprintf("Cookie: a=%d sid=junk; sid=real", i)),
			c(fmt.Sprintf("Cookie: a=%d,sid=junk; sid=real", i)),
			c("Cookie: sid", fmt.Sprintf("Cookie: x=%d; sid=real", i)),
		)
	}
	return out
}

// TestAmbiguousKeyPartsRefused: by default, a request whose keyed cookie
// or query parameter is repeated or malformed — however it is spelled —
// is answered 400 naming the part, logged as invalid, never counted nor
// forwarded; the client's real value keeps its whole budget. Keys of
// limits of their own and the concurrency key alike.
func TestAmbiguousKeyPartsRefused(t *testing.T) {
	up := newKeyEcho(t)
	_, addr, _, logs := startLogged(t, fmt.Sprintf(ambiguousConfig, ""), up.upstream)
	for _, path := range []string{"/q", "/c", "/own"} {
		for i := range 3 {
			for _, lines := range ambiguousProbes(path, i) {
				st, body := rawDo(t, addr, lines...)
				if st != 400 || !strings.Contains(body, "repeated or malformed") || !strings.Contains(body, "cookie:sid") && !strings.Contains(body, "query:k") {
					t.Errorf("%q: %d %s, want 400 naming the key part", lines, st, body)
				}
			}
		}
		for i, want := range []int{200, 200, 429} {
			if st, body := rawDo(t, addr, "GET "+path+"?k=real HTTP/1.1", "Cookie: a=1; sid=real; b=2"); st != want {
				t.Errorf("%s: legitimate request %d: %d %s, want %d", path, i, st, body, want)
			}
		}
	}
	for _, s := range up.all() {
		if s.cookie != "real" && s.path != "/q" || s.query != "real" && s.path != "/c" || strings.Contains(strings.Join(s.cookies, ";")+s.rawQuery, "junk") {
			t.Errorf("upstream read %+v", s)
		}
	}
	if n := len(up.all()); n != 6 {
		t.Errorf("upstream received %d requests, want the 6 admitted", n)
	}
	invalid := 0
	for _, e := range logs.FilterMessage("request").All() {
		if e.ContextMap()["decision"] == Invalid.String() {
			invalid++
		}
	}
	if want := 3 * (len(ambiguousProbes("/q", 0)) + len(ambiguousProbes("/c", 0)) + len(ambiguousProbes("/own", 0))); invalid != want {
		t.Errorf("%d requests logged invalid, want %d", invalid, want)
	}
}

// TestAmbiguousKeyPartsRewritten: with ambiguous_key_parts = "rewrite", a
// repeated or malformed keyed part is keyed by its last well-formed value
// and the upstream receives that one alone, the other cookies and
// parameters as sent: rotating junk before the real value gets no fresh
// budget.
func TestAmbiguousKeyPartsRewritten(t *testing.T) {
	up := newKeyEcho(t)
	_, addr, _, _ := startLogged(t, fmt.Sprintf(ambiguousConfig, rewriteServer), up.upstream)
	for _, path := range []string{"/q", "/c", "/own"} {
		admitted := 0
		for i := range 3 {
			for _, lines := range ambiguousProbes(path, i) {
				st, _ := rawDo(t, addr, lines...)
				switch {
				case st == 200:
					admitted++
				case st == 429:
				case st == 400 && (strings.Contains(lines[0], "k=real;") || strings.Contains(lines[0], "%zz"+fmt.Sprint(i)+" ")):
					// The only k is malformed: removed, the key part is
					// missing (on_missing = "reject").
				default:
					t.Errorf("%q: %d", lines, st)
				}
			}
		}
		if admitted != 2 {
			t.Errorf("%s: %d admitted, want 2: junk must not make a fresh key", path, admitted)
		}
	}
	for _, s := range up.all() {
		if s.path != "/c" && (s.query != "real" || strings.Count("&"+s.rawQuery, "&k=") != 1) {
			t.Errorf("upstream received the query %q, read k=%q; want k=real once", s.rawQuery, s.query)
		}
		if s.path != "/q" && (s.cookie != "real" || strings.Count(strings.Join(s.cookies, ";"), "sid") != 1) {
			t.Errorf("upstream received the cookies %q, read sid=%q; want sid=real once", s.cookies, s.cookie)
		}
	}
	// Other parameters and cookies are kept byte for byte.
	st, _ := rawDo(t, addr, "GET /own?a=%zz&k=junk&b=1;2&&k=real&c HTTP/1.1", "Cookie: a=\"x\"; sid=junk;b=2", "Cookie: sid=real ; c=3")
	if st != 429 {
		t.Errorf("after the budget: %d, want 429", st)
	}
	up2 := newKeyEcho(t)
	_, addr2, _, _ := startLogged(t, fmt.Sprintf(ambiguousConfig, rewriteServer), up2.upstream)
	if st, _ := rawDo(t, addr2, "GET /own?a=%zz&k=junk&b=1;2&&k=real&c HTTP/1.1", "Cookie: a=\"x\"; sid=junk;b=2", "Cookie: sid=real ; c=3"); st != 200 {
		t.Fatalf("status %d", st)
	}
	got := up2.all()[0]
	if got.rawQuery != "a=%zz&b=1;2&&k=real&c" || !slices.Equal(got.cookies, []string{`a="x";b=2`, "sid=real ; c=3"}) {
		t.Errorf("upstream received %q and %q", got.rawQuery, got.cookies)
	}
}

// rawDo sends one hand-written HTTP/1.1 request (request line and header
// lines) and returns the status and body.
func rawDo(t *testing.T, addr string, lines ...string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	req := strings.Join(lines, "\r\n") + "\r\nHost: example.com\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", lines, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestEvaluateAmbiguousKeyParts: the replay evaluator decides a request
// with an ambiguous key part as the live proxy does, in both modes: each
// probe and the legitimate requests after them get the same status from
// both.
func TestEvaluateAmbiguousKeyParts(t *testing.T) {
	for _, server := range []string{"", rewriteServer} {
		src := fmt.Sprintf(ambiguousConfig, server)
		up := newKeyEcho(t)
		_, addr, _, _ := startLogged(t, src, up.upstream)
		cfg, err := config.Parse("test.toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		set, err := policy.Compile(cfg, memstore.New(memstore.Options{VirtualQueues: true}), t0)
		if err != nil {
			t.Fatal(err)
		}
		ev := NewEvaluator(set, EvaluatorOptions{})
		now := t0
		for _, path := range []string{"/q", "/c", "/own"} {
			reqs := ambiguousProbes(path, 0)
			for range 3 {
				reqs = append(reqs, []string{"GET " + path + "?k=real HTTP/1.1", "Cookie: a=1; sid=real"})
			}
			reqs = append(reqs, ambiguousProbes(path, 1)...)
			for _, lines := range reqs {
				live, _ := rawDo(t, addr, lines...)
				r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(strings.Join(lines, "\r\n") + "\r\nHost: example.com\r\n\r\n")))
				if err != nil {
					t.Fatal(err)
				}
				r.RemoteAddr = "127.0.0.1:1234"
				now = now.Add(time.Millisecond)
				v := ev.Evaluate(r, now)
				status := v.Status
				if status == 0 {
					status = 200
				}
				if status != live || live == 400 && v.Decision != Invalid && v.Decision != Rejected {
					t.Errorf("%q %q: evaluated %d (%s), live %d", server, lines, status, v.Decision, live)
				}
				if probe := lines[len(lines)-1] != "Cookie: a=1; sid=real"; server == "" && probe && (status != 400 || v.Decision != Invalid) {
					t.Errorf("%q: evaluated %d (%s), want 400 (invalid)", lines, status, v.Decision)
				}
			}
		}
	}
}

// h2Do sends one GET over a fresh HTTP/2 connection with prior knowledge,
// written frame by frame: path and the given header fields in that
// order, repeated names (cookie crumbs) as separate fields. It returns the
// status and the body.
func h2Do(t *testing.T, addr, path string, fields ...[2]string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range append([][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "example.com"}, {":path", path}}, fields...) {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	status := 0
	var body strings.Builder
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == ":status" {
			status, _ = strconv.Atoi(f.Value)
		}
	})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("%s %q: %v", path, fields, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
				t.Fatal(err)
			}
			if f.StreamEnded() {
				return status, body.String()
			}
		case *http2.DataFrame:
			body.Write(f.Data())
			if f.StreamEnded() {
				return status, body.String()
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("%s %q: stream reset: %v", path, fields, f.ErrCode)
		case *http2.GoAwayFrame:
			t.Fatalf("%s %q: GOAWAY %v", path, fields, f.ErrCode)
		}
	}
}

// h2Probes are HTTP/2 requests, for i, whose keyed cookie comes in
// several cookie fields (crumbs, which the server joins) or whose keyed
// parameter is repeated in :path.
func h2Probes(i int) []struct {
	path   string
	fields [][2]string
} {
	ck := func(vs ...string) [][2]string {
		var f [][2]string
		for _, v := range vs {
			f = append(f, [2]string{"cookie", v})
		}
		return f
	}
	j := fmt.Sprint(i)
	return []struct {
		path   string
		fields [][2]string
	}{
		{"/c", ck("sid=junk"+j, "sid=real")},
		{"/c", ck("a=1", "sid=junk"+j, "b=2", "sid=real")},
		{"/c", ck("sid=junk" + j + "; sid=real")},
		{"/c", ck("SID=junk"+j, "sid=real")},
		{"/c", ck(`sid="junk`+j, "sid=real")},
		{"/c", ck("a="+j+" sid=junk", "sid=real")},
		{"/own?k=real", ck("sid=junk"+j, "sid=real")},
		{"/q?k=junk" + j + "&k=real", nil},
		{"/q?k=%zz" + j + "&k=real", nil},
		{"/q?%6b=junk" + j + "&k=real", nil},
		{"/own?k=junk" + j + "&k=real", ck("sid=real")},
	}
}

// TestAmbiguousKeyPartsH2: over HTTP/2 the same: cookie crumbs with the
// keyed name in several fields, or a repeated parameter, are refused by
// default; with rewrite they count under the real value, 2 admitted per
// path whatever the junk, and the upstream reads it alone.
func TestAmbiguousKeyPartsH2(t *testing.T) {
	t.Run("reject", func(t *testing.T) {
		up := newKeyEcho(t)
		_, addr, _, _ := startLogged(t, fmt.Sprintf(ambiguousConfig, ""), up.upstream)
		for i := range 3 {
			for _, p := range h2Probes(i) {
				if st, body := h2Do(t, addr, p.path, p.fields...); st != 400 || !strings.Contains(body, "repeated or malformed") {
					t.Errorf("%s %q: %d %s, want 400", p.path, p.fields, st, body)
				}
			}
		}
		for _, path := range []string{"/c", "/q?k=real", "/own?k=real"} {
			for i, want := range []int{200, 200, 429} {
				if st, _ := h2Do(t, addr, path, [2]string{"cookie", "a=1"}, [2]string{"cookie", "sid=real"}); st != want {
					t.Errorf("%s: legitimate request %d: %d, want %d", path, i, st, want)
				}
			}
		}
		if n := len(up.all()); n != 6 {
			t.Errorf("upstream received %d requests, want 6", n)
		}
	})
	t.Run("rewrite", func(t *testing.T) {
		up := newKeyEcho(t)
		_, addr, _, _ := startLogged(t, fmt.Sprintf(ambiguousConfig, rewriteServer), up.upstream)
		admitted := map[string]int{}
		for i := range 4 {
			for _, p := range h2Probes(i) {
				st, _ := h2Do(t, addr, p.path, p.fields...)
				if st == 200 {
					path, _, _ := strings.Cut(p.path, "?")
					admitted[path]++
				} else if st != 429 {
					t.Errorf("%s %q: %d, want 200 or 429", p.path, p.fields, st)
				}
			}
		}
		if admitted["/c"] != 2 || admitted["/q"] != 2 || admitted["/own"] != 2 {
			t.Errorf("admitted %v, want 2 per path: junk must not make a fresh key", admitted)
		}
		for _, s := range up.all() {
			if s.path != "/q" && (s.cookie != "real" || strings.Count(strings.Join(s.cookies, ";"), "sid") != 1) {
				t.Errorf("upstream received the cookies %q, read sid=%q; want sid=real once", s.cookies, s.cookie)
			}
			if s.path != "/c" && (s.query != "real" || strings.Count("&"+s.rawQuery, "&k=") != 1) {
				t.Errorf("upstream received the query %q, read k=%q; want k=real once", s.rawQuery, s.query)
			}
		}
	})
}

// FuzzRewriteKeyParts: whatever the Cookie field lines and the query, a
// request rewritten for its cookie and query parts is unambiguous and
// keyed as before the rewrite, and a request that was unambiguous is left
// byte for byte as it was.
func FuzzRewriteKeyParts(f *testing.F) {
	f.Add("sid=junk; sid=REAL", "a=1", "k=%zz&k=REAL;x&K=1")
	f.Add(`a="x; sid=y"; s%69d=1`, "sid", "k[]=1&%6b=2&k+=3&k=4")
	f.Add("a=1; sid=REAL; b=2", "", "a=1&k=RE%41L")
	f.Fuzz(func(t *testing.T, line1, line2, query string) {
		r := &http.Request{Header: http.Header{"Cookie": {line1, line2}}, URL: &url.URL{RawQuery: query}}
		parts := []config.KeyPart{{Kind: config.KeyCookie, Name: "sid"}, {Kind: config.KeyQuery, Name: "k"}}
		var before [2]string
		var states [2]partState
		for i, p := range parts {
			before[i], states[i] = keyedPart(r, p, config.AmbiguousRewrite)
		}
		_, st0 := keyedPart(r, parts[0], config.AmbiguousReject)
		_, st1 := keyedPart(r, parts[1], config.AmbiguousReject)
		rewriteParts(r, parts)
		for i, p := range parts {
			v, st := keyedPart(r, p, config.AmbiguousReject)
			if st == partAmbiguous || v != before[i] || st != states[i] {
				t.Fatalf("%s of %q %q %q rewritten to %q %q: %q (state %d), keyed %q (state %d) before",
					p, line1, line2, query, r.Header["Cookie"], r.URL.RawQuery, v, st, before[i], states[i])
			}
		}
		if st0 != partAmbiguous && st1 != partAmbiguous {
			if !slices.Equal(r.Header["Cookie"], []string{line1, line2}) || r.URL.RawQuery != query {
				t.Fatalf("unambiguous %q %q %q rewritten to %q %q", line1, line2, query, r.Header["Cookie"], r.URL.RawQuery)
			}
		}
	})
}

// TestKeyedPartAllocs: reading an unambiguous cookie or parameter
// allocates nothing.
func TestKeyedPartAllocs(t *testing.T) {
	r := &http.Request{Header: http.Header{"Cookie": {"a=1; sid=REAL; b=2"}}, URL: &url.URL{RawQuery: "a=1&k=REAL&b=2"}}
	for _, p := range []config.KeyPart{{Kind: config.KeyCookie, Name: "sid"}, {Kind: config.KeyQuery, Name: "k"}} {
		if n := testing.AllocsPerRun(100, func() { keyedPart(r, p, config.AmbiguousReject) }); n != 0 {
			t.Errorf("%s: %v allocations, want 0", p, n)
		}
	}
}

// TestAmbiguousAfterMissingPart: a keyed cookie or query parameter sent
// ambiguously is refused even when an earlier key part is missing and
// on_missing settles the key (skip, reject or ip): the request must not
// go on, keyed or not, with a part its upstream may read otherwise.
func TestAmbiguousAfterMissingPart(t *testing.T) {
	s := &config.Server{AmbiguousKeyParts: config.AmbiguousReject}
	parts := []config.KeyPart{{Kind: config.KeyHeader, Name: "X-User"}, {Kind: config.KeyCookie, Name: "sid"}, {Kind: config.KeyQuery, Name: "k"}}
	for _, om := range []config.OnMissing{config.MissingSkip, config.MissingReject, config.MissingIP, config.MissingShared} {
		for _, c := range []struct {
			target, cookie string
			want           keyResult
		}{
			{"/?k=1", "sid=junk; sid=REAL", keyInvalid},
			{"/?k=1&k=2", "sid=REAL", keyInvalid},
			{"/?k=%zz", "sid=REAL", keyInvalid},
		} {
			r := httptest.NewRequest("GET", c.target, nil)
			r.RemoteAddr = "203.0.113.7:1"
			r.Header.Set("Cookie", c.cookie)
			if _, res := keyOf(r, parts, om, s); res != c.want {
				t.Errorf("on_missing %s, %s with Cookie %q: result %d, want %d (refused)", om, c.target, c.cookie, res, c.want)
			}
		}
		// Unambiguous: on_missing decides, as before.
		r := httptest.NewRequest("GET", "/?k=1", nil)
		r.RemoteAddr = "203.0.113.7:1"
		r.Header.Set("Cookie", "sid=REAL")
		want := map[config.OnMissing]keyResult{config.MissingSkip: keySkip, config.MissingReject: keyReject, config.MissingIP: keyOK, config.MissingShared: keyOK}[om]
		if _, res := keyOf(r, parts, om, s); res != want {
			t.Errorf("on_missing %s, unambiguous: result %d, want %d", om, res, want)
		}
	}
}

// TestNulInKeyedNameIsAmbiguous: PHP reads a parameter or cookie name only up
// to a NUL byte (php_register_variable_ex walks the name as a C string),
// so ?k=FRESH&k%00=REAL is k=REAL to $_GET (the last) and
// Cookie: sid%00=REAL; sid=FRESH is sid=REAL to $_COOKIE (the first).
// Keyed by FRESH, a client would be a fresh key on each request while a
// PHP upstream serves REAL: such a request is ambiguous, and rewritten
// it keeps the one occurrence it was keyed by.
func TestNulInKeyedNameIsAmbiguous(t *testing.T) {
	for _, c := range []struct {
		kind      config.KeyKind
		cookies   []string
		query     string
		rewrite   string
		cookieOut []string
		queryOut  string
	}{
		{kind: config.KeyQuery, query: "k=FRESH&k%00=REAL", rewrite: "FRESH", queryOut: "k=FRESH"},
		{kind: config.KeyQuery, query: "k%00junk=REAL&k=FRESH", rewrite: "FRESH", queryOut: "k=FRESH"},
		{kind: config.KeyQuery, query: "k%00=REAL", rewrite: "", queryOut: ""},
		{kind: config.KeyCookie, cookies: []string{"sid%00=REAL; sid=FRESH"}, rewrite: "FRESH", cookieOut: []string{"sid=FRESH"}},
		{kind: config.KeyCookie, cookies: []string{"sid%00x=REAL; a=1", "sid=FRESH"}, rewrite: "FRESH", cookieOut: []string{"a=1", "sid=FRESH"}},
	} {
		name := "sid"
		if c.kind == config.KeyQuery {
			name = "k"
		}
		part := config.KeyPart{Kind: c.kind, Name: name}
		req := func() *http.Request {
			r := &http.Request{Header: http.Header{}, URL: &url.URL{RawQuery: c.query}}
			if c.cookies != nil {
				r.Header["Cookie"] = slices.Clone(c.cookies)
			}
			return r
		}
		if v, st := keyedPart(req(), part, config.AmbiguousReject); st != partAmbiguous {
			t.Errorf("%s %q %q: keyed %q (state %d), want refused as ambiguous", part, c.cookies, c.query, v, st)
		}
		r := req()
		v, _ := keyedPart(r, part, config.AmbiguousRewrite)
		if v != c.rewrite {
			t.Errorf("%s %q %q rewrite: keyed %q, want %q", part, c.cookies, c.query, v, c.rewrite)
		}
		rewriteParts(r, []config.KeyPart{part})
		if c.kind == config.KeyCookie && !slices.Equal(r.Header["Cookie"], c.cookieOut) {
			t.Errorf("%s %q rewritten: %q, want %q", part, c.cookies, r.Header["Cookie"], c.cookieOut)
		}
		if c.kind == config.KeyQuery && r.URL.RawQuery != c.queryOut {
			t.Errorf("%s %q rewritten: %q, want %q", part, c.query, r.URL.RawQuery, c.queryOut)
		}
	}
}
