package config

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
)

var update = flag.Bool("update", false, "rewrite the .golden files of testdata/policy/invalid")

// TestInvalid runs every file of testdata/policy/invalid and compares the
// errors, every one with its position, to the file's .golden.
func TestInvalid(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/policy/invalid/*.toml")
	if len(files) == 0 {
		t.Fatal("no invalid test files")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			// With the Redis store's own checks, as the server passes
			// them (config itself does not import the store).
			_, err := LoadWith(f, Options{StoreChecks: map[Backend]func(limiter.Limit) error{BackendRedis: redisstore.Check}})
			if err == nil {
				t.Fatal("accepted")
			}
			got := strings.ReplaceAll(err.Error(), "../../testdata/policy/invalid/", "") + "\n"
			golden := strings.TrimSuffix(f, ".toml") + ".golden"
			if *update {
				os.WriteFile(golden, []byte(got), 0o644)
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("errors:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestValid loads every valid file and the example configuration.
func TestValid(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/policy/valid/*.toml")
	files = append(files, "../../config.example.toml")
	for _, f := range files {
		cfg, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(cfg.Policies) == 0 || len(cfg.Hash) != 64 {
			t.Errorf("%s: %d policies, hash %q", f, len(cfg.Policies), cfg.Hash)
		}
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := Load("../../testdata/policy/valid/minimal.toml")
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Server
	if s.Listen != ":8080" || s.ReadHeaderTimeout != 5*time.Second || s.ShutdownTimeout != 30*time.Second ||
		s.MaxHeaderBytes != 65536 || s.IPv6Prefix != 64 || s.RateLimitHeaders != "draft" {
		t.Errorf("server defaults: %+v", s)
	}
	p := cfg.Policies[0]
	if p.Mode != Enforce || p.OnMissing != MissingShared || len(p.Key) != 1 || p.Key[0].Kind != KeyIP || !p.Match.All {
		t.Errorf("policy defaults: %+v", p)
	}
	if tb := p.Limits[0].Params().(limiter.TokenBucketParams); tb.Burst != 100 {
		t.Errorf("token bucket burst default = %d, want one period of the rate (100)", tb.Burst)
	}
	if p.Reject.Status != 429 {
		t.Errorf("reject status default = %d", p.Reject.Status)
	}
	if u := cfg.Upstreams[0]; !u.Buffering || u.MinBodyRate != 1024 || u.RateWindow != 20*time.Second || u.MaxStreamsPerKey != 16 {
		t.Errorf("upstream body defaults: buffering %v, min_body_rate %d, body_rate_window %v, max_streams_per_key %d",
			u.Buffering, u.MinBodyRate, u.RateWindow, u.MaxStreamsPerKey)
	}
}

// TestDefaultMaxWait: without max_wait, a leaky bucket lets its whole
// queue wait whatever its cost — queue 5 at cost 2 and 10/s is 6 requests
// of 200ms — and the interval is rounded up as the bucket spaces requests
// (3/s: 333,333,334ns), so the last waiter is never cut off by rounding.
func TestDefaultMaxWait(t *testing.T) {
	for _, c := range []struct {
		limit string
		want  time.Duration
	}{
		{`rate = "10/s"
  queue = 5
  cost = 2`, 1200 * time.Millisecond},
		{`rate = "10/s"
  queue = 5`, 600 * time.Millisecond},
		{`rate = "3/s"
  queue = 3`, 4 * 333_333_334},
		{`rate = "10/s"
  queue = 5
  cost = 2
  max_wait = "1s"`, time.Second},
	} {
		f := filepath.Join(t.TempDir(), "c.toml")
		os.WriteFile(f, []byte(`[[upstream]]
name = "u"
targets = ["http://127.0.0.1:1"]
[[policy]]
name = "p"
upstream = "u"
  [[policy.limits]]
  algorithm = "leaky_bucket"
  `+c.limit+"\n"), 0o644)
		cfg, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Policies[0].Limits[0].Params().(limiter.LeakyBucketParams).MaxWait; got != c.want {
			t.Errorf("%s: max_wait %v, want %v", c.limit, got, c.want)
		}
	}
}

// TestClasses: classes keep their order, highest first; "default" stays
// where it is listed, or comes last; each policy gets its class's index.
func TestClasses(t *testing.T) {
	cfg, err := Load("../../testdata/policy/valid/classes.toml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Upstreams[0].Concurrency.Classes, []Class{{"checkout", 0.2}, {"default", 0}, {"bulk", 0}}; !slices.Equal(got, want) {
		t.Errorf("shop's classes %v, want %v", got, want)
	}
	if got, want := cfg.Upstreams[1].Concurrency.Classes, []Class{{"interactive", 0.25}, {"default", 0}}; !slices.Equal(got, want) {
		t.Errorf("legacy's classes %v, want %v", got, want)
	}
	for i, want := range []struct {
		class int
		name  string
	}{{0, "checkout"}, {2, "bulk"}, {1, "default"}, {1, "default"}} {
		if p := cfg.Policies[i]; p.Class != want.class || p.ClassName != want.name {
			t.Errorf("policy %s: class %d %q, want %d %q", p.Name, p.Class, p.ClassName, want.class, want.name)
		}
	}
}

// TestCalendarWindows: a calendar window and its time zone reach the
// limit, UTC when time_zone is left out, for a policy's limit and a
// shared one alike.
func TestCalendarWindows(t *testing.T) {
	cfg, err := Load("../../testdata/policy/valid/calendar.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		policy, limit int
		unit          limiter.Calendar
		zone          string
	}{
		{0, 0, limiter.CalendarMonth, "Europe/Berlin"},
		{0, 1, limiter.CalendarDay, "Europe/Berlin"},
		{1, 0, limiter.CalendarMonth, "Europe/Berlin"},
		{1, 1, limiter.CalendarWeek, "UTC"},
		{1, 2, limiter.CalendarYear, "America/New_York"},
	} {
		l := cfg.Policies[c.policy].Limits[c.limit]
		unit, loc := l.Calendar()
		if unit != c.unit || loc == nil || loc.String() != c.zone {
			t.Errorf("policy %d limit %d (%v): %v in %v, want %v in %s", c.policy, c.limit, l, unit, loc, c.unit, c.zone)
		}
	}
	if unit, _ := cfg.Policies[2].Limits[0].Calendar(); unit != 0 {
		t.Errorf("a token bucket has calendar unit %v", unit)
	}
	// Loaded again (a reload), after the first has decided: the same
	// policies, as a reload compares them.
	l := cfg.Policies[0].Limits[0].Driver()
	l.Step(l.NewStates(1), 0, nil, time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC), 1)
	again, err := Load("../../testdata/policy/valid/calendar.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.Policies, again.Policies) {
		t.Error("the same file loaded twice gives policies that differ")
	}
}

// TestRLSEnvoyKeys reads what an RLS policy's envoyproxy/ratelimit keys
// and [rls]'s give (testdata/policy/valid/rls_envoy.toml).
func TestRLSEnvoyKeys(t *testing.T) {
	cfg, err := Load("../../testdata/policy/valid/rls_envoy.toml")
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.RLS
	if r.Compatibility != CompatEnvoy || r.ResponseHeaders != RLSHeadersEnvoy || r.LimitHeader != "X-RateLimit-Limit" ||
		r.RemainingHeader != "X-RateLimit-Remaining" || r.ResetHeader != "X-RateLimit-Reset" || r.ShadowMode || r.QuotaMode ||
		!slices.Equal(r.Domains, []string{"empty"}) {
		t.Errorf("[rls] = %+v", r)
	}
	byName := map[string]*Policy{}
	for i := range cfg.Policies {
		byName[cfg.Policies[i].Name] = &cfg.Policies[i]
	}
	banned := byName["rl.foo.bar_banned"]
	if q, w := banned.Quota(0); q != 0 || w != time.Minute || !slices.Equal(banned.RLS.Zero, []bool{true}) || !slices.Equal(banned.RLS.Names, []string{"banned_limit"}) {
		t.Errorf("a limit of 0: quota %d per %v, zero %v, names %v", q, w, banned.RLS.Zero, banned.RLS.Names)
	}
	if q, _ := banned.Limits[0].Quota(); q != 1 {
		t.Errorf("a limit of 0 is bound with a limit of %d, want 1", q)
	}
	if p := byName["rl.category_account"]; !slices.Equal(p.RLS.Replaces, []string{"bkthomps", "fake_name"}) || p.RLS.Zero != nil || !slices.Equal(p.RLS.Names, []string{""}) {
		t.Errorf("replaces: %+v", p.RLS)
	}
	if p := byName["rl.service_service_1"]; !p.RLS.QuotaMode || p.RLS.Unlimited {
		t.Errorf("quota_mode: %+v", p.RLS)
	}
	if p := byName["rl.qux"]; !p.RLS.Unlimited || len(p.Limits) != 0 {
		t.Errorf("unlimited: %+v, %d limits", p.RLS, len(p.Limits))
	}
	if p := byName["rl.foo.stop"]; p.RLS.Unlimited || len(p.Limits) != 0 {
		t.Errorf("without limits: %+v, %d limits", p.RLS, len(p.Limits))
	}
	if p := byName["rl.files.files"]; len(p.Key) != 2 || p.Key[0] != p.Key[1] {
		t.Errorf("a key that repeats a descriptor key: %v", p.Key)
	}
	if p := byName["rl.shared.files"]; len(p.Key) != 1 || p.Key[0] != (KeyPart{Kind: KeyDescriptor, Name: "files", Nth: 2}) || p.Key[0].String() != "descriptor:files#2" {
		t.Errorf("descriptor:files#2: %#v", p.Key)
	}
}

// TestDescriptorPatternEscapes: '\' makes a '*', '=' or '\' literal: a
// value's '*' that is no wildcard, a key with '='; before any other
// character it is itself; String writes what parses back.
func TestDescriptorPatternEscapes(t *testing.T) {
	for _, c := range []struct {
		pat, key, value string
		match, miss     string // values
	}{
		{`k=a\*b`, "k", "a*b", "a*b", "axb"},
		{`k=a*b`, "k", "a*b", "axyb", "ax"},
		{`a\=b=c`, "a=b", "c", "c", "d"},
		{`a\=b`, "a=b", "", "anything", ""},
		{`k=x\\*`, "k", `x\*`, `x\yz`, "xyz"},
		{`k=\d+`, "k", `\d+`, `\d+`, "d+"},
		{`k=`, "k", "", "", "x"},
	} {
		d, err := parseDescriptorPattern(c.pat)
		if err != nil {
			t.Fatalf("%s: %v", c.pat, err)
		}
		if d.Key != c.key || d.Value != c.value {
			t.Errorf("%s: key %q value %q, want %q %q", c.pat, d.Key, d.Value, c.key, c.value)
		}
		if !d.Matches(c.key, c.match) || c.miss != "" && d.Matches(c.key, c.miss) {
			t.Errorf("%s: matches %q %v, %q %v", c.pat, c.match, d.Matches(c.key, c.match), c.miss, d.Matches(c.key, c.miss))
		}
		if back, err := parseDescriptorPattern(d.String()); err != nil || back.String() != d.String() || back.Key != d.Key || back.Value != d.Value || back.Glob != d.Glob || back.Exact != d.Exact {
			t.Errorf("%s: String %q parses back as %+v (%v)", c.pat, d.String(), back, err)
		}
	}
}
