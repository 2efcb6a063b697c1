package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitproxy/limitproxy/bench/internal/rlsgen"
	"github.com/limitproxy/limitproxy/bench/internal/rlsload"
	"github.com/limitproxy/limitproxy/internal/redistest"
)

// everyFeature is the configuration of every documented feature of the
// reference (testdata/every_feature: its README's examples and more).
const everyFeature = "testdata/every_feature"

// TestEveryFeature is the Envoy user's try: the README's examples of
// envoyproxy/ratelimit and a file with what they do not show, imported
// without a flag (but -env, which reads its response headers setting),
// answer each call of calls.txt as the reference does, field by field,
// on both stores. With a reference older than its examples (the pinned
// version: no wildcards inside a value, quota_mode or metadata), the files
// that need them are left out, and said so.
func TestEveryFeature(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs envoyproxy/ratelimit and limitproxy")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	ref := buildReference(t, ctx, tmp)
	lp := buildLimitproxy(t, ctx, tmp)
	newer := map[string]bool{"example9": true, "features": true} // wildcards inside values, quota_mode, metadata
	full := ref.Features.Wildcards && ref.Features.QuotaStatus && ref.Features.Metadata
	c := &rlsgen.Case{Domain: "every feature", Files: map[string][]byte{}}
	files, _ := filepath.Glob(filepath.Join(everyFeature, "*.yaml"))
	if len(files) != 12 {
		t.Fatalf("%d files", len(files))
	}
	for _, f := range files {
		domain := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if newer[domain] && !full {
			t.Logf("%s left out: reference %s is older than it", filepath.Base(f), ref.Version)
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c.Files[filepath.Base(f)] = b
	}
	b, err := os.ReadFile(filepath.Join(everyFeature, "calls.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for n, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		call, opts, _ := strings.Cut(line, ";")
		reqs, err := rlsload.ParseStream(strings.NewReader(call))
		if err != nil {
			t.Fatalf("calls.txt:%d: %v", n+1, err)
		}
		req := reqs[0]
		if newer[req.Domain] && !full {
			continue
		}
		last := req.Descriptors[len(req.Descriptors)-1]
		for _, o := range strings.Fields(opts) {
			k, v, _ := strings.Cut(o, "=")
			switch k {
			case "hits":
				h, _ := strconv.ParseUint(v, 10, 64)
				last.HitsAddend = wrapperspb.UInt64(h)
			case "limit":
				rpu, unit, _ := strings.Cut(v, "/")
				r, _ := strconv.ParseUint(rpu, 10, 32)
				u, ok := typev3.RateLimitUnit_value[unit]
				if unit == "WEEK" {
					u, ok = 7, true
				}
				if !ok {
					t.Fatalf("calls.txt:%d: unit %q", n+1, unit)
				}
				last.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(r), Unit: typev3.RateLimitUnit(u)}
			default:
				t.Fatalf("calls.txt:%d: option %q", n+1, o)
			}
		}
		c.Calls = append(c.Calls, req)
	}
	if len(c.Calls) < 25 {
		t.Fatalf("%d calls", len(c.Calls))
	}
	// An Envoy user's import: no flag at all.
	dir := t.TempDir()
	args := []string{"import", "-o", filepath.Join(dir, "rls.toml")}
	for name, b := range c.Files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, p)
	}
	if out, err := exec.CommandContext(ctx, lp, args...).CombinedOutput(); err != nil {
		t.Fatalf("limitproxy import without flags: %v\n%s", err, out)
	}
	// Then served (runBatch imports with -env, for its response headers
	// setting) and asked; again, on a Redis of its own, when the calls
	// spanned two seconds (and were not compared).
	var tally generatedTally
	for try := 0; tally.configs == 0 && !t.Failed(); try++ {
		if try == 3 {
			t.Fatalf("the calls spanned two seconds three times")
		}
		redis := redistest.Start(t)
		runBatch(ctx, t, ref.Bin, lp, redis.Addr(), "LIMIT_RESPONSE_HEADERS_ENABLED", []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true"}, []*rlsgen.Case{c}, &tally)
	}
	t.Logf("%d files, %d calls, %d descriptors (%d OVER_LIMIT, %d with a limit), reference %s: every answer the reference's on each store",
		len(c.Files), tally.calls, tally.descriptors, tally.over, tally.limited, ref.Version)
}
