package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/limitproxy/limitproxy/bench/internal/rlsgen"
	"github.com/limitproxy/limitproxy/bench/internal/rlsref"
	"github.com/limitproxy/limitproxy/internal/redistest"
)

// The generated differential's size: GeneratedConfigsEnv configurations
// (each with its sequence of calls; default defaultGeneratedConfigs, so
// that the run fits the test suite), from seed GeneratedSeedEnv (default
// 1), in batches of generatedBatch domains a server start.
const (
	GeneratedConfigsEnv     = "RLSDIFF_CONFIGS"
	GeneratedSeedEnv        = "RLSDIFF_SEED"
	defaultGeneratedConfigs = 60
	generatedBatch          = 25
)

// settings are the reference's environment settings of a batch, and
// whether they need its current version (QUOTA_MODE).
var settings = []struct {
	name     string
	env      []string
	quota    bool
	metadata bool // needs a reference with metadata (its dynamic_metadata as now)
}{
	{name: "defaults"},
	{name: "LIMIT_RESPONSE_HEADERS_ENABLED", env: []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_LIMIT_HEADER=X-Limit"}},
	{name: "SHADOW_MODE", env: []string{"SHADOW_MODE=true", "LIMIT_RESPONSE_HEADERS_ENABLED=true"}},
	{name: "QUOTA_MODE", env: []string{"QUOTA_MODE=true"}, quota: true},
	{name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", env: []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true", "LIMIT_RESPONSE_HEADERS_ENABLED=true"}},
	{name: "RESPONSE_DYNAMIC_METADATA", env: []string{"RESPONSE_DYNAMIC_METADATA=true"}, metadata: true},
}

// TestGenerated is the differential test over generated configurations:
// envoyproxy/ratelimit (built from its Go module at the pinned version, or
// from the checkout rlsref.SourceEnv names) and limitproxy serving
// `limitproxy import -env` of the same YAML, on the Redis store and on the
// memory store, get each configuration's calls one after another; every
// answer must be the reference's, field by field (overall_code, each
// status's code, current_limit, limit_remaining, duration_until_reset,
// the response headers). Configurations come in batches of domains, with
// the reference's settings (response headers, SHADOW_MODE, QUOTA_MODE,
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT)
// changing from batch to batch. The features the reference built does
// not have (rlsref.Features) are not generated.
//
// A case's calls are sent within one second of the clock (every
// duration_until_reset changes with the second, and a second's window
// with it), or, for a case with Waits, in one second between each wait
// for the next: a case that would not fit in what is left of the second
// waits for the next, and one that spanned more seconds anyway is not
// compared (counted as spanned). The import is served with -joined-keys
// (count_keys = "joined", lookup = "joined"), the reference's naming of
// its counts and its lookup by KEY_VALUE.
//
//	RLSDIFF_CONFIGS=1000 go test -run TestGenerated -v ./rlsdiff
//	LIMITPROXY_RLSREF_SRC=/path/to/ratelimit RLSDIFF_CONFIGS=1000 go test -run TestGenerated -v ./rlsdiff
func TestGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs envoyproxy/ratelimit and limitproxy")
	}
	n, seed := defaultGeneratedConfigs, uint64(1)
	if v := os.Getenv(GeneratedConfigsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a count", GeneratedConfigsEnv, v)
		}
	}
	if v := os.Getenv(GeneratedSeedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a number", GeneratedSeedEnv, v)
		}
		seed = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	tmp := t.TempDir()
	ref := buildReference(t, ctx, tmp)
	lp := buildLimitproxy(t, ctx, tmp)
	redis := redistest.Start(t)
	f := rlsgen.Features(ref.Features)
	t.Logf("reference %s: %+v", ref.Version, ref.Features)

	start := time.Now()
	var tally generatedTally
	// Batches until n configurations are compared (one whose calls
	// spanned two seconds is not, and another takes its place).
	next := 0
	for batch := 0; tally.configs < n && !t.Failed(); batch++ {
		if batch > 2*n/generatedBatch+4 {
			t.Fatalf("%d batches for %d configurations: %d compared", batch, n, tally.configs)
		}
		st := settings[batch%len(settings)]
		if st.quota && !f.QuotaStatus || st.metadata && !f.Metadata {
			st = settings[0]
		}
		var cases []*rlsgen.Case
		for range min(generatedBatch, n-tally.configs) {
			cases = append(cases, rlsgen.Generate(seed*1_000_003+uint64(next), fmt.Sprintf("g%d-%d", seed, next), f))
			next++
		}
		runBatch(ctx, t, ref.Bin, lp, redis.Addr(), st.name, st.env, cases, &tally)
	}
	elapsed := time.Since(start)
	t.Logf("%d configurations (%s), %d calls, %d descriptors (%d statuses OVER_LIMIT, %d with a limit, %d found by KEY_VALUE another descriptor than by keys and values apart) compared with the reference on each store; %d more configurations not compared (their calls spanned two seconds); %s, %s per configuration",
		tally.configs, tally.features(), tally.calls, tally.descriptors, tally.over, tally.limited, tally.joined, tally.spanned, elapsed.Round(time.Second), (elapsed / time.Duration(max(tally.configs, 1))).Round(time.Millisecond))
	if tally.configs > 0 && (tally.over == 0 || tally.limited == 0 || tally.over == tally.descriptors) {
		t.Errorf("the reference's answers tell nothing apart: %d of %d statuses over, %d with a limit", tally.over, tally.descriptors, tally.limited)
	}
	if tally.configs >= 20 && tally.joined == 0 {
		t.Errorf("no descriptor found another descriptor by KEY_VALUE than by keys and values apart: the lookup = \"joined\" is not compared")
	}
	if tally.spanned*10 > tally.configs {
		t.Errorf("%d of %d configurations spanned two seconds: the wait for a second of their own does not work", tally.spanned, tally.configs)
	}
}

// generatedTally counts what TestGenerated compared.
type generatedTally struct {
	configs, spanned, calls, descriptors, over, limited int
	joined                                              int // descriptors found otherwise by KEY_VALUE (rlsgen.Case.Joined)
	feature                                             map[string]int
}

// features says how many configurations have each feature.
func (g *generatedTally) features() string {
	var s []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range g.feature {
			if !yield(k) {
				return
			}
		}
	}) {
		s = append(s, fmt.Sprintf("%s %d", k, g.feature[k]))
	}
	return strings.Join(s, ", ")
}

// countFeatures notes what features c's YAML and calls have.
func (g *generatedTally) countFeatures(c *rlsgen.Case) {
	if g.feature == nil {
		g.feature = map[string]int{}
	}
	var yaml strings.Builder
	for _, b := range c.Files {
		yaml.Write(b)
	}
	y := yaml.String()
	// The key and value of each share_threshold wildcard.
	shared := map[string]bool{}
	for _, block := range strings.Split(y, "- key: ")[1:] {
		lines := strings.Split(block, "\n")
		if len(lines) < 2 || !strings.Contains(strings.Split(block, "descriptors:")[0], "share_threshold: true") {
			continue
		}
		k, _ := strconv.Unquote(strings.TrimSpace(lines[0]))
		if v, ok := strings.CutPrefix(strings.TrimSpace(lines[1]), "value: "); ok {
			v, _ = strconv.Unquote(v)
			shared[k+"\x00"+v] = true
		}
	}
	for name, has := range map[string]bool{
		"unlimited":       strings.Contains(y, "unlimited: true"),
		"rpu 0":           strings.Contains(y, "requests_per_unit: 0\n"),
		"replaces":        strings.Contains(y, "replaces:"),
		"shadow_mode":     strings.Contains(y, "shadow_mode: true"),
		"quota_mode":      strings.Contains(y, "quota_mode: true"),
		"share_threshold": strings.Contains(y, "share_threshold: true"),
		"detailed_metric": strings.Contains(y, "detailed_metric: true"),
		"value_to_metric": strings.Contains(y, "value_to_metric: true"),
		"metadata":        strings.Contains(y, "metadata:"),
		"wildcard":        strings.Contains(y, "*\""),
		"inner wildcard":  strings.Contains(y, "*x") || strings.Contains(y, "*y") || strings.Contains(y, "*z"),
		"nested":          strings.Contains(y, "    descriptors:"),
		"without rate_limit": func() bool {
			for _, l := range strings.Split(y, "  - key:")[1:] {
				if !strings.Contains(strings.SplitN(l, "descriptors:", 2)[0], "rate_limit:") {
					return true
				}
			}
			return false
		}(),
		"merged files":                 c.Merge,
		"key with _":                   strings.Contains(y, `key: "a_`) || strings.Contains(y, `key: "b_`),
		"found by KEY_VALUE otherwise": c.Joined > 0,
		"key with =":                   strings.Contains(y, `key: "c=x"`),
		"value with *": slices.ContainsFunc(c.Calls, func(r *rlsv3.RateLimitRequest) bool {
			return slices.ContainsFunc(r.Descriptors, func(d *rlscommon.RateLimitDescriptor) bool {
				return slices.ContainsFunc(d.Entries, func(e *rlscommon.RateLimitDescriptor_Entry) bool { return strings.Contains(e.Value, "*") })
			})
		}),
		"own limit": slices.ContainsFunc(c.Calls, func(r *rlsv3.RateLimitRequest) bool {
			return slices.ContainsFunc(r.Descriptors, func(d *rlscommon.RateLimitDescriptor) bool { return d.Limit != nil })
		}),
		"hits_addend 0": slices.ContainsFunc(c.Calls, func(r *rlsv3.RateLimitRequest) bool {
			return slices.ContainsFunc(r.Descriptors, func(d *rlscommon.RateLimitDescriptor) bool { return d.HitsAddend != nil && d.HitsAddend.Value == 0 })
		}),
		"large hits_addend": slices.ContainsFunc(c.Calls, func(r *rlsv3.RateLimitRequest) bool {
			return slices.ContainsFunc(r.Descriptors, func(d *rlscommon.RateLimitDescriptor) bool { return d.HitsAddend != nil && d.HitsAddend.Value >= 50 })
		}),
		"several descriptors": slices.ContainsFunc(c.Calls, func(r *rlsv3.RateLimitRequest) bool { return len(r.Descriptors) > 1 }),
		"aliasing (joined with _)": slices.ContainsFunc(c.Calls, func(r *rlsv3.RateLimitRequest) bool {
			return slices.ContainsFunc(r.Descriptors, func(d *rlscommon.RateLimitDescriptor) bool {
				return slices.ContainsFunc(d.Entries, func(e *rlscommon.RateLimitDescriptor_Entry) bool { return strings.Contains(e.Value, "_") })
			})
		}),
		"hits_addend 10⁹": slices.ContainsFunc(c.Calls, func(r *rlsv3.RateLimitRequest) bool {
			return slices.ContainsFunc(r.Descriptors, func(d *rlscommon.RateLimitDescriptor) bool {
				return d.HitsAddend != nil && d.HitsAddend.Value >= 999_000_000
			})
		}),
		"rpu above 10⁹": strings.Contains(y, "requests_per_unit: 4294967295\n") || strings.Contains(y, "requests_per_unit: 2000000001\n"),
		"share_threshold value as written": slices.ContainsFunc(c.Calls, func(r *rlsv3.RateLimitRequest) bool {
			return slices.ContainsFunc(r.Descriptors, func(d *rlscommon.RateLimitDescriptor) bool {
				return slices.ContainsFunc(d.Entries, func(e *rlscommon.RateLimitDescriptor_Entry) bool { return shared[e.Key+"\x00"+e.Value] })
			})
		}),
		"a second's windows end": len(c.Waits) > 0,
	} {
		if has {
			g.feature[name]++
		}
	}
	for _, u := range rlsgen.Units {
		if strings.Contains(y, "unit: "+u.Name+"\n") {
			g.feature["unit "+u.Name]++
		}
	}
}

// runBatch runs cases, a batch of domains, against the reference (with
// its environment settings env) and limitproxy on each store, all on the
// redis-server at redisAddr.
func runBatch(ctx context.Context, t *testing.T, refBin, lp, redisAddr, name string, env []string, cases []*rlsgen.Case, tally *generatedTally) {
	t.Helper()
	dir := t.TempDir()
	configs := map[string][]byte{}
	var files []string
	for _, c := range cases {
		for fname, b := range c.Files {
			configs[fname] = b
			p := filepath.Join(dir, fname)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			files = append(files, p)
		}
	}
	slices.Sort(files)
	// EXPIRATION_JITTER_MAX_SECONDS=0: each count expires its unit after
	// its last addition, as limitproxy's do (by default the reference
	// adds a random 0 to 299 s, which shows where two units share one).
	env = append(slices.Clone(env), "MERGE_DOMAIN_CONFIG=true", "EXPIRATION_JITTER_MAX_SECONDS=0")
	ref, err := rlsref.Start(rlsref.Options{Bin: refBin, Dir: t.TempDir(), RedisAddr: redisAddr, Configs: configs, MergeDomains: true, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Stop()
	imported := filepath.Join(dir, "rls.toml")
	// -joined-keys: counts named as the reference names them, aliases
	// and all (count_keys = "joined"), and descriptors looked up as it
	// does, by KEY_VALUE (lookup = "joined").
	imp := exec.CommandContext(ctx, lp, append([]string{"import", "-env", "-joined-keys", "-listen", "127.0.0.1:0", "-o", imported}, files...)...)
	imp.Env = append(os.Environ(), env...)
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("limitproxy import: %v\n%s", err, out)
	}
	toml, err := os.ReadFile(imported)
	if err != nil {
		t.Fatal(err)
	}
	store := map[string]string{
		"Redis":  fmt.Sprintf("\n[store]\nbackend = \"redis\"\n\n[store.redis]\naddrs = [%q]\ntimeout = \"5s\"\n", redisAddr),
		"memory": "\n[store]\nbackend = \"memory\"\n",
	}
	type target struct {
		name   string
		client rlsv3.RateLimitServiceClient
	}
	targets := []target{{name: "the reference"}}
	addrs := []string{ref.Addr}
	for _, s := range []string{"Redis", "memory"} {
		targets = append(targets, target{name: "limitproxy (" + s + ")"})
		addrs = append(addrs, startLimitproxyProc(t, lp, string(toml)+store[s]))
	}
	for i := range targets {
		conn, err := grpc.NewClient(addrs[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		targets[i].client = rlsv3.NewRateLimitServiceClient(conn)
	}
	perCall := 3 * time.Millisecond
	failures := 0
	for _, c := range cases {
		// The calls within one second: wait for the next when what is
		// left of this one may not do.
		need := time.Duration(len(c.Calls))*perCall + 50*time.Millisecond
		if len(c.Waits) > 0 {
			need = time.Duration(c.Waits[0])*perCall + 50*time.Millisecond
		}
		if now := time.Now(); c.AtMinute {
			time.Sleep(now.Truncate(time.Minute).Add(time.Minute + 10*time.Millisecond).Sub(now))
		} else if time.Second-now.Sub(now.Truncate(time.Second)) < need || now.Sub(now.Truncate(time.Second)) < 10*time.Millisecond {
			time.Sleep(now.Truncate(time.Second).Add(time.Second + 10*time.Millisecond).Sub(now))
		}
		t0 := time.Now()
		answers := make([][]*rlsv3.RateLimitResponse, len(c.Calls))
		for i, call := range c.Calls {
			for _, w := range c.Waits {
				if w == i {
					// The next second: its windows end.
					now := time.Now()
					time.Sleep(now.Truncate(time.Second).Add(time.Second + 10*time.Millisecond).Sub(now))
				}
			}
			for _, tg := range targets {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				resp, err := tg.client.ShouldRateLimit(cctx, call)
				cancel()
				if err != nil {
					// An error is compared as its code and message (the
					// reference's to bad input: UNKNOWN).
					st, _ := status.FromError(err)
					if st.Code() == codes.DeadlineExceeded || st.Code() == codes.Unavailable {
						t.Fatalf("%s, call %d of %s (%s): %v\n%s", tg.name, i+1, c.Domain, prototext.Format(call), err, caseText(c, string(toml)))
					}
					resp = &rlsv3.RateLimitResponse{RawBody: []byte(st.Code().String() + ": " + st.Message())}
				}
				answers[i] = append(answers[i], resp)
			}
		}
		t1 := time.Now()
		perCall = (perCall*3 + t1.Sub(t0)/time.Duration(len(c.Calls))) / 4
		tally.countFeatures(c)
		if t1.Unix()-t0.Unix() != int64(len(c.Waits)) {
			tally.spanned++
			continue
		}
		tally.configs++
		tally.joined += c.Joined
		var differ []string
		for i, as := range answers {
			tally.calls++
			for _, st := range as[0].Statuses {
				tally.descriptors++
				if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
					tally.over++
				}
				if st.CurrentLimit != nil {
					tally.limited++
				}
			}
			for j := 1; j < len(as); j++ {
				if !proto.Equal(normalLimits(as[0]), normalLimits(as[j])) {
					differ = append(differ, fmt.Sprintf("call %d: %s\n  %s: %s\n  the reference:    %s",
						i+1, oneLine(c.Calls[i]), targets[j].name, oneLine(as[j]), oneLine(as[0])))
				}
			}
		}
		if len(differ) > 0 {
			failures++
			t.Errorf("%s (batch of %s settings): %d answers differ from the reference's:\n%s\n%s",
				c.Domain, name, len(differ), strings.Join(differ[:min(len(differ), 8)], "\n"), caseText(c, string(toml)))
			if failures >= 3 {
				t.FailNow()
			}
		}
	}
}

// normalLimits is r with the spaces of each descriptor's limit in its
// dynamic_metadata removed: the limit's protobuf String(), whose spacing
// Go's protobuf varies from build to build on purpose.
func normalLimits(r *rlsv3.RateLimitResponse) *rlsv3.RateLimitResponse {
	ds := r.GetDynamicMetadata().GetFields()["descriptors"].GetListValue()
	if ds == nil {
		return r
	}
	r = proto.Clone(r).(*rlsv3.RateLimitResponse)
	for _, d := range r.DynamicMetadata.Fields["descriptors"].GetListValue().GetValues() {
		if l, ok := d.GetStructValue().GetFields()["limit"]; ok {
			d.GetStructValue().Fields["limit"] = structpb.NewStringValue(strings.Join(strings.Fields(l.GetStringValue()), ""))
		}
	}
	return r
}

// startLimitproxyProc is startLimitproxy (rlsdiff_test.go).
func startLimitproxyProc(t *testing.T, lp, conf string) string { return startLimitproxy(t, lp, conf) }

// oneLine is m in prototext on one line.
func oneLine(m proto.Message) string {
	return strings.Join(strings.Fields(prototext.Format(m)), " ")
}

// caseText is c's YAML, the policies of its domain in the import, and
// its calls, for a failure's message.
func caseText(c *rlsgen.Case, toml string) string {
	var b strings.Builder
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range c.Files {
			if !yield(n) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, "--- %s\n%s", name, c.Files[name])
	}
	b.WriteString("--- the import's policies of the domain\n")
	for _, p := range strings.Split(toml, "\n[[policy]]") {
		if strings.Contains(p, `rls_domain = "`+c.Domain+`"`) {
			b.WriteString("[[policy]]" + p + "\n")
		}
	}
	fmt.Fprintf(&b, "--- calls (the next second awaited before: %v)\n", c.Waits)
	for i, call := range c.Calls {
		fmt.Fprintf(&b, "%d: %s\n", i+1, oneLine(call))
	}
	return b.String()
}
