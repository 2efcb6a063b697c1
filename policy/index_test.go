package policy

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy/config"
)

// randomConfig writes n policies whose match tables mix every condition
// over a small alphabet of paths and hosts, so that many overlap, then a
// catch-all.
func randomConfig(rng *rand.Rand, n int) string {
	paths := []string{"/", "/a", "/a/", "/a/b", "/ab", "/b", "/b/c/d", "/api/", "/api/v1/x"}
	hosts := []string{"a.example", "b.example", "*.example", "c.test"}
	var b strings.Builder
	b.WriteString("[[upstream]]\nname = \"up\"\ntargets = [\"http://127.0.0.1:1\"]\n")
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	for i := range n {
		var conds []string
		switch rng.IntN(4) {
		case 0:
			conds = append(conds, fmt.Sprintf("path = %q", pick(paths)))
		case 1:
			conds = append(conds, fmt.Sprintf("path_prefix = %q", pick(paths)))
		}
		if rng.IntN(3) == 0 {
			conds = append(conds, fmt.Sprintf("hosts = [%q, %q]", pick(hosts), pick(hosts)))
		}
		if rng.IntN(4) == 0 {
			conds = append(conds, `methods = ["POST"]`)
		}
		if rng.IntN(6) == 0 {
			conds = append(conds, `path_regex = "b"`)
		}
		if rng.IntN(6) == 0 {
			conds = append(conds, `headers = { "X-Plan" = "free" }`)
		}
		if len(conds) == 0 {
			conds = append(conds, `methods = ["GET", "POST"]`) // matches all, but not a catch-all
		}
		fmt.Fprintf(&b, "[[policy]]\nname = \"p%d\"\nupstream = \"up\"\nmatch = { %s }\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n",
			i, strings.Join(conds, ", "))
	}
	b.WriteString("[[policy]]\nname = \"rest\"\nupstream = \"up\"\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n")
	return b.String()
}

// TestIndexAgreesWithScan: for random sets of overlapping policies and
// random requests, the index finds exactly the policy the file-order scan
// finds.
func TestIndexAgreesWithScan(t *testing.T) {
	paths := []string{"/", "/a", "/a/", "/a/b", "/a/bc", "/ab", "/abc", "/b", "/b/c/d", "/b/c/de", "/api/", "/api/v1/x", "/api/v2", "/zzz", ""}
	hosts := []string{"a.example", "b.example", "x.example", "c.test", "d.test", "A.Example", "a.example."}
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 1))
		n := 10 + rng.IntN(60)
		cfg, err := config.Parse("random.toml", []byte(randomConfig(rng, n)))
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
			r.Host = hosts[rng.IntN(len(hosts))]
			if rng.IntN(2) == 0 {
				r.Method = "POST"
			}
			if rng.IntN(3) == 0 {
				r.Header.Set("X-Plan", "free")
			}
			got, _ := set.Match(r)
			want, _ := set.scan(r)
			if got != want {
				t.Fatalf("seed %d: %s %s host %s: index found %s, the scan %s", seed, r.Method, r.URL.Path, r.Host, got.Name, want.Name)
			}
		}
	}
}

// BenchmarkMatch: the request matches the last policy told apart by path
// (1000: the 1000th), with one policy or a thousand before the catch-all.
func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			var src strings.Builder
			src.WriteString("[[upstream]]\nname = \"up\"\ntargets = [\"http://127.0.0.1:1\"]\n")
			for i := range n {
				fmt.Fprintf(&src, "[[policy]]\nname = \"p%d\"\nupstream = \"up\"\nmatch = { path_prefix = \"/svc%d/\" }\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n", i, i)
			}
			cfg, err := config.Parse("bench.toml", []byte(src.String()))
			if err != nil {
				b.Fatal(err)
			}
			set, err := Compile(cfg, memstore.New(memstore.Options{}), time.Now())
			if err != nil {
				b.Fatal(err)
			}
			r, _ := http.NewRequest("GET", fmt.Sprintf("http://api.example/svc%d/items/42", n-1), nil)
			want := fmt.Sprint("p", n-1)
			if p, ok := set.Match(r); !ok || p.Name != want {
				b.Fatalf("matched %v, want %s", p, want)
			}
			b.ReportAllocs()
			for b.Loop() {
				set.Match(r)
			}
		})
	}
}
