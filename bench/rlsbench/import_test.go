package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitproxy/limitproxy/bench/internal/rlsload"
	"github.com/limitproxy/limitproxy/bench/internal/rlsref"
	"github.com/limitproxy/limitproxy/internal/redistest"
)

// importedFile is what the model reads of `limitproxy import`'s TOML.
type importedFile struct {
	Policy []struct {
		Name  string
		Mode  string
		Key   *[]string
		Match struct {
			RLSDomain  string   `toml:"rls_domain"`
			Descriptor []string `toml:"descriptor"`
		}
		Limits []struct {
			Limit  int64
			Window string
		}
	}
}

// model decides descriptors as docs/envoy.md says limitproxy's [rls] does
// with an imported file: the first policy of the domain whose patterns
// match the whole descriptor; its fixed window, aligned to the epoch,
// counting every call (as the reference does) under the policy and the
// values of its key (default: every entry's).
type model struct {
	f      importedFile
	counts map[string][2]int64 // counter → window index, count
	// unsure holds, per policy, the last window in which a call may have
	// been counted in one window or the next (it was sent before a window
	// boundary and answered after): no answer of it is compared until a
	// later window.
	unsure map[string]int64
}

// decide returns the code of descriptor d sent at tb and answered at ta,
// and false when the model cannot know it (a window boundary between).
func (m *model) decide(domain string, d *rlcommon.RateLimitDescriptor, tb, ta time.Time) (string, bool) {
	for _, p := range m.f.Policy {
		if p.Match.RLSDomain != domain || !matches(p.Match.Descriptor, d) {
			continue
		}
		if len(p.Limits) == 0 {
			return "OK", true
		}
		l := p.Limits[0]
		w, err := time.ParseDuration(l.Window)
		if err != nil {
			panic(err)
		}
		sec := int64(w / time.Second)
		wb, wa := tb.Unix()/sec, ta.Unix()/sec
		if wb != wa {
			m.unsure[p.Name] = wa
			return "", false
		}
		if u, ok := m.unsure[p.Name]; ok && wb <= u {
			return "", false
		}
		key := p.Name + "\x00"
		for _, e := range d.Entries {
			if p.Key == nil || slices.Contains(*p.Key, "descriptor:"+e.Key) {
				key += e.Key + "=" + e.Value + "\x00"
			}
		}
		c := m.counts[key]
		if c[0] != wb {
			c = [2]int64{wb, 0}
		}
		c[1]++
		m.counts[key] = c
		if c[1] > l.Limit && p.Mode != "shadow" {
			return "OVER_LIMIT", true
		}
		return "OK", true
	}
	return "OK", true
}

func matches(patterns []string, d *rlcommon.RateLimitDescriptor) bool {
	if len(patterns) != len(d.Entries) {
		return false
	}
	for i, pat := range patterns {
		e := d.Entries[i]
		k, v, hasV, wild := splitPattern(pat)
		switch {
		case k != e.Key:
			return false
		case !hasV:
		case wild:
			if !strings.HasPrefix(e.Value, v) {
				return false
			}
		case v != e.Value:
			return false
		}
	}
	return true
}

// splitPattern reads a descriptor pattern as docs/configuration.md writes
// it: "KEY", "KEY=VALUE" or "KEY=PREFIX*" (the fixtures' wildcards are
// trailing), a '\' making the '*', '=' or '\' after it literal. It
// returns the key, the value or prefix, whether there is one, and
// whether it is a prefix.
func splitPattern(pat string) (key, value string, hasValue, wild bool) {
	var cur strings.Builder
	for i := 0; i < len(pat); i++ {
		c := pat[i]
		if c == '\\' && i+1 < len(pat) && strings.IndexByte("\\*=", pat[i+1]) >= 0 {
			cur.WriteByte(pat[i+1])
			i++
			continue
		}
		switch {
		case c == '=' && !hasValue:
			key, hasValue = cur.String(), true
			cur.Reset()
		case c == '*' && hasValue && i == len(pat)-1:
			wild = true
		default:
			cur.WriteByte(c)
		}
	}
	if !hasValue {
		return cur.String(), "", false, false
	}
	return key, cur.String(), true, wild
}

// TestImportDecidesAsTheReference runs the reference with the importer's
// valid fixtures (cmd/limitproxy/internal/envoyimport/testdata/valid, all
// but two: see below) and
// sends it random calls made of their keys and values; each descriptor's
// code must be the one the imported TOML gives under docs/envoy.md's
// rules. It checks the importer against the reference itself, before
// limitproxy's [rls] serves the TOML.
func TestImportDecidesAsTheReference(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs envoyproxy/ratelimit")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	bin, err := rlsref.Build(ctx, tmp)
	if err != nil {
		t.Skipf("the reference server cannot be built here: %v", err)
	}
	lp := filepath.Join(tmp, "limitproxy")
	build := exec.Command("go", "build", "-o", lp, "./cmd/limitproxy")
	build.Dir = "../.." // the main module's own go.sum
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build limitproxy: %v\n%s", err, out)
	}
	files, _ := filepath.Glob("../../cmd/limitproxy/internal/envoyimport/testdata/valid/*.yaml")
	files = slices.DeleteFunc(files, func(f string) bool {
		// One server takes them all: one file of each domain (zero.yaml
		// of "d"), and what this model of codes decides one descriptor
		// at a time (not replaces.yaml, whose replaces act across the
		// descriptors of a call), with what the pinned reference has
		// (not metrics.yaml's metadata, quota_mode.yaml, a '*' inside a
		// value: newer).
		switch filepath.Base(f) {
		case "deep.yaml", "inner_wildcard.yaml", "key_equals.yaml", "quota_mode.yaml", "share_twice.yaml",
			"too_large.yaml", "replaces.yaml", "metrics.yaml":
			return true
		}
		return false
	})
	if len(files) < 5 {
		t.Fatalf("fixtures: %v", files)
	}
	configs := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		configs[filepath.Base(f)] = b
	}
	out := filepath.Join(tmp, "rls.toml")
	if b, err := exec.Command(lp, append([]string{"import", "-merge-domains", "-o", out}, files...)...).CombinedOutput(); err != nil {
		t.Fatalf("limitproxy import: %v\n%s", err, b)
	}
	m := &model{counts: map[string][2]int64{}, unsure: map[string]int64{}}
	if _, err := toml.DecodeFile(out, &m.f); err != nil {
		t.Fatal(err)
	}

	redis := redistest.Start(t)
	srv, err := rlsref.Start(rlsref.Options{Bin: bin, Dir: t.TempDir(), RedisAddr: redis.Addr(), Configs: configs, MergeDomains: true})
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

	byDomain := map[string][][]string{}
	for _, p := range m.f.Policy {
		byDomain[p.Match.RLSDomain] = append(byDomain[p.Match.RLSDomain], p.Match.Descriptor)
	}
	compared, unsure, over := 0, 0, 0
	for call, req := range rlsload.RandomCalls(byDomain, 3000, 7) {
		tb := time.Now()
		resp, err := client.ShouldRateLimit(ctx, req)
		ta := time.Now()
		if err != nil {
			log, _ := os.ReadFile(srv.Log)
			t.Fatalf("call %d: %v\nthe reference's log:\n%s", call, err, log)
		}
		for i, d := range req.Descriptors {
			want, sure := m.decide(req.Domain, d, tb, ta)
			if !sure {
				unsure++
				continue
			}
			compared++
			if want == "OVER_LIMIT" {
				over++
			}
			if got := resp.Statuses[i].Code.String(); got != want {
				t.Errorf("call %d, domain %q, descriptor %s: the reference %s, the imported TOML %s", call, req.Domain, entries(d), got, want)
			}
		}
	}
	t.Logf("%d descriptors compared (%d over a limit), %d not (sent and answered across a window boundary)", compared, over, unsure)
	if compared < 3000 {
		t.Errorf("only %d descriptors compared", compared)
	}
}

func entries(d *rlcommon.RateLimitDescriptor) string {
	var s []string
	for _, e := range d.Entries {
		s = append(s, fmt.Sprintf("%s=%s", e.Key, e.Value))
	}
	return strings.Join(s, ",")
}
