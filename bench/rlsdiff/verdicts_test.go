package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/limitproxy/limitproxy/bench/internal/rlsref"
	"github.com/limitproxy/limitproxy/internal/redistest"
)

// referenceConfigs is the importer's copy of envoyproxy/ratelimit's own
// configurations, and cases.txt its loads of them.
const referenceConfigs = "../../cmd/limitproxy/internal/envoyimport/testdata/reference"

// TestReferenceLoadVerdicts asks the reference server itself whether it
// loads each of its own configurations as cases.txt says (and its
// test/config/config_test.go expects), and `limitproxy import` the same
// question: both must give the case's verdict. The reference, started on
// a configuration it refuses, serves without one: every call fails with
// "no rate limit configuration loaded". A case that needs what the
// reference built does not have (its newer metadata, wildcards anywhere)
// is left out, and said so.
func TestReferenceLoadVerdicts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs envoyproxy/ratelimit")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	ref := buildReference(t, ctx, tmp)
	lp := buildLimitproxy(t, ctx, tmp)
	b, err := os.ReadFile(filepath.Join(referenceConfigs, "cases.txt"))
	if err != nil {
		t.Fatal(err)
	}
	redis := redistest.Start(t)
	asked, left := 0, 0
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "|")
		for len(f) < 5 {
			f = append(f, "")
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		name, merge, files, needs, refusal := f[0], f[1] == "true", strings.Split(f[2], ","), f[3], f[4]
		if needs == "metadata" && !ref.Features.Metadata || needs == "wildcards" && !ref.Features.Wildcards {
			t.Logf("%s: needs %s, which reference %s does not have: left out", name, needs, ref.Version)
			left++
			continue
		}
		t.Run(name, func(t *testing.T) {
			configs := map[string][]byte{}
			args := []string{"import", "-o", filepath.Join(t.TempDir(), "out.toml")}
			if merge {
				args = append(args, "-merge-domains")
			}
			for i, file := range files {
				b, err := os.ReadFile(filepath.Join(referenceConfigs, file))
				if err != nil {
					t.Fatal(err)
				}
				// One name a file, the same file twice included.
				configs[fmt.Sprintf("%d-%s", i, filepath.Base(file))] = b
				args = append(args, filepath.Join(referenceConfigs, file))
			}
			srv, err := rlsref.Start(rlsref.Options{Bin: ref.Bin, Dir: t.TempDir(), RedisAddr: redis.Addr(), Configs: configs, MergeDomains: merge})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "test-domain",
				Descriptors: []*rlscommon.RateLimitDescriptor{{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "key1", Value: "value1"}}}}})
			refLoads := err == nil
			if err != nil && !strings.Contains(err.Error(), "no rate limit configuration loaded") {
				t.Fatalf("the reference: %v", err)
			}
			out, err := exec.CommandContext(ctx, lp, args...).CombinedOutput()
			importLoads := err == nil
			if err != nil && !strings.Contains(string(out), refusal) {
				t.Errorf("limitproxy import refuses it with\n%s\nwithout %q", out, refusal)
			}
			switch want := refusal == ""; {
			case refLoads != want:
				log, _ := os.ReadFile(srv.Log)
				t.Errorf("the reference %s it; cases.txt says it %s\n%s", loads(refLoads), loads(want), log)
			case importLoads != want:
				t.Errorf("limitproxy import %s it, the reference %s it:\n%s", loads(importLoads), loads(want), out)
			}
		})
		asked++
	}
	t.Logf("%d loads asked of reference %s and of limitproxy import, %d left out", asked, ref.Version, left)
}

func loads(ok bool) string {
	if ok {
		return "loads"
	}
	return "refuses"
}
