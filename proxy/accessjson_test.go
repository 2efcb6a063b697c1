package proxy

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"net/http"
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
	"github.com/limitproxy/limitproxy/proxy/internal/identity"
)

var stamp = regexp.MustCompile(`"ts":"[0-9T:.Z+-]+"`)

// fixedClock is zap's clock at one instant.
type fixedClock time.Time

func (c fixedClock) Now() time.Time                       { return time.Time(c) }
func (fixedClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }

// TestAccessJSONAsZap: the access line the handler encodes through zap's
// encoder (writeAccessJSON: accessEncoder, its fields added by
// accessLine) is, byte for byte, the line the server's JSON access logger
// writes through zap's logger and logAccess's fields (the encoder
// configuration of the server's newLogger) for the same request, over strings zap escapes (quotes,
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
		sub                                              string // with an [identity]: the token's sub ("-": none)
	}{
		{name: "plain", method: "GET", target: "/a/b?c=d", host: "example.com", remote: "192.0.2.7:5555", ua: "curl/8", p: pol, status: 429, key: "192.0.2.7"},
		{name: "escapes", method: "POST", target: "/x", host: "h\"o\\st\x01\x1f\t\r\n", remote: "192.0.2.7:5555", ua: "ua \xff\xfe bad, \u00e9 good, \U0001F600, \uFFFD as sent", p: pol, status: 200, key: "k"},
		{name: "cut user agent", method: "GET", target: "/", host: "h", remote: "[2001:db8::1]:80", ua: longUA, p: pol, status: 200, mode: config.ClientMasked},
		{name: "masked v4", method: "GET", target: "/", host: "h", remote: "192.0.2.7:1", mode: config.ClientMasked, status: 200},
		{name: "hashed", method: "GET", target: "/", host: "h", remote: "[2001:db8::1]:80", mode: config.ClientHashed, status: 200, p: pol},
		{name: "forwarded for", method: "GET", target: "/", host: "h", remote: "127.0.0.1:1", xff: "198.51.100.9", status: 200, p: pol},
		{name: "warn with cost", method: "PUT", target: "/up", host: "h", remote: "192.0.2.7:1", err: "upstream response cut short", status: 502, p: pol, cost: 17, wait: 1500 * time.Millisecond},
		{name: "identity", method: "GET", target: "/", host: "h", remote: "192.0.2.7:1", status: 200, p: pol, key: "5:alice;", sub: "alice"},
		{name: "identity, no token", method: "GET", target: "/", host: "h", remote: "192.0.2.7:1", status: 401, p: pol, sub: "-", err: "no token"},
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
			if c.sub != "" {
				x.req.snap.set.Config.Identity = &config.Identity{}
				if c.sub != "-" {
					claims, err := identity.FromJSON(map[string]string{"sub": strconv.Quote(c.sub)})
					if err != nil {
						t.Fatal(err)
					}
					x.req.claims = claims
				}
			}
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
			own := encodedLine(h, x, at, at.Sub(start), c.p, c.wait, o, level)
			if own != zapOut.String() {
				t.Errorf("own encoding:\n%s\nzap's:\n%s", own, zapOut.String())
			}
			switch want := ""; c.sub {
			case "":
				if strings.Contains(own, `"identity"`) {
					t.Errorf("an identity field without [identity]: %s", own)
				}
			case "-":
				want = `"identity":""`
				fallthrough
			default:
				if want == "" {
					want = `"identity":"` + accessHasher.Key(c.sub) + `"`
				}
				if !strings.Contains(own, want) {
					t.Errorf("want %s in %s", want, own)
				}
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

// encodedLine is the line encodeAccess encodes, as a string.
func encodedLine(h *Handler, x *exchange, ts time.Time, d time.Duration, p *policy.Policy, wait time.Duration, o *owed, level zapcore.Level) string {
	buf := h.encodeAccess(x, ts, d, p, Rejected, wait, o, level)
	defer buf.Free()
	return buf.String()
}

// accessRig is a handler whose access logger is zap's, as the server's
// JSON one (newLogger's encoder configuration), writing to out at a fixed
// instant, and a request and its exchange to log.
func accessRig(at time.Time, out *bytes.Buffer) (*Handler, *http.Request, *exchange) {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(out), zapcore.InfoLevel),
		zap.WithClock(fixedClock(at))).Named("access")
	h := &Handler{acc: logger, hasher: accessHasher, now: func() time.Time { return at }}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.7:5555"
	x := logExchange(r, at, 200, 0)
	return h, r, x
}

// logExchange is an exchange of r, started at start, to log: status,
// bytes sent, upstream "app", its client's address as key, a fixed id.
func logExchange(r *http.Request, start time.Time, status int, sent int64) *exchange {
	srv := &config.Server{}
	x := &exchange{w: recorder{status: status, sent: sent}, rec: record{upstream: "app"}}
	x.req = request{r: r, start: start, srv: srv, id: [1]string{"0123456789abcdef0123456789abcdef"},
		snap: &snapshot{set: &policy.Set{Config: &config.Config{}}}}
	x.req.client = clientkey.Resolve(r, srv)
	x.rec.key = x.req.client.Addr.String()
	return x
}

// TestAccessTimestamp: the access line's ts is what the ISO 8601 layout
// with milliseconds writes (docs/metrics.md), across seconds, zones (a
// half-hour offset, UTC, a negative one) and a time before the Unix
// epoch.
func TestAccessTimestamp(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("IST", 5*3600+1800), time.FixedZone("X", -7*3600), time.Local}
	base := time.Date(2026, 11, 25, 23, 59, 58, 0, time.UTC)
	h, _, x := accessRig(base, &bytes.Buffer{})
	for _, d := range []time.Duration{0, 999999999, time.Second, 1500 * time.Millisecond, 1999 * time.Millisecond, 2*time.Second + 1, -60 * 365 * 24 * time.Hour} {
		for _, loc := range zones {
			at := base.Add(d).In(loc)
			line := encodedLine(h, x, at, 0, nil, 0, nil, zapcore.InfoLevel)
			if want := `"ts":"` + at.Format("2006-01-02T15:04:05.000Z0700") + `"`; !strings.Contains(line, want) {
				t.Errorf("%v: %s, want %s", at, line, want)
			}
		}
	}
}

// TestAccessSeconds: the line's duration and queue_wait are in seconds,
// strconv's shortest float (zap's SecondsDurationEncoder, as
// docs/metrics.md shows them), for durations of every number of digits,
// with and without trailing zeros, at float64's limits and for a random
// sample.
func TestAccessSeconds(t *testing.T) {
	ds := []time.Duration{0, 1, 9, 10, 100, 999, time.Microsecond, 1500 * time.Microsecond, time.Millisecond,
		time.Second, time.Second + 1, 10 * time.Second, time.Hour, 123456789, 987654321012,
		1e15 - 1, 1e15, 1e15 + 1, 1<<53 - 1, 1 << 53, time.Duration(1<<63 - 1), -1, -time.Second, -1 << 63}
	for p := time.Duration(1); p < 1e15; p *= 10 {
		ds = append(ds, p-1, p, p+1, 7*p, p*10-1)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		ds = append(ds, time.Duration(rng.Int64N(1e15)), time.Duration(rng.Int64N(int64(100*time.Millisecond))))
	}
	at := time.Date(2026, 11, 25, 3, 4, 5, 0, time.UTC)
	h, _, x := accessRig(at, &bytes.Buffer{})
	for _, d := range ds {
		want := strconv.AppendFloat(nil, float64(d)/float64(time.Second), 'f', -1, 64)
		line := encodedLine(h, x, at, d, nil, d, nil, zapcore.InfoLevel)
		if !strings.Contains(line, `"duration":`+string(want)+`,`) || !strings.Contains(line, `"queue_wait":`+string(want)+`,`) {
			t.Fatalf("%d: %s, want %s seconds", d, line, want)
		}
	}
}

// TestAccessEscapes: the line escapes every byte as zap's logger does,
// alone and after a plain prefix, and strings that mix them with UTF-8,
// valid and not, in each of the client's strings (host, path, user
// agent).
func TestAccessEscapes(t *testing.T) {
	at := time.Date(2026, 11, 25, 3, 4, 5, 0, time.UTC)
	var zapOut bytes.Buffer
	h, r, x := accessRig(at, &zapOut)
	var cases []string
	for c := 0; c < 256; c++ {
		cases = append(cases, string(rune(c)), string([]byte{byte(c)}), "plain/"+string([]byte{byte(c)}), string([]byte{byte(c)})+"/plain", "ab"+string([]byte{byte(c), 'x', byte(c)}))
	}
	cases = append(cases, "", "GET", "/api/v1/users?id=7", "é", "a\xffb", "\U0001F600x", "x\xe2\x82", `a"b\c`)
	for _, s := range cases {
		r.Host, r.URL.Path = s, s
		r.Header.Set("User-Agent", s)
		zapOut.Reset()
		h.logAccess(x, nil, Rejected, 0, nil)
		if got := encodedLine(h, x, at, 0, nil, 0, nil, zapcore.InfoLevel); got != zapOut.String() {
			t.Errorf("%q:\n%s\nzap's:\n%s", s, got, zapOut.String())
		}
	}
}
