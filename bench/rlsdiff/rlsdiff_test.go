package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/limitproxy/limitproxy/bench/internal/rlsload"
	"github.com/limitproxy/limitproxy/bench/internal/rlsref"
	"github.com/limitproxy/limitproxy/internal/redistest"
)

// TestDifferential is bench/rls.sh's differential as a test: the
// reference, envoyproxy/ratelimit, and limitproxy's [rls] serving
// `limitproxy import` of the same YAML (bench/rls/config.yaml), both on
// one redis-server of the test's own, get the same calls one after
// another (bench/rls/differential.txt, then calls made at random from the
// imported policies' descriptors); their OK/OVER_LIMIT codes must be the
// same, call for call (fixed day windows). The same stream to limitproxy
// with the memory store must give them too, and to limitproxy serving the
// import with one limit off by one must not: the comparison can fail.
func TestDifferential(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs envoyproxy/ratelimit and limitproxy")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	refBin, err := rlsref.Build(ctx, tmp)
	if err != nil {
		t.Skipf("the reference server cannot be built here: %v", err)
	}
	lp := buildLimitproxy(t, ctx, tmp)
	const config = "../rls/config.yaml"
	imported := filepath.Join(tmp, "rls.toml")
	if out, err := exec.Command(lp, "import", "-listen", "127.0.0.1:0", "-o", imported, config).CombinedOutput(); err != nil {
		t.Fatalf("limitproxy import: %v\n%s", err, out)
	}
	importedTOML, err := os.ReadFile(imported)
	if err != nil {
		t.Fatal(err)
	}

	stream, err := rlsload.ReadStream("../rls/differential.txt")
	if err != nil {
		t.Fatal(err)
	}
	var pf struct {
		Policy []struct {
			Match struct {
				RLSDomain  string   `toml:"rls_domain"`
				Descriptor []string `toml:"descriptor"`
			}
		}
	}
	if _, err := toml.Decode(string(importedTOML), &pf); err != nil {
		t.Fatal(err)
	}
	patterns := map[string][][]string{}
	for _, p := range pf.Policy {
		patterns[p.Match.RLSDomain] = append(patterns[p.Match.RLSDomain], p.Match.Descriptor)
	}
	stream = append(stream, rlsload.RandomCalls(patterns, 2000, 28)...)

	redis := redistest.Start(t)
	yaml, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := rlsref.Start(rlsref.Options{Bin: refBin, Dir: t.TempDir(), RedisAddr: redis.Addr(),
		Configs: map[string][]byte{"config.yaml": yaml}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ref.Stop)

	store := func(backend string) string {
		if backend == "redis" {
			// A generous timeout: on a loaded machine a decision past the
			// default 50 ms would be made by on_error's memory store.
			return fmt.Sprintf("\n[store]\nbackend = \"redis\"\n\n[store.redis]\naddrs = [%q]\ntimeout = \"5s\"\n", redis.Addr())
		}
		return "\n[store]\nbackend = \"memory\"\n"
	}
	// The off-by-one import: bench.user's 3 a day becomes 4.
	const three = "limit = 3\nwindow = \"24h\""
	if !strings.Contains(string(importedTOML), three) {
		t.Fatalf("the import has no %q to break:\n%s", three, importedTOML)
	}
	broken := strings.Replace(string(importedTOML), three, "limit = 4\nwindow = \"24h\"", 1)

	day := time.Now().Unix() / 86400
	want := run(ctx, t, ref.Addr, stream)
	overs := 0
	for _, c := range want {
		if strings.HasPrefix(c, "OVER_LIMIT") {
			overs++
		}
	}
	if overs < 100 || overs == len(want) {
		t.Fatalf("the reference answered OVER_LIMIT to %d of %d calls: not a stream that tells servers apart", overs, len(want))
	}
	for _, c := range []struct {
		name, toml string
		same       bool
	}{
		{"limitproxy, Redis", string(importedTOML) + store("redis"), true},
		{"limitproxy, memory", string(importedTOML) + store("memory"), true},
		{"limitproxy, one limit off by one", broken + store("memory"), false},
	} {
		addr := startLimitproxy(t, lp, c.toml)
		got := run(ctx, t, addr, stream)
		var differ []string
		for i := range want {
			if got[i] != want[i] {
				differ = append(differ, fmt.Sprintf("call %d (%s): %q, the reference %q", i+1, describe(stream[i]), got[i], want[i]))
			}
		}
		switch {
		case time.Now().Unix()/86400 != day:
			t.Skip("the run spanned midnight UTC, a new day window: run it again")
		case c.same && len(differ) > 0:
			t.Errorf("%s: %d of %d calls differ from the reference:\n%s", c.name, len(differ), len(want), strings.Join(differ[:min(len(differ), 20)], "\n"))
		case !c.same && len(differ) == 0:
			t.Errorf("%s: every code is the reference's: the comparison cannot tell the servers apart", c.name)
		}
		t.Logf("%s: %d calls, %d differ from the reference (which answered OVER_LIMIT to %d)", c.name, len(want), len(differ), overs)
	}
}

// run sends stream through the RLS server at addr, one call after
// another, and returns each call's codes.
func run(ctx context.Context, t *testing.T, addr string, stream []*rlsv3.RateLimitRequest) []string {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := rlsload.Run(ctx, rlsv3.NewRateLimitServiceClient(conn), stream, rlsload.Options{Calls: len(stream), Concurrency: 1, Timeout: 5 * time.Second})
	if r.Errors > 0 {
		t.Fatalf("%s: %d calls failed, the first: %s", addr, r.Errors, r.FirstError)
	}
	return r.Sequence
}

// startLimitproxy runs the binary lp with the imported configuration
// plus a store, its [rls] on a free loopback port, and returns that
// address once it accepts connections. The process is killed by its PID
// at the test's end.
func startLimitproxy(t *testing.T, lp, imported string) string {
	t.Helper()
	rlsAddr, httpAddr := freeAddr(t), freeAddr(t)
	conf := strings.Replace(imported, `listen = "127.0.0.1:0"`, fmt.Sprintf("listen = %q", rlsAddr), 1) +
		fmt.Sprintf("\n[server]\nlisten = %q\n\n[admin]\nlisten = \"\"\n\n[log]\naccess = false\n", httpAddr)
	dir := t.TempDir()
	path := filepath.Join(dir, "rls.toml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "limitproxy.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(lp, "-config", path)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", rlsAddr, time.Second)
		if err == nil {
			c.Close()
			return rlsAddr
		}
		select {
		case <-done:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("limitproxy exited:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("limitproxy's [rls] did not listen on %s: %v\n%s", rlsAddr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freeAddr is a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// buildReference builds envoyproxy/ratelimit into dir, or skips t where
// it cannot be built.
func buildReference(t *testing.T, ctx context.Context, dir string) *rlsref.Reference {
	t.Helper()
	ref, err := rlsref.BuildReference(ctx, dir)
	if err != nil {
		t.Skipf("the reference server cannot be built here: %v", err)
	}
	return ref
}

// buildLimitproxy builds this tree's limitproxy into dir (from the main
// module, with its own go.sum) and returns its path.
func buildLimitproxy(t *testing.T, ctx context.Context, dir string) string {
	t.Helper()
	lp := filepath.Join(dir, "limitproxy")
	build := exec.CommandContext(ctx, "go", "build", "-o", lp, "./cmd/limitproxy")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build limitproxy: %v\n%s", err, out)
	}
	return lp
}
