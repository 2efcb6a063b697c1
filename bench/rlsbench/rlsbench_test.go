package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitproxy/limitproxy/bench/internal/rlsload"
	"github.com/limitproxy/limitproxy/bench/internal/rlsref"
	"github.com/limitproxy/limitproxy/internal/redistest"
)

// referenceYAML is a configuration of the reference with each kind of
// descriptor: a bare key, a value overriding it, a value without limit, a
// tree whose lookup stops without going back up, a shared wildcard, a
// shadow limit. Day windows: a run never spans two, save at midnight UTC
// (checked).
const referenceYAML = `domain: bench
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: user
    value: vip
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: user
    value: free
  - key: tenant
    value: acme
    descriptors:
      - key: region
        value: us
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 100}
    descriptors:
      - key: region
        rate_limit: {unit: day, requests_per_unit: 1}
  - key: path
    value: /static/*
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
`

// referenceStream is a stream of calls and, after "=>", the codes the
// reference answers (overall, then each descriptor's).
const referenceStream = `
bench user=alice                       => OK OK
bench user=alice                       => OK OK
bench user=alice                       => OK OK
bench user=alice                       => OVER_LIMIT OVER_LIMIT
bench user=bob                         => OK OK
bench user=free                        => OK OK
bench user=free                        => OK OK
bench user=free                        => OK OK
bench user=free                        => OK OK
bench user=vip                         => OK OK
bench user=vip                         => OK OK
bench user=vip                         => OK OK
bench user=vip                         => OK OK
bench user=vip                         => OK OK
bench user=vip                         => OVER_LIMIT OVER_LIMIT
bench tenant=acme,region=us            => OK OK
bench tenant=acme,region=us            => OK OK
bench tenant=acme,region=us            => OVER_LIMIT OVER_LIMIT
bench tenant=acme,region=eu            => OK OK
bench tenant=acme,region=eu            => OK OK
bench tenant=acme                      => OK OK
bench tenant=globex,region=eu          => OK OK
bench tenant=globex,region=eu          => OVER_LIMIT OVER_LIMIT
bench path=/static/a                   => OK OK
bench path=/static/b                   => OK OK
bench path=/static/c                   => OVER_LIMIT OVER_LIMIT
bench shadowed=x                       => OK OK
bench shadowed=x                       => OK OK
bench user=alice user=bob              => OVER_LIMIT OVER_LIMIT,OK
bench user=alice,extra=1               => OK OK
other user=alice                       => OK OK
bench user=a%20b user=a%20b            => OK OK,OK
`

// TestReference builds envoyproxy/ratelimit at its pinned version, runs it
// against a redis-server of the test's own, and checks that rlsbench
// reports the reference's sequence of codes for a stream, then measures
// a short load. It skips only when the reference cannot be built here
// (no Go module download), saying why.
func TestReference(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs envoyproxy/ratelimit")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := rlsref.Build(ctx, t.TempDir())
	if err != nil {
		t.Skipf("the reference server cannot be built here: %v", err)
	}
	redis := redistest.Start(t)
	srv, err := rlsref.Start(rlsref.Options{Bin: bin, Dir: t.TempDir(), RedisAddr: redis.Addr(),
		Configs: map[string][]byte{"bench.yaml": []byte(referenceYAML)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	conn, err := dial(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)

	var lines, want []string
	for _, l := range strings.Split(strings.TrimSpace(referenceStream), "\n") {
		call, codes, _ := strings.Cut(l, "=>")
		lines = append(lines, strings.TrimSpace(call))
		want = append(want, strings.TrimSpace(codes))
	}
	stream, err := rlsload.ParseStream(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	day := time.Now().Unix() / 86400
	res := rlsload.Run(ctx, client, stream, rlsload.Options{Calls: len(stream), Concurrency: 1, Timeout: 5 * time.Second})
	if time.Now().Unix()/86400 != day {
		t.Skip("the run spanned midnight UTC, a new day window: its sequence is not the expected one")
	}
	if res.Errors > 0 {
		log, _ := os.ReadFile(srv.Log)
		t.Fatalf("%d calls failed, the first: %s\nthe reference's log:\n%s", res.Errors, res.FirstError, log)
	}
	for i := range want {
		if res.Sequence[i] != want[i] {
			t.Errorf("call %d (%s): the reference answered %q, want %q", i+1, lines[i], res.Sequence[i], want[i])
		}
	}

	// A load of distinct users, 8 calls in flight: every call answered,
	// figures that hold together.
	var load strings.Builder
	for i := range 500 {
		fmt.Fprintf(&load, "bench user=load%d\n", i)
	}
	stream, err = rlsload.ParseStream(strings.NewReader(load.String()))
	if err != nil {
		t.Fatal(err)
	}
	res = rlsload.Run(ctx, client, stream, rlsload.Options{Calls: 2000, Concurrency: 8, Timeout: 5 * time.Second})
	t.Log(res.Summary(srv.Addr))
	if res.Calls != 2000 || res.Errors != 0 || res.OK+res.OverLimit != 2000 || res.Descriptors != 2000 {
		t.Errorf("load: %s", res.Summary(srv.Addr))
	}
	if res.OverLimit != 500 { // 4 calls per user, 3 per day allowed
		t.Errorf("load: %d calls over the limit, want 500 (each of 500 users called 4 times, 3 allowed)", res.OverLimit)
	}
	if !(res.P50 > 0 && res.P50 <= res.P99 && res.P99 <= res.Max && res.DecisionsPerSec > 0) {
		t.Errorf("load: incoherent figures: %s", res.Summary(srv.Addr))
	}
}

// TestParseStream: entries, %-escapes, several descriptors, comments, and
// the lines refused.
func TestParseStream(t *testing.T) {
	calls, err := rlsload.ParseStream(strings.NewReader("# c\n\nd%20x a=1,b=x%2Cy c\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0].Domain != "d x" || len(calls[0].Descriptors) != 2 {
		t.Fatalf("got %v", calls)
	}
	e := calls[0].Descriptors[0].Entries
	if len(e) != 2 || e[0].Key != "a" || e[0].Value != "1" || e[1].Value != "x,y" || calls[0].Descriptors[1].Entries[0].Value != "" {
		t.Errorf("entries %v", calls[0].Descriptors)
	}
	for _, bad := range []string{"onlydomain\n", "d a=%zz\n", "# nothing\n"} {
		if _, err := rlsload.ParseStream(strings.NewReader(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := loopback("10.0.0.1:8081"); err == nil {
		t.Error("a non-loopback address accepted")
	}
}
