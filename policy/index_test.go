package policy

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/policytest"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy/config"
)

// randomConfig writes n policies whose match tables mix every condition
// over a small alphabet of paths, hosts and regexes, so that many overlap
// (and some policies can be filed under a condition of the index while
// others cannot), then a catch-all.
func randomConfig(rng *rand.Rand, n int) string {
	paths := []string{"/", "/a", "/a/", "/a/b", "/ab", "/b", "/b/c/d", "/api/", "/api/v1/x", "/\u00e9t\u00e9"}
	hosts := []string{"a.example", "b.example", "*.example", "c.test", "*.b.example", "*.a.test", "localhost"}
	regexes := []string{
		"b", "^/a", "^/a/", "^/ab?", "^/api/v[0-9]+/", "^/b/c/", `\\.json$`, `/d$`, "^/a$", "^(?i)/A", "(?i)^/a",
		"(?m)^/a", "^/a|^/b", `^/\\x{FFFD}`, `\\x{FFFD}$`, `[a-z]/d`, `.json$`, `[ab]/c`, `[ab]/c.`, `/ab$`, `/[a-z]+\\.json$`, "^/\u00e9", "\u00e9$", "^/b/c/d$", `^/api/v1/x\\z`, `\\A/b`, "^/(a|b)/",
		"^$", "^/api/.*json$", "x$",
	}
	var b strings.Builder
	b.WriteString("[[upstream]]\nname = \"up\"\ntargets = [\"http://127.0.0.1:1\"]\n")
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	for i := range n {
		var conds []string
		switch rng.IntN(7) {
		case 0:
			conds = append(conds, fmt.Sprintf("path = \"%s\"", pick(paths)))
		case 1:
			conds = append(conds, fmt.Sprintf("path_prefix = \"%s\"", pick(paths)))
		case 2, 3, 4:
			conds = append(conds, fmt.Sprintf("path_regex = \"%s\"", pick(regexes)))
		}
		if rng.IntN(3) == 0 {
			conds = append(conds, fmt.Sprintf("hosts = [\"%s\", \"%s\"]", pick(hosts), pick(hosts)))
		}
		if rng.IntN(4) == 0 {
			conds = append(conds, `methods = ["POST"]`)
		}
		if rng.IntN(8) == 0 {
			conds = append(conds, fmt.Sprintf("path_regex = \"%s\"", pick(regexes)))
		}
		if rng.IntN(6) == 0 {
			conds = append(conds, `headers = { "X-Plan" = "free" }`)
		}
		if len(conds) == 0 {
			conds = append(conds, `methods = ["PATCH"]`)
			if rng.IntN(8) == 0 {
				conds = []string{`methods = ["GET", "POST"]`} // most requests, but not a catch-all
			}
		}
		if rng.IntN(20) == 0 {
			// Some sets keep their catch-all's place for the end; an RLS
			// policy in the middle matches no HTTP request.
			fmt.Fprintf(&b, "[[policy]]\nname = \"rls%d\"\nmatch = { rls_domain = \"d\", descriptor = [\"k\"] }\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n", i)
		}
		fmt.Fprintf(&b, "[[policy]]\nname = \"p%d\"\nupstream = \"up\"\nmatch = { %s }\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n",
			i, strings.Join(dedupRegex(conds), ", "))
	}
	if rng.IntN(2) == 0 {
		b.WriteString("[[policy]]\nname = \"rest\"\nupstream = \"up\"\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n")
	}
	return b.String()
}

// dedupRegex keeps the first path_regex of conds: a match table has one.
func dedupRegex(conds []string) []string {
	var out []string
	seen := false
	for _, c := range conds {
		if strings.HasPrefix(c, "path_regex") {
			if seen {
				continue
			}
			seen = true
		}
		out = append(out, c)
	}
	return out
}

// TestIndexAgreesWithScan: for random sets of overlapping policies and
// random requests, the index finds exactly the policy the file-order scan
// (the oracle: every policy's whole match table in turn) finds.
func TestIndexAgreesWithScan(t *testing.T) {
	paths := []string{"/", "/a", "/a/", "/a/b", "/a/bc", "/ab", "/abc", "/b", "/b/c/d", "/b/c/de", "/api/", "/api/v1/x", "/api/v2",
		"/api/v12/y.json", "/x.json", "/c/d", "/zzz", "", "/\xff", "/\xffx", "/x\xff", "/\u00e9t\u00e9", "/A", "/a\n", "/api/v1/x\n"}
	hosts := []string{"a.example", "b.example", "x.example", "c.test", "d.test", "A.Example", "a.example.", "example", ".example",
		"x.b.example", "b.example:8080", "a.test", "x.a.test", "localhost", "[::1]:80", ""}
	matched, unmatched := 0, 0
	for seed := range uint64(150) {
		rng := rand.New(rand.NewPCG(seed, 1))
		n := 10 + rng.IntN(120)
		cfg, err := config.Parse("random.toml", []byte(randomConfig(rng, n)))
		if err != nil {
			t.Fatal(err)
		}
		set, err := Compile(cfg, memstore.New(memstore.Options{}), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if set.index == nil || len(set.Policies) <= smallSet {
			t.Fatalf("seed %d: %d policies: Match would not use the index", seed, len(set.Policies))
		}
		for range 400 {
			r := httptest.NewRequest("GET", "/", nil)
			r.URL.Path = paths[rng.IntN(len(paths))]
			r.Host = hosts[rng.IntN(len(hosts))]
			r.Method = []string{"GET", "POST", "DELETE"}[rng.IntN(3)]
			if rng.IntN(3) == 0 {
				r.Header.Set("X-Plan", "free")
			}
			got, gotOK := set.Match(r)
			want, wantOK := set.scan(r)
			if got != want || gotOK != wantOK {
				t.Fatalf("seed %d: %s %q host %q: index found %v, the scan %v", seed, r.Method, r.URL.Path, r.Host, name(got), name(want))
			}
			if wantOK {
				matched++
			} else {
				unmatched++
			}
		}
	}
	t.Logf("%d requests matched a policy, %d none", matched, unmatched)
	// Both outcomes must be common, or the comparison proves little.
	if matched < 1000 || unmatched < 1000 {
		t.Errorf("%d requests matched, %d matched nothing: the random sets are too one-sided", matched, unmatched)
	}
}

func name(p *Policy) string {
	if p == nil {
		return "nothing"
	}
	return p.Name
}

// TestRegexLiterals: what the index files an anchored regex under is a
// literal every path it matches begins (or ends) with; "" where there is
// none it can compare bytes with.
func TestRegexLiterals(t *testing.T) {
	for _, c := range []struct{ expr, prefix, suffix string }{
		{"^/api/v[0-9]+/", "/api/v", ""},
		{`\A/api`, "/api", ""},
		{"^/re1/[0-9]+$", "/re1/", ""},
		{`/x/[a-z]+\.json$`, "", ".json"},
		{`^/a\.json\z`, "/a.json", "/a.json"},
		{"^/ab|^/ac", "", ""},
		{"^/a|^/b", "", ""},
		{"/api", "", ""},
		{"(?i)^/api", "", ""},
		{"^(?i)/api", "", ""},
		{"(?m)^/api", "", ""},
		{"(?m)/api$", "", ""},
		{"^(/api)", "", ""},
		{`^\x{FFFD}/`, "", ""},
		{`/\x{FFFD}$`, "", ""},
		{"^/\u00e9", "/\u00e9", ""},
		{"^$", "", ""},
		{"[", "", ""},
	} {
		if got := regexPrefix(c.expr); got != c.prefix {
			t.Errorf("regexPrefix(%q) = %q, want %q", c.expr, got, c.prefix)
		}
		if got := regexSuffix(c.expr); got != c.suffix {
			t.Errorf("regexSuffix(%q) = %q, want %q", c.expr, got, c.suffix)
		}
	}
}

// mixConfig is n policies: n−1 in a mix of every kind of match rule
// (exact path, path prefix, anchored regex, regex with a literal suffix,
// exact host, wildcard host, some with methods), then "target", matched
// by host and path prefix, which BenchmarkMatch's request matches: the
// last in file order. (proxy's BenchmarkScaling has the same set.)
func mixConfig(n int) string {
	var b strings.Builder
	b.WriteString("[[upstream]]\nname = \"up\"\ntargets = [\"http://127.0.0.1:1\"]\n")
	for i := range n - 1 {
		fmt.Fprintf(&b, "[[policy]]\nname = \"p%d\"\nupstream = \"up\"\nmatch = { %s }\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n", i, policytest.MixedMatch(i))
	}
	b.WriteString("[[policy]]\nname = \"target\"\nupstream = \"up\"\nmatch = { hosts = [\"api.example\"], path_prefix = \"/api/\" }\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n")
	return b.String()
}

// BenchmarkMatch: a request that matches the last policy of mixConfig,
// and one that matches none, with 1, 100 and 1000 policies.
//
//	go test -run '^$' -bench Match ./policy
func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		cfg, err := config.Parse("bench.toml", []byte(mixConfig(n)))
		if err != nil {
			b.Fatal(err)
		}
		set, err := Compile(cfg, memstore.New(memstore.Options{}), time.Now())
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct{ name, url, want string }{
			{"last", "http://api.example/api/v1/items/42", "target"},
			{"miss", "http://nomatch.example/zzz/1", ""},
		} {
			b.Run(fmt.Sprintf("%s/policies=%d", c.name, n), func(b *testing.B) {
				r, _ := http.NewRequest("GET", c.url, nil)
				if p, _ := set.Match(r); name(p) != cmp.Or(c.want, "nothing") {
					b.Fatalf("matched %s, want %s", name(p), c.want)
				}
				b.ReportAllocs()
				for b.Loop() {
					set.Match(r)
				}
			})
		}
	}
}

// BenchmarkCompile is what a reload of n policies costs before the swap:
// parsing and validating the file's text, then compiling it (matchers,
// limiters, the index).
//
//	go test -run '^$' -bench Compile ./policy
func BenchmarkCompile(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		src := []byte(mixConfig(n))
		b.Run(fmt.Sprintf("parse/policies=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := config.Parse("bench.toml", src); err != nil {
					b.Fatal(err)
				}
			}
		})
		cfg, err := config.Parse("bench.toml", src)
		if err != nil {
			b.Fatal(err)
		}
		store := memstore.New(memstore.Options{})
		b.Run(fmt.Sprintf("compile/policies=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := Compile(cfg, store, time.Now()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestIndexInvalidUTF8: a regex reads each invalid byte of a path as
// U+FFFD, so a regex whose literal holds that rune is tried for every
// request rather than filed under bytes no such path holds.
func TestIndexInvalidUTF8(t *testing.T) {
	var src strings.Builder
	src.WriteString("[[upstream]]\nname = \"up\"\ntargets = [\"http://127.0.0.1:1\"]\n")
	for i, m := range []string{`path_regex = "^/\\x{FFFD}"`, `path_regex = "\\x{FFFD}$"`} {
		fmt.Fprintf(&src, "[[policy]]\nname = \"r%d\"\nupstream = \"up\"\nmatch = { %s }\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n", i, m)
	}
	for i := range smallSet {
		fmt.Fprintf(&src, "[[policy]]\nname = \"p%d\"\nupstream = \"up\"\nmatch = { path = \"/p%d\" }\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n", i, i)
	}
	cfg, err := config.Parse("utf8.toml", []byte(src.String()))
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/\xffx": "r0", "/x\xff": "r1", "/\xef\xbf\xbd": "r0", "/p3": "p3"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.URL.Path = path
		if p, ok := set.Match(r); !ok || p.Name != want {
			t.Errorf("%q matched %v, want %s", path, name(p), want)
		}
	}
}

// TestMatchFoldAgreesWithScan: for random sets of overlapping policies,
// some written in upper case, and random paths in random case, MatchFold
// (through its own index) finds exactly the policy a file-order scan finds
// when every path, prefix and regex is compared without regard to case;
// and a path that Match gives a policy, MatchFold gives one too.
func TestMatchFoldAgreesWithScan(t *testing.T) {
	paths := []string{"/", "/a", "/A", "/a/", "/A/B", "/ab", "/aB", "/abc", "/b/c/d", "/B/C/D", "/api/", "/API/", "/api/v1/x", "/Api/V1/X",
		"/x.json", "/X.JSON", "/\u00e9t\u00e9", "/\u00c9T\u00c9", "/\u212a", "/k", "/K", "/\xff"}
	upper := func(rng *rand.Rand, s string) string {
		if rng.IntN(2) == 0 {
			return s
		}
		return strings.ToUpper(s)
	}
	folded, plain := 0, 0
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 2))
		text := randomConfig(rng, 10+rng.IntN(60))
		// Some patterns in upper case: path and prefix values, between
		// the quotes after "path = " and "path_prefix = ".
		var b strings.Builder
		for _, line := range strings.Split(text, "\n") {
			for _, key := range []string{`path = "`, `path_prefix = "`} {
				if i := strings.Index(line, key); i >= 0 {
					j := i + len(key)
					k := j + strings.IndexByte(line[j:], '"')
					line = line[:j] + upper(rng, line[j:k]) + line[k:]
				}
			}
			b.WriteString(line + "\n")
		}
		cfg, err := config.Parse("random.toml", []byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		set, err := Compile(cfg, memstore.New(memstore.Options{}), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for range 300 {
			r := httptest.NewRequest("GET", "/", nil)
			r.URL.Path = paths[rng.IntN(len(paths))]
			r.Host = []string{"a.example", "x.b.example", "c.test", ""}[rng.IntN(4)]
			r.Method = []string{"GET", "POST"}[rng.IntN(2)]
			got, gotOK := set.MatchFold(r)
			var want *Policy
			wantOK := false
			for _, p := range set.Policies {
				if p.matcher.matchesFold(r, requestHost(r), nil) {
					want, wantOK = p, true
					break
				}
			}
			if got != want || gotOK != wantOK {
				t.Fatalf("seed %d: %s %q: MatchFold found %v, the scan %v", seed, r.Method, r.URL.Path, name(got), name(want))
			}
			if exact, ok := set.Match(r); ok && !gotOK {
				t.Fatalf("seed %d: %q: Match found %v, MatchFold none", seed, r.URL.Path, name(exact))
			}
			if p, _ := set.Match(r); p != got {
				folded++
			} else {
				plain++
			}
		}
	}
	t.Logf("%d requests matched another policy in any case, %d the same", folded, plain)
	if folded < 100 || plain < 100 {
		t.Errorf("%d requests differ, %d agree: the comparison proves little", folded, plain)
	}
}

// TestHasPrefixFold: a prefix in any case, across case pairs whose UTF-8
// lengths differ (K and the Kelvin sign).
func TestHasPrefixFold(t *testing.T) {
	for _, c := range []struct {
		s, prefix string
		want      bool
	}{
		{"/API/x", "/api/", true},
		{"/api/x", "/API/", true},
		{"/apx", "/api", false},
		{"/ap", "/api", false},
		{"/\u212a/x", "/k/", true},
		{"/k/x", "/\u212a/", true},
		{"/\u00c9t\u00e9/", "/\u00e9T\u00c9", true},
		{"/b", "/a", false},
	} {
		if got := hasPrefixFold(c.s, c.prefix); got != c.want {
			t.Errorf("hasPrefixFold(%q, %q) = %v, want %v", c.s, c.prefix, got, c.want)
		}
	}
}
