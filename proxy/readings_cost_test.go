package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// readingsCase is a request under readingsConfig, canonicalized and
// matched, with the path as sent.
func readingsCase(tb testing.TB, cfgText, target string) (r *http.Request, set *policy.Set, p *policy.Policy, sent string) {
	tb.Helper()
	cfg, err := config.Parse("cost.toml", []byte(strings.Replace(cfgText, "CASE", "", 1)))
	if err != nil {
		tb.Fatal(err)
	}
	set, err = policy.Compile(cfg, memstore.New(memstore.Options{}), time.Unix(0, 0))
	if err != nil {
		tb.Fatal(err)
	}
	r, _ = http.NewRequest("GET", "http://a/", nil)
	r.RequestURI, r.URL.Path = target, target
	srv := set.Config.Server
	if status, detail := canonicalize(r, &srv); status != 0 {
		tb.Fatalf("%.40q refused: %s", target, detail)
	}
	p, ok := set.Match(r)
	if !ok {
		tb.Fatalf("%.40q unmatched", target)
	}
	return r, set, p, target
}

// adversarialPath triggers every rule in every segment: a ';'
// parameter, a trailing dot, an encoded backslash, an upper-case letter
// and a trailing slash, n segments long (10 bytes each).
func adversarialPath(n int) string { return "/A" + strings.Repeat("/a;b.%5Cc.", n) + "/" }

// TestReadingsCostBounded: the readings are taken for every request
// before any limit decides it, a rejected one too, so what one request
// can make them cost must stay near the cost of reading its head. A
// path of 60 KB (under the default max_header_bytes of 64 KiB) with
// every rule in each segment is read 31 times (63 behind forward auth,
// 95 with an empty segment in each: the last case here),
// each split into its 30,000 segments (a 1 KB one costs 0.9 ms): on the code this was written
// against, about 90,000 allocations and 30 MB a request, 50-70 ms of a
// CPU (20 such requests through the proxy took 1.3 s, 19 of them
// answered 429), a thousand times an ordinary request. Bounded here at
// 1,000 allocations and 64 bytes allocated per byte of path.
//
// A path over maxReadPath (4 KiB) that has other readings is refused
// unread; one just under it is read whole, by every rule.
func TestReadingsCostBounded(t *testing.T) {
	for _, tc := range []struct {
		n        int
		verbatim bool
	}{{6000, false}, {(maxReadPath - 3) / 10, false}, {(maxReadPath - 4) / 11, true}} {
		target := adversarialPath(tc.n)
		if tc.verbatim {
			// Behind forward auth, read as sent too: with an empty
			// segment in each, every rule applies, the WHATWG URL
			// reading included.
			target = "/" + strings.ReplaceAll(adversarialPath(tc.n), "/a;", "//a;")
		}
		r, set, p, _ := readingsCase(t, readingsConfig, target)
		sent := escapedPath(r.URL)
		if tc.verbatim {
			sent = target
		}
		var ms0, ms1 runtimeMemStats
		ms0.read()
		var detail string
		allocs := testing.AllocsPerRun(3, func() { detail = checkReadings(r, nil, set, p, sent, true, slashedPaths(set)) })
		ms1.read()
		perCall := (ms1.bytes - ms0.bytes) / 4 // AllocsPerRun runs it once more to warm up
		if allocs > 1000 || perCall > 64*uint64(len(target)) {
			t.Errorf("the readings of a %d-byte path cost %.0f allocations and %d bytes a request; want at most 1000 and %d",
				len(target), allocs, perCall, 64*len(target))
		}
		if long := len(target) > maxReadPath; long != (detail == tooLongToRead) {
			t.Errorf("a %d-byte path: refused %q; want refused unread exactly when over %d bytes", len(target), detail, maxReadPath)
		}
	}
}

// BenchmarkCheckReadings: the readings of an ordinary path (none taken),
// of paths in mixed case, of an ordinary path where a policy is written
// in mixed case (every path then read in any case), and of adversarial
// paths.
func BenchmarkCheckReadings(b *testing.B) {
	for _, tc := range []struct{ name, cfg, target string }{
		{"lower", readingsConfig, "/api/v1/users/123"},
		{"mixed-case", readingsConfig, "/api/v1/Users/ABC"},
		{"mixed-case-catch-all", readingsConfig, "/Reports/Q3/Summary"},
		{"dots-and-slash", readingsConfig, "/v1.2/file.tar.gz/"},
		{"lower-cased-policy", casedConfig, "/api/v1/users/123"},
		{"adversarial-1KB", readingsConfig, adversarialPath(100)},
		{"adversarial-60KB", readingsConfig, adversarialPath(6000)},
	} {
		r, set, p, _ := readingsCase(b, tc.cfg, tc.target)
		esc := escapedPath(r.URL)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				checkReadings(r, nil, set, p, esc, true, slashedPaths(set))
			}
		})
	}
}
