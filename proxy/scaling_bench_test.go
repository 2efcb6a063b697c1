package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitproxy/limitproxy/internal/policytest"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// scalingAlgorithms are the five algorithms with limits no benchmark
// reaches: every measured request is forwarded. sliding_log's limit is
// at most 100000, so its window is short enough that one client sending
// two million requests a second stays under it.
var scalingAlgorithms = []struct{ name, limit string }{
	{"token_bucket", `algorithm = "token_bucket"` + "\n  rate = \"1000000000/s\"\n  burst = 1000000000"},
	{"leaky_bucket", `algorithm = "leaky_bucket"` + "\n  rate = \"1000000000/s\""},
	{"fixed_window", `algorithm = "fixed_window"` + "\n  limit = 1000000000\n  window = \"1s\""},
	{"sliding_window", `algorithm = "sliding_window"` + "\n  limit = 1000000000\n  window = \"1s\""},
	{"sliding_log", `algorithm = "sliding_log"` + "\n  limit = 100000\n  window = \"50ms\""},
}

// scalingPolicies is the number of policies of each measured set.
var scalingPolicies = []int{1, 100, 1000}

// scalingConfig is n policies under one algorithm (limit): n−1 that the
// measured requests do not match, in a mix of every kind of match rule
// (exact path, path prefix, anchored regex, regex with a literal suffix,
// exact host, wildcard host, some with methods), then "target", matched
// by host and path prefix, with a [policy.ban]: the request it matches
// is the last in file order, the one a scan reaches last.
func scalingConfig(n int, limit string) string {
	var b strings.Builder
	b.WriteString("[[upstream]]\nname = \"app\"\ntargets = [\"http://upstream.invalid\"]\n")
	for i := range n - 1 {
		fmt.Fprintf(&b, "[[policy]]\nname = \"p%d\"\nupstream = \"app\"\nmatch = { %s }\n  [[policy.limits]]\n  %s\n", i, policytest.MixedMatch(i), limit)
	}
	fmt.Fprintf(&b, "[[policy]]\nname = \"target\"\nupstream = \"app\"\nmatch = { hosts = [\"api.example\"], path_prefix = \"/api/\" }\n  [policy.ban]\n  duration = \"1h\"\n  [[policy.limits]]\n  %s\n", limit)
	return b.String()
}

// scalingHandlers compiles the sets of scalingPolicies policies under
// limit against one store, penalty box and override store (limit state is
// keyed by policy and algorithm, so "target" shares its counters across
// the sets), each in a handler with metrics on, the access log off, over
// a transport that answers at once.
func scalingHandlers(b *testing.B, limit string, o Options, store *memstore.Store) map[int]*Handler {
	hs := map[int]*Handler{}
	for _, n := range scalingPolicies {
		cfg, err := config.Parse("scaling.toml", []byte(scalingConfig(n, limit)))
		if err != nil {
			b.Fatal(err)
		}
		set, err := policy.Compile(cfg, store, o.Now())
		if err != nil {
			b.Fatal(err)
		}
		o.Metrics = NewMetrics(prometheus.NewRegistry())
		h := New(set, o)
		for _, p := range h.snap.Load().pools {
			for _, t := range p.targets {
				t.proxy.Transport = stubTransport{}
			}
		}
		hs[n] = h
	}
	return hs
}

// scalingAddrs returns n client addresses (host:port) under prefix
// "a.b": a.b.x.y, then further networks when n needs them.
func scalingAddrs(first byte, n int) []string {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("%d.%d.%d.%d:40000", first+byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
	}
	return addrs
}

// cpuTime is the CPU time the process has used, every thread (the
// garbage collector's too) in user and system mode.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScaling is one forwarded request through the whole handler
// (canonical form, match, client key, penalty box and override lookups,
// limit, RateLimit fields, forward over a transport that answers at
// once, metrics) with 1, 100 and 1000 policies, for each algorithm, with
// one client key or a million (the requests cycle through a million
// clients whose keys the store already holds), while 10000 other keys
// are banned and 1000 others have overrides. ns/op is CPU per request
// (one goroutine, wall clock), cpu-ns/op the process's CPU time per
// request, which a machine busy with other work disturbs less; B/key is the heap the store took for the million
// keys. miss is a request no policy matches (404).
//
//	go test -run '^$' -bench Scaling -benchmem ./proxy
func BenchmarkScaling(b *testing.B) {
	for _, alg := range scalingAlgorithms {
		for _, keys := range []int{1, 1_000_000} {
			name := "keys=1"
			if keys > 1 {
				name = fmt.Sprintf("keys=%dM", keys/1_000_000)
			}
			b.Run(alg.name+"/"+name, func(b *testing.B) {
				benchScaling(b, alg.limit, keys)
			})
		}
	}
	b.Run("miss", func(b *testing.B) {
		hs := scalingHandlers(b, scalingAlgorithms[0].limit, Options{Now: MonotonicClock()}, memstore.New(memstore.Options{}))
		req := httptest.NewRequest("GET", "http://nomatch.example/zzz/1", nil)
		req.RemoteAddr = "10.0.0.1:40000"
		for _, n := range scalingPolicies {
			b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
				h := hs[n]
				b.ReportAllocs()
				cpu, done := cpuTime(b), 0
				for b.Loop() {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != http.StatusNotFound {
						b.Fatalf("status %d", w.Code)
					}
					done++
				}
				b.ReportMetric(float64(cpuTime(b)-cpu)/float64(done), "cpu-ns/op")
			})
		}
	})
}

func benchScaling(b *testing.B, limit string, keys int) {
	ctx := context.Background()
	clock := MonotonicClock()
	addrs := scalingAddrs(10, keys)
	store := memstore.New(memstore.Options{MaxKeys: 2 * keys})
	bans := memstore.NewBans(memstore.BanOptions{})
	ov, err := memstore.NewOverrides(memstore.OverrideOptions{})
	if err != nil {
		b.Fatal(err)
	}
	hs := scalingHandlers(b, limit, Options{Bans: bans, Overrides: ov, Now: clock}, store)
	set := hs[1].snap.Load().set
	target := set.Policies[len(set.Policies)-1]
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	keyOf := func(addr string) string {
		ip, _, _ := strings.Cut(addr, ":")
		k, err := KeyFor(target, &set.Config.Server, []string{ip})
		if err != nil {
			b.Fatal(err)
		}
		return k
	}
	// The million clients' keys, counted once each, as their first
	// request would have.
	for _, a := range addrs {
		if _, err := target.Limiter.Allow(ctx, keyOf(a), clock(), 1); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	bytesPerKey := float64(after.HeapAlloc-before.HeapAlloc) / float64(keys)
	// Other clients: banned, or with an override.
	for i, a := range scalingAddrs(172, 10_000) {
		k := StoreKey(keyOf(a))
		if _, err := bans.Ban(ctx, target.Name, k, perkey.BanParams{Duration: time.Hour, Factor: 1, Max: time.Hour, Memory: 24 * time.Hour}, clock()); err != nil {
			b.Fatal(err)
		}
		if i < 1000 {
			if err := ov.Set(ctx, perkey.Override{Policy: target.Name, Key: k, Scale: 2, SetAt: clock()}); err != nil {
				b.Fatal(err)
			}
		}
	}
	stored := store.Len()
	req := httptest.NewRequest("GET", "http://api.example/api/v1/items/42", nil)
	for _, n := range scalingPolicies {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			h := hs[n]
			if p, ok := h.snap.Load().set.Match(req); !ok || p.Name != "target" {
				b.Fatalf("%d policies: the request matches %v, not target", n, p)
			}
			b.ReportAllocs()
			i, done := 0, 0
			cpu := cpuTime(b)
			for b.Loop() {
				req.RemoteAddr = addrs[i]
				if i++; i == len(addrs) {
					i = 0
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
				done++
			}
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(done), "cpu-ns/op")
			if keys > 1 {
				b.ReportMetric(bytesPerKey, "B/key")
			}
		})
	}
	if got := store.Len(); got != stored {
		b.Fatalf("the store holds %d keys after the requests, %d before: the requests were not counted under the keys populated", got, stored)
	}
}
