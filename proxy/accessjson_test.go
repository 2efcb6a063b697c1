package proxy

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy/internal/clientkey"
)

var stamp = regexp.MustCompile(`"ts":"[0-9T:.Z+-]+"`)

// fixedClock is zap's clock at one instant.
type fixedClock time.Time

func (c fixedClock) Now() time.Time                       { return time.Time(c) }
func (fixedClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }

// TestAccessJSONAsZap: the access line the handler encodes itself
// (writeAccessJSON) is, byte for byte, the line the server's JSON access
// logger writes through zap (the encoder configuration of the server's
// newLogger) for the same request, over strings zap escapes (quotes,
// backslashes, control bytes, bytes that are not UTF-8, a user agent cut
// inside a rune), each client_address mode, warn lines with an error, a
// cost, and no policy.
func TestAccessJSONAsZap(t *testing.T) {
	at := time.Date(2026, 11, 25, 3, 4, 5, 678900000, time.UTC)
	start := at.Add(-1234567 * time.Nanosecond)
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var zapOut bytes.Buffer
	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(&zapOut), zapcore.InfoLevel),
		zap.WithClock(fixedClock(at))).Named("access")
	h := &Handler{acc: logger, hasher: accessHasher, now: func() time.Time { return at }}
	pol := &policy.Policy{Policy: config.Policy{Name: `api "v1"`}}
	longUA := strings.Repeat("a", maxLoggedUserAgent-1) + "é and more"
	for _, c := range []struct {
		name, method, target, host, remote, ua, xff, err string
		mode                                             config.ClientAddress
		p                                                *policy.Policy
		status                                           int
		key                                              string
		cost                                             int64
		wait                                             time.Duration
	}{
		{name: "plain", method: "GET", target: "/a/b?c=d", host: "example.com", remote: "192.0.2.7:5555", ua: "curl/8", p: pol, status: 429, key: "192.0.2.7"},
		{name: "escapes", method: "POST", target: "/x", host: "h\"o\\st\x01\x1f\t\r\n", remote: "192.0.2.7:5555", ua: "ua \xff\xfe bad, \u00e9 good, \U0001F600, \uFFFD as sent", p: pol, status: 200, key: "k"},
		{name: "cut user agent", method: "GET", target: "/", host: "h", remote: "[2001:db8::1]:80", ua: longUA, p: pol, status: 200, mode: config.ClientMasked},
		{name: "masked v4", method: "GET", target: "/", host: "h", remote: "192.0.2.7:1", mode: config.ClientMasked, status: 200},
		{name: "hashed", method: "GET", target: "/", host: "h", remote: "[2001:db8::1]:80", mode: config.ClientHashed, status: 200, p: pol},
		{name: "forwarded for", method: "GET", target: "/", host: "h", remote: "127.0.0.1:1", xff: "198.51.100.9", status: 200, p: pol},
		{name: "warn with cost", method: "PUT", target: "/up", host: "h", remote: "192.0.2.7:1", err: "upstream response cut short", status: 502, p: pol, cost: 17, wait: 1500 * time.Millisecond},
		{name: "no policy", method: "BREW", target: "/%E2%82%AC", host: "", remote: "192.0.2.7:1", status: 404},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, c.target, nil)
			r.Host, r.RemoteAddr = c.host, c.remote
			r.Header.Set("User-Agent", c.ua)
			if c.xff != "" {
				r.Header.Set("X-Forwarded-For", c.xff)
			}
			srv := &config.Server{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, ClientIPHeader: "X-Forwarded-For"}
			x := &exchange{w: recorder{status: c.status, sent: 191}, rec: record{upstream: "app", key: c.key, err: c.err}}
			x.req = request{r: r, start: start, srv: srv, id: [1]string{"0123456789abcdef0123456789abcdef"},
				snap: &snapshot{set: &policy.Set{Config: &config.Config{Log: config.Log{ClientAddress: c.mode}}}}}
			x.req.client = clientkey.Resolve(r, srv)
			var o *owed
			if c.cost != 0 {
				o = &owed{cost: c.cost}
			}
			zapOut.Reset()
			h.accJSON = nil
			h.logAccess(x, c.p, Rejected, c.wait, o)
			if zapOut.Len() == 0 {
				t.Fatal("zap wrote no line")
			}
			level := zapcore.InfoLevel
			if c.err != "" {
				level = zapcore.WarnLevel
			}
			own := appendAccessJSON(nil, h, x, at, at.Sub(start), c.p, Rejected, c.wait, o, level)
			if string(own) != zapOut.String() {
				t.Errorf("own encoding:\n%s\nzap's:\n%s", own, zapOut.String())
			}
			// Through logAccess, stamped with the wall clock.
			var written bytes.Buffer
			h.accJSON = &written
			h.logAccess(x, c.p, Rejected, c.wait, o)
			if got, want := stamp.ReplaceAllString(written.String(), "TS"), stamp.ReplaceAllString(zapOut.String(), "TS"); got != want {
				t.Errorf("logAccess wrote:\n%s\nwant (but the time):\n%s", got, want)
			}
		})
	}
}

// TestKeyHashCache: the cached key hash is the hash itself, whatever the
// slots' collisions (more keys than slots, each asked twice), for a key
// too long to be cached, and under another hasher sharing the cache.
func TestKeyHashCache(t *testing.T) {
	var c keyHashCache
	other := NewKeyHasher([]byte("another-secret-of-16+"))
	keys := []string{strings.Repeat("k", maxCachedKey+1), ""}
	for i := range 3 * keyHashSlots {
		keys = append(keys, fmt.Sprintf("198.51.%d.%d", i/256, i%256))
	}
	for pass := range 2 {
		for _, k := range keys {
			for _, h := range []*KeyHasher{accessHasher, other} {
				if got, want := string(c.appendKey([]byte("x"), h, k)), "x"+h.Key(k); got != want {
					t.Fatalf("pass %d, key %q: %s, want %s", pass, k, got, want)
				}
			}
		}
	}
	hits := 0
	for _, k := range keys {
		if len(k) <= maxCachedKey {
			if e := c.slots[maphash.String(c.seed, k)%keyHashSlots].Load(); e != nil && e.key == k {
				hits++
			}
		}
	}
	if hits == 0 {
		t.Error("no key is cached")
	}
}

// TestAppendTimestamp: the access line's time is what zap's ISO 8601
// encoder writes, across seconds, zones (a half-hour offset, UTC, a
// negative one) and a time before the Unix epoch.
func TestAppendTimestamp(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("IST", 5*3600+1800), time.FixedZone("X", -7*3600), time.Local}
	base := time.Date(2026, 11, 25, 23, 59, 58, 0, time.UTC)
	for _, d := range []time.Duration{0, 999999999, time.Second, 1500 * time.Millisecond, 1999 * time.Millisecond, 2*time.Second + 1, -60 * 365 * 24 * time.Hour} {
		for _, loc := range zones { // the same second in one zone, then in another
			for range 2 { // the second cached, then again
				at := base.Add(d).In(loc)
				if got, want := string(appendTimestamp(nil, at)), at.Format("2006-01-02T15:04:05.000Z0700"); got != want {
					t.Errorf("%v: %s, want %s", at, got, want)
				}
			}
		}
	}
}

// TestAppendSeconds: appendSeconds writes what zap's
// SecondsDurationEncoder writes (strconv's shortest float), on both
// sides of exactBound, for durations of every number of digits, with
// and without trailing zeros, and for a random sample.
func TestAppendSeconds(t *testing.T) {
	ds := []time.Duration{0, 1, 9, 10, 100, 999, time.Microsecond, 1500 * time.Microsecond, time.Millisecond,
		time.Second, time.Second + 1, 10 * time.Second, time.Hour, 123456789, 987654321012,
		exactBound - 1, exactBound, exactBound + 1, 1<<53 - 1, 1 << 53, time.Duration(1<<63 - 1), -1, -time.Second, -1 << 63}
	for p := time.Duration(1); p < exactBound; p *= 10 {
		ds = append(ds, p-1, p, p+1, 7*p, p*10-1)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		ds = append(ds, time.Duration(rng.Int64N(int64(exactBound))), time.Duration(rng.Int64N(int64(100*time.Millisecond))))
	}
	for _, d := range ds {
		want := strconv.AppendFloat(nil, float64(d)/float64(time.Second), 'f', -1, 64)
		if got := appendSeconds(nil, d); string(got) != string(want) {
			t.Fatalf("appendSeconds(%d) = %s, want %s", d, got, want)
		}
	}
}

// TestAppendJSONString: appendJSONString escapes as zap's JSON encoder
// does every byte, alone and after a plain prefix (its fast path's end),
// and strings that mix them with UTF-8, valid and not.
func TestAppendJSONString(t *testing.T) {
	enc := zapcore.NewJSONEncoder(zapcore.EncoderConfig{})
	zapString := func(s string) string {
		e := enc.Clone()
		e.AddString("k", s)
		buf, err := e.EncodeEntry(zapcore.Entry{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		buf.Free()
		// {"k":"..."}\n
		return strings.TrimSuffix(strings.TrimPrefix(out, `{"k":`), "}\n")
	}
	var cases []string
	for c := 0; c < 256; c++ {
		cases = append(cases, string(rune(c)), string([]byte{byte(c)}), "plain/"+string([]byte{byte(c)}), string([]byte{byte(c)})+"/plain", "ab"+string([]byte{byte(c), 'x', byte(c)}))
	}
	cases = append(cases, "", "GET", "/api/v1/users?id=7", "é", "a\xffb", "\U0001F600x", "x\xe2\x82", `a"b\c`)
	for _, s := range cases {
		want := zapString(s)
		if got := string(appendJSONString(nil, s)); got != want {
			t.Errorf("string %q: %s, want %s", s, got, want)
		}
		if got := string(appendJSONString(nil, []byte(s))); got != want {
			t.Errorf("bytes %q: %s, want %s", s, got, want)
		}
	}
}
