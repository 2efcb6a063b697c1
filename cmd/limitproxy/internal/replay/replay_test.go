package replay

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay/logread"
	"github.com/limitproxy/limitproxy/proxy"
)

// fake decides as a small proxy would: /bad… is invalid, paths outside
// /api and /web unmatched; /api and /web are policies keyed by client
// address that admit limit requests per key and second, the rest of /web
// queued, the rest of /api rejected. It records what it was asked.
type fake struct {
	limit  int
	counts map[string]int
	calls  []string // "evaluate PATH @T" and "answer PATH STATUS COST @T"
}

func newFake(limit int) *fake { return &fake{limit: limit, counts: map[string]int{}} }

// ipKey builds a key as proxy does for key = ["ip"].
func ipKey(ip string) string { return strconv.Itoa(len(ip)) + ":" + ip + ";" }

func (f *fake) Evaluate(r *http.Request, now time.Time) proxy.Verdict {
	f.calls = append(f.calls, fmt.Sprintf("evaluate %s @%s", r.URL.Path, now.UTC().Format("15:04:05.000")))
	var policy string
	switch {
	case strings.HasPrefix(r.URL.Path, "/bad"):
		return proxy.Verdict{Decision: proxy.Invalid, Status: http.StatusBadRequest}
	case strings.HasPrefix(r.URL.Path, "/api"):
		policy = "api"
	case strings.HasPrefix(r.URL.Path, "/web"):
		policy = "web"
	default:
		return proxy.Verdict{Decision: proxy.Unmatched, Status: http.StatusNotFound}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		panic("RemoteAddr " + r.RemoteAddr + ": " + err.Error())
	}
	key := ipKey(host)
	ck := policy + key + strconv.FormatInt(now.Unix(), 10)
	f.counts[ck]++
	switch {
	case f.counts[ck] <= f.limit:
		return proxy.Verdict{Policy: policy, Decision: proxy.Allowed, Key: key}
	case policy == "web":
		return proxy.Verdict{Policy: policy, Decision: proxy.Queued, Key: key, Delay: time.Second}
	}
	return proxy.Verdict{Policy: policy, Decision: proxy.Rejected, Key: key, Status: http.StatusTooManyRequests}
}

func (f *fake) Answer(v proxy.Verdict, status int, cost int64, end time.Time) {
	f.calls = append(f.calls, fmt.Sprintf("answer %s %d %d @%s", v.Policy, status, cost, end.UTC().Format("15:04:05.000")))
}

// replayString replays log (read as o says) against the fakes, named
// a.toml and b.toml, with a fixed secret.
func replayString(t *testing.T, log string, o logread.Options, raw bool, fakes ...*fake) (*Report, []error) {
	t.Helper()
	r, err := logread.NewReader(strings.NewReader(log), "test.log", o)
	if err != nil {
		t.Fatal(err)
	}
	var sides []*side
	for i, f := range fakes {
		sides = append(sides, newSide(string(rune('a'+i))+".toml", f, []string{"api", "web"}))
	}
	e := newEngine(sides, 3, raw, []byte("secret"))
	e.logs = []string{"test.log"}
	var lineErrs []error
	if err := e.replay(context.Background(), logread.Merge(logread.MergeOptions{}, r), func(err error) { lineErrs = append(lineErrs, err) }); err != nil {
		t.Fatal(err)
	}
	return e.report(), lineErrs
}

// combined writes one combined-format line.
func combined(ip string, sec int, method, target string, status int) string {
	ts := time.Date(2026, 11, 22, 18, 0, sec, 0, time.UTC).Format("02/Jan/2006:15:04:05 -0700")
	return fmt.Sprintf("%s - - [%s] \"%s %s HTTP/1.1\" %d 100 \"-\" \"curl/8.5.0\"\n", ip, ts, method, target, status)
}

// testLog: in second 0, 203.0.113.7 sends 5 to /api and 198.51.100.1
// sends 2; in second 1, 203.0.113.7 sends 3 to /web; then one each of
// unmatched, invalid, a TLS handshake and a malformed line.
func testLog() string {
	var b strings.Builder
	for range 5 {
		b.WriteString(combined("203.0.113.7", 0, "GET", "/api/items?page=2", 200))
	}
	for range 2 {
		b.WriteString(combined("198.51.100.1", 0, "POST", "/api/orders", 201))
	}
	for range 3 {
		b.WriteString(combined("203.0.113.7", 1, "GET", "/web/", 200))
	}
	b.WriteString(combined("198.51.100.1", 2, "GET", "/favicon.ico", 404))
	b.WriteString(combined("198.51.100.1", 2, "GET", "/bad/../x", 400))
	b.WriteString(`192.0.2.200 - - [22/Nov/2026:18:00:02 +0000] "\x16\x03\x01\x00" 400 157 "-" "-"` + "\n")
	b.WriteString("this is not a log line\n")
	return b.String()
}

func TestCounts(t *testing.T) {
	rep, lineErrs := replayString(t, testLog(), logread.Options{}, true, newFake(2))
	if len(lineErrs) != 1 || !errors.Is(lineErrs[0], logread.ErrMalformed) || !strings.HasPrefix(lineErrs[0].Error(), "test.log:14: ") {
		t.Errorf("line errors = %v, want one at test.log:14", lineErrs)
	}
	wantRead := ReadStats{Lines: 14, Replayed: 12, Malformed: 1, NotRequests: 1}
	if rep.Read != wantRead {
		t.Errorf("Read = %+v, want %+v", rep.Read, wantRead)
	}
	want := map[string]Counts{
		"api":         {Requests: 7, Allowed: 4, Rejected: 3},
		"web":         {Requests: 3, Allowed: 2, Queued: 1},
		"(unmatched)": {Requests: 1, Unmatched: 1},
		"(invalid)":   {Requests: 1, Invalid: 1},
	}
	var names []string
	for _, p := range rep.Policies {
		names = append(names, p.rowName())
		if got := p.Results[0].Counts; got != want[p.rowName()] {
			t.Errorf("%s: %+v, want %+v", p.rowName(), got, want[p.rowName()])
		}
	}
	if want := []string{"api", "web", "(unmatched)", "(invalid)"}; !reflect.DeepEqual(names, want) {
		t.Errorf("rows %q, want %q", names, want)
	}
	wantTop := []KeyCount{{Key: "203.0.113.7", Count: 3}}
	if got := rep.Policies[0].Results[0].TopRejected; !reflect.DeepEqual(got, wantTop) {
		t.Errorf("api's top rejected = %+v, want %+v", got, wantTop)
	}
	if got := rep.Policies[1].Results[0].TopRejected; len(got) != 0 {
		t.Errorf("web's top rejected = %+v, want none", got)
	}
	wantFrom := time.Date(2026, 11, 22, 18, 0, 0, 0, time.UTC)
	if !rep.From.Equal(wantFrom) || !rep.To.Equal(wantFrom.Add(2*time.Second)) {
		t.Errorf("From, To = %v, %v", rep.From, rep.To)
	}
}

func TestHashedKeys(t *testing.T) {
	rep, _ := replayString(t, testLog(), logread.Options{}, false, newFake(2))
	// The key hash: HMAC-SHA-256 of the stored key, as the admin API's.
	m := hmac.New(sha256.New, []byte("secret"))
	m.Write([]byte(proxy.StoreKey(ipKey("203.0.113.7"))))
	want := hex.EncodeToString(m.Sum(nil))[:16]
	got := rep.Policies[0].Results[0].TopRejected
	if len(got) != 1 || got[0].Key != want || got[0].Count != 3 {
		t.Errorf("top rejected = %+v, want key %s count 3", got, want)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text.String(), "203.0.113.7") {
		t.Errorf("a raw key in the hashed report:\n%s", text.String())
	}
}

func TestShowKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		raw  bool
		want string
	}{
		{ipKey("203.0.113.7"), true, "203.0.113.7"},
		{ipKey("203.0.113.7") + "5:alice;", true, "203.0.113.7 alice"},
		{"", true, "(all clients)"},
		{"", false, "(all clients)"},
		{noKey, true, "(no key)"},
		{noKey, false, "(no key)"},
	} {
		if got := showKey(tc.key, tc.raw, proxy.NewKeyHasher([]byte("s"))); got != tc.want {
			t.Errorf("showKey(%q, %v) = %q, want %q", tc.key, tc.raw, got, tc.want)
		}
	}
	if got := showKey(ipKey("203.0.113.7"), false, proxy.NewKeyHasher([]byte("s"))); len(got) != 16 {
		t.Errorf("hashed key %q: want 16 hex digits", got)
	}
	// A request refused for lacking a key part (400, no key) counts under
	// noKey, not under the empty key of key = [].
	if got := keyOf(&proxy.Verdict{Decision: proxy.Rejected, Status: 400}); got != noKey {
		t.Errorf("keyOf(400, no key) = %q", got)
	}
	if got := keyOf(&proxy.Verdict{Decision: proxy.Rejected, Status: 429}); got != "" {
		t.Errorf("keyOf(429, key []) = %q", got)
	}
}

// jsonLine writes a limitproxy access line ending at end after d.
func jsonLine(end time.Time, d time.Duration, path string, status int, policy, decision, extra string) string {
	return fmt.Sprintf(`{"level":"info","ts":"%s","logger":"access","msg":"request","method":"GET","host":"example.com","path":"%s","status":%d,"duration":%g,"policy":"%s","decision":"%s","upstream":"app","queue_wait":0%s}`+"\n",
		end.UTC().Format("2006-01-02T15:04:05.000Z0700"), path, status, d.Seconds(), policy, decision, extra)
}

// TestAnswerOrder: each request is decided at its arrival and its answer
// settled at its end, in time order across requests; requests the proxy
// answered itself owe nothing; the cost field passes through.
func TestAnswerOrder(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 18, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	log := jsonLine(t0.Add(400*ms), 400*ms, "/api/slow", 200, "api", "allowed", `,"cost":7`) + // 0.000 → 0.400
		jsonLine(t0.Add(150*ms), 50*ms, "/api/fast", 201, "api", "allowed", "") + // 0.100 → 0.150
		jsonLine(t0.Add(200*ms), 0, "/nowhere", 404, "", "unmatched", "") + // 0.200, not forwarded
		jsonLine(t0.Add(450*ms), 50*ms, "/api/last", 200, "api", "allowed", "") // 0.400 → 0.450
	f := newFake(10)
	rep, lineErrs := replayString(t, log, logread.Options{}, true, f)
	if len(lineErrs) > 0 {
		t.Fatal(lineErrs)
	}
	want := []string{
		"evaluate /api/slow @18:00:00.000",
		"evaluate /api/fast @18:00:00.100",
		"answer api 201 -1 @18:00:00.150",
		"evaluate /nowhere @18:00:00.200",
		"answer api 200 7 @18:00:00.400", // ends as the next arrives: settled first
		"evaluate /api/last @18:00:00.400",
		"answer api 200 -1 @18:00:00.450",
	}
	if !reflect.DeepEqual(f.calls, want) {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(want, "\n"))
	}
	if rep.Read.NoClient != 4 {
		t.Errorf("NoClient = %d, want 4 (limitproxy's log has no client address)", rep.Read.NoClient)
	}
	if len(rep.Logged) != 1 || rep.Logged[0].Compared != 4 || rep.Logged[0].Agreed != 4 {
		t.Errorf("Logged = %+v, want 4 of 4 agreeing", rep.Logged)
	}
}

func TestLoggedDisagreement(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 18, 0, 0, 0, time.UTC)
	var log string
	for i := range 3 {
		log += jsonLine(t0.Add(time.Duration(i)*time.Millisecond), 0, "/api/x", 200, "api", "allowed", "")
	}
	rep, _ := replayString(t, log, logread.Options{}, true, newFake(1))
	want := []Agreement{{Config: "a.toml", Compared: 3, Agreed: 1, Disagreements: []Disagreement{
		{LoggedPolicy: "api", LoggedDecision: "allowed", Policy: "api", Decision: "rejected", Requests: 2},
	}}}
	if !reflect.DeepEqual(rep.Logged, want) {
		t.Errorf("Logged = %+v, want %+v", rep.Logged, want)
	}
}

func TestDiff(t *testing.T) {
	// a admits 2 a second per address, b 4.
	rep, _ := replayString(t, testLog(), logread.Options{}, true, newFake(2), newFake(4))
	if got, want := rep.Configs, []string{"a.toml", "b.toml"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Configs = %q", got)
	}
	api := rep.Policies[0]
	if got := []Counts{api.Results[0].Counts, api.Results[1].Counts}; !reflect.DeepEqual(got, []Counts{
		{Requests: 7, Allowed: 4, Rejected: 3}, {Requests: 7, Allowed: 6, Rejected: 1},
	}) {
		t.Errorf("api: %+v", got)
	}
	web := rep.Policies[1]
	if got := []Counts{web.Results[0].Counts, web.Results[1].Counts}; !reflect.DeepEqual(got, []Counts{
		{Requests: 3, Allowed: 2, Queued: 1}, {Requests: 3, Allowed: 3},
	}) {
		t.Errorf("web: %+v", got)
	}
	want := &Diff{Changed: 3, RejectedOnly: [2]Change{
		{Config: "a.toml", Requests: 2, ByPolicy: []PolicyCount{{"api", 2}}, TopKeys: []KeyCount{{Policy: "api", Key: "203.0.113.7", Count: 2}}},
		{Config: "b.toml", Requests: 0, ByPolicy: []PolicyCount{}, TopKeys: []KeyCount{}},
	}}
	if !reflect.DeepEqual(rep.Diff, want) {
		t.Errorf("Diff = %+v, want %+v", rep.Diff, want)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"decided differently: 3 of 12 requests",
		`rejected under a.toml, not under b.toml: 2 ("api" 2)`,
		"rejected under b.toml, not under a.toml: 0",
	} {
		if !strings.Contains(text.String(), line+"\n") {
			t.Errorf("no line %q in\n%s", line, text.String())
		}
	}
}

// TestAbsentPolicy: a policy of one configuration only shows as absent
// under the other.
func TestAbsentPolicy(t *testing.T) {
	r, err := logread.NewReader(strings.NewReader(testLog()), "test.log", logread.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine([]*side{newSide("a.toml", newFake(2), []string{"api", "web"}), newSide("b.toml", newFake(2), []string{"api", "web", "extra"})}, 3, true, []byte("s"))
	if err := e.replay(context.Background(), r, nil); err != nil {
		t.Fatal(err)
	}
	rep := e.report()
	var got []string
	for _, p := range rep.Policies {
		got = append(got, fmt.Sprintf("%s %v %v", p.rowName(), p.Results[0].Absent, p.Results[1].Absent))
	}
	want := []string{"api false false", "web false false", "extra true false", "(unmatched) false false", "(invalid) false false"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows %q, want %q", got, want)
	}
}

func TestJSON(t *testing.T) {
	rep, _ := replayString(t, testLog(), logread.Options{}, false, newFake(2), newFake(4))
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if back.Read != rep.Read || len(back.Policies) != len(rep.Policies) || back.Diff.Changed != 3 || back.Keys != "hashed" {
		t.Errorf("round trip: %+v", back)
	}
	for _, field := range []string{`"shadow_rejected": 0`, `"top_rejected": [`, `"rejected_only": [`, `"no_client": 0`} {
		if !strings.Contains(b.String(), field) {
			t.Errorf("no %s in\n%s", field, b.String())
		}
	}
}

func TestInterrupted(t *testing.T) {
	r, err := logread.NewReader(strings.NewReader(testLog()), "test.log", logread.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e := newEngine([]*side{newSide("a.toml", newFake(1), nil)}, 3, true, nil)
	if err := e.replay(ctx, r, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("replay after cancel = %v, want context.Canceled", err)
	}
}

func TestRequest(t *testing.T) {
	for _, tc := range []struct {
		name, log  string
		o          logread.Options
		method     string
		host, path string
		rawQuery   string
		uri        string
		remote     string
		header     http.Header
		hasClient  bool
	}{
		{
			name:   "combined",
			log:    `203.0.113.7 - - [22/Nov/2026:18:46:44 +0000] "GET /a%2Fb/c?x=1 HTTP/1.1" 200 612 "https://example.com/" "curl/8.5.0"`,
			method: "GET", path: "/a/b/c", rawQuery: "x=1", uri: "/a%2Fb/c?x=1", remote: "203.0.113.7:0", hasClient: true,
			header: http.Header{"Referer": {"https://example.com/"}, "User-Agent": {"curl/8.5.0"}},
		},
		{
			name:   "absolute form",
			log:    `2001:db8::1 - - [22/Nov/2026:18:46:44 +0000] "GET http://api.example.com:8080/v1 HTTP/1.1" 200 612 "-" "-"`,
			method: "GET", host: "api.example.com:8080", path: "/v1", uri: "http://api.example.com:8080/v1", remote: "[2001:db8::1]:0", hasClient: true,
			header: http.Header{},
		},
		{
			name: "client from X-Forwarded-For",
			log:  `10.0.0.2 - - [22/Nov/2026:18:46:44 +0000] "GET / HTTP/2.0" 200 1 "-" "-" "198.51.100.9, 10.0.0.1" "api.example.com"`,
			o: logread.Options{Nginx: logread.NginxOptions{
				LogFormat: logread.Combined + ` "$http_x_forwarded_for" "$host"`, ClientVar: "$http_x_forwarded_for",
				TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
			}},
			method: "GET", host: "api.example.com", path: "/", uri: "/", remote: "198.51.100.9:0", hasClient: true,
			header: http.Header{"X-Forwarded-For": {"198.51.100.9, 10.0.0.1"}},
		},
		{
			name:   "limitproxy without client",
			log:    `{"level":"info","ts":"2026-11-22T18:46:44.475Z","logger":"access","msg":"request","method":"POST","host":"example.com","path":"/a b","status":200,"duration":0.2,"policy":"p","decision":"allowed","upstream":"u","queue_wait":0}`,
			method: "POST", host: "example.com", path: "/a b", remote: "0.0.0.0:0", header: http.Header{},
		},
		{
			name:   "limitproxy with access_replay",
			log:    `{"level":"info","ts":"2026-11-22T18:46:44.475Z","logger":"access","msg":"request","method":"GET","host":"example.com","path":"/k","status":200,"duration":0.2,"policy":"p","decision":"allowed","upstream":"u","queue_wait":0,"received":"2026-11-22T18:46:44.274912Z","client":"2001:db8::7","query":"a=1","h:Accept":"a\nb","h:X-Api-Key":"k1"}`,
			method: "GET", host: "example.com", path: "/k", rawQuery: "a=1", remote: "[2001:db8::7]:0", hasClient: true,
			header: http.Header{"X-Api-Key": {"k1"}, "Accept": {"a", "b"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd, err := logread.NewReader(strings.NewReader(tc.log+"\n"), "t.log", tc.o)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := rd.Next()
			if err != nil {
				t.Fatal(err)
			}
			r, hasClient := request(&rec)
			if r.Method != tc.method || r.Host != tc.host || r.URL.Path != tc.path || r.URL.RawQuery != tc.rawQuery ||
				r.RequestURI != tc.uri || r.RemoteAddr != tc.remote || hasClient != tc.hasClient {
				t.Errorf("request = %s %q %q %q uri %q remote %q (client %v), want %s %q %q %q uri %q remote %q (client %v)",
					r.Method, r.Host, r.URL.Path, r.URL.RawQuery, r.RequestURI, r.RemoteAddr, hasClient,
					tc.method, tc.host, tc.path, tc.rawQuery, tc.uri, tc.remote, tc.hasClient)
			}
			if !reflect.DeepEqual(r.Header, tc.header) {
				t.Errorf("Header = %v, want %v", r.Header, tc.header)
			}
			if r.Body != http.NoBody || r.Context() == nil {
				t.Error("no body or context")
			}
		})
	}
}

func TestCost(t *testing.T) {
	for _, tc := range []struct {
		extra string
		cost  int64
	}{
		{"", -1},
		{`,"cost":12`, 12},
		{`,"cost":-3`, -1},
		{`,"cost":"many"`, -1},
	} {
		rd, err := logread.NewReader(strings.NewReader(jsonLine(time.Date(2026, 11, 22, 18, 0, 1, 0, time.UTC), 0, "/", 200, "p", "allowed", tc.extra)), "t.log", logread.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		if got := cost(&rec); got != tc.cost {
			t.Errorf("%s: cost = %d, want %d", tc.extra, got, tc.cost)
		}
	}
}

// TestRLSLinesNotReplayed: a descriptor Envoy's rate limit service logged
// is no request: it is counted as such, never decided by HTTP policies.
func TestRLSLinesNotReplayed(t *testing.T) {
	log := `{"level":"info","ts":"2026-11-22T18:00:00.000Z","logger":"access","msg":"request","method":"GET","host":"a","path":"/api/items","status":200,"duration":0.001,"policy":"api","decision":"allowed","upstream":"app","queue_wait":0}
{"level":"debug","ts":"2026-11-22T18:00:00.100Z","logger":"access","msg":"request","method":"RLS","host":"edge","path":"remote_address=192.0.2.1","status":429,"duration":0.001,"policy":"edge-ip","decision":"rejected","upstream":"","queue_wait":0}
`
	rep, lineErrs := replayString(t, log, logread.Options{}, true, newFake(2))
	if len(lineErrs) != 0 {
		t.Fatal(lineErrs)
	}
	if rep.Read.Replayed != 1 || rep.Read.NotRequests != 1 {
		t.Errorf("Read = %+v, want 1 replayed and 1 not a request", rep.Read)
	}
}
