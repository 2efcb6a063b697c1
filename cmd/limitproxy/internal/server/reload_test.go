package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/poll"
	"github.com/limitproxy/limitproxy/policy/config"
)

// configText writes a configuration whose one catch-all policy is a token
// bucket of the given burst at rate (so the burst shows in RateLimit-Policy
// as q=), in front of upstream.
func configText(upstream string, burst int, rate string, extra string) string {
	return fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[log]
level = "error"
access = false
[[upstream]]
name = "app"
targets = [%q]
%s
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = %q
  burst = %d
`, upstream, extra, rate, burst)
}

// running is a limitproxy started by serve on a config file.
type running struct {
	dir, path string
	proxy     string // base URL
	admin     string // base URL
	upstream  *httptest.Server
	stop      func()
	logs      *syncWriter
}

func startFile(t testing.TB, write func(path string, up string), hooks ...func(*process)) *running {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	path := filepath.Join(dir, "limitproxy.toml")
	write(path, up.URL)
	logs := &syncWriter{w: &bytes.Buffer{}}
	l, stop := serveFile(t, path, logs, hooks...)
	r := &running{dir: dir, path: path, proxy: "http://" + l.Proxy.String(), admin: "http://" + l.Admin.String(), upstream: up, logs: logs, stop: stop}
	return r
}

// serveFile runs serve on the configuration file at path until the test
// ends, and returns where it listens and a function that stops it (also
// registered as a cleanup; stopping twice is harmless).
func serveFile(t testing.TB, path string, logs *syncWriter, hooks ...func(*process)) (listening, func()) {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan listening, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, path, cfg, logs, ready, hooks...) }()
	var l listening
	select {
	case l = <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return l, stop
}

// quota returns the q= of RateLimit-Policy for a request through the proxy.
func (r *running) quota(t testing.TB) string {
	t.Helper()
	resp, err := http.Get(r.proxy + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, q, _ := strings.Cut(resp.Header.Get("RateLimit-Policy"), ";q=")
	q, _, _ = strings.Cut(q, ";")
	return q
}

// waitQuota polls until the proxy reports quota q, for at most 10 seconds
// (a reload takes milliseconds; the bound is for a machine that is busy).
func (r *running) waitQuota(t testing.TB, q string) time.Duration {
	t.Helper()
	begin := time.Now()
	if !poll.Until(10*time.Second, func() bool { return r.quota(t) == q }) {
		t.Fatalf("quota still %s after 10s, want %s", r.quota(t), q)
	}
	return time.Since(begin)
}

func writeAtomic(t testing.TB, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestReloadTriggers: each trigger of docs/configuration.md applies a new file.
func TestReloadTriggers(t *testing.T) {
	write := func(path, up string) { os.WriteFile(path, []byte(configText(up, 10, "1/h", "")), 0o644) }
	t.Run("write in place", func(t *testing.T) {
		r := startFile(t, write)
		r.waitQuota(t, "10")
		os.WriteFile(r.path, []byte(configText(r.upstream.URL, 20, "1/h", "")), 0o644)
		r.waitQuota(t, "20")
	})
	t.Run("rename over", func(t *testing.T) {
		r := startFile(t, write)
		writeAtomic(t, r.path, configText(r.upstream.URL, 30, "1/h", ""))
		r.waitQuota(t, "30")
	})
	t.Run("kubernetes symlink swap", func(t *testing.T) {
		// A ConfigMap volume: limitproxy.toml -> ..data/limitproxy.toml,
		// ..data -> ..2026_v1; an update writes ..2026_v2 and renames a
		// new ..data link over the old one.
		var up string
		r := startFile(t, func(path, u string) {
			up = u
			dir := filepath.Dir(path)
			os.Mkdir(filepath.Join(dir, "..v1"), 0o755)
			os.WriteFile(filepath.Join(dir, "..v1", "limitproxy.toml"), []byte(configText(u, 40, "1/h", "")), 0o644)
			os.Symlink("..v1", filepath.Join(dir, "..data"))
			os.Symlink(filepath.Join("..data", "limitproxy.toml"), path)
		})
		r.waitQuota(t, "40")
		os.Mkdir(filepath.Join(r.dir, "..v2"), 0o755)
		os.WriteFile(filepath.Join(r.dir, "..v2", "limitproxy.toml"), []byte(configText(up, 41, "1/h", "")), 0o644)
		os.Symlink("..v2", filepath.Join(r.dir, "..data_tmp"))
		if err := os.Rename(filepath.Join(r.dir, "..data_tmp"), filepath.Join(r.dir, "..data")); err != nil {
			t.Fatal(err)
		}
		r.waitQuota(t, "41")
	})
	t.Run("SIGHUP", func(t *testing.T) {
		// The watcher sees every write, so let it apply this one first;
		// then SIGHUP must reload (the same file) on its own.
		r := startFile(t, write)
		writeAtomic(t, r.path, configText(r.upstream.URL, 50, "1/h", ""))
		r.waitQuota(t, "50")
		before := r.status(t)["last_reload"].(map[string]any)["successes"].(float64)
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		if last := r.lastReload(t, func(l map[string]any) bool {
			return l["trigger"] == "sighup" && l["successes"].(float64) > before
		}); last["trigger"] != "sighup" || last["successes"].(float64) <= before {
			t.Fatalf("no reload after SIGHUP: %v", last)
		}
	})
	t.Run("admin API", func(t *testing.T) {
		r := startFile(t, write)
		os.WriteFile(r.path, []byte(configText(r.upstream.URL, 60, "1/h", "")), 0o644)
		resp, err := http.Post(r.admin+"/api/v1/reload", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 200 || body["applied"] != true {
			t.Fatalf("POST /api/v1/reload: %d %v", resp.StatusCode, body)
		}
		if q := r.quota(t); q != "60" {
			t.Errorf("after the API reload answered, quota %s, want 60", q)
		}
	})
}

func (r *running) status(t *testing.T) map[string]any {
	t.Helper()
	resp, err := http.Get(r.admin + "/api/v1/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// lastReload returns /api/v1/config's last_reload once done(it) holds, or
// after 10 seconds. The status is recorded just after new policies go
// live, so a test that saw them in force waits for it this way.
func (r *running) lastReload(t *testing.T, done func(map[string]any) bool) map[string]any {
	t.Helper()
	var last map[string]any
	poll.Until(10*time.Second, func() bool {
		last = r.status(t)["last_reload"].(map[string]any)
		return done(last)
	})
	return last
}

// TestReloadRejectsBadFiles: a bad file is refused with its position, and
// the policies in force keep serving.
func TestReloadRejectsBadFiles(t *testing.T) {
	t.Parallel()
	r := startFile(t, func(path, up string) { os.WriteFile(path, []byte(configText(up, 10, "1/h", "")), 0o644) })
	good := configText(r.upstream.URL, 10, "1/h", "")
	for _, c := range []struct {
		name, text, want string
	}{
		// Lines as config writes them: name on 13, upstream 14, rate 17, burst 18.
		{"syntax error", strings.Replace(good, `name = "all"`, `name = "all`, 1), "limitproxy.toml:13:"},
		{"unknown key", strings.Replace(good, `burst = 10`, "burst = 10\n  burts = 3", 1), `limitproxy.toml:19:3: policy "all" limits[0].burts: unknown key "burts" (did you mean "burst"?)`},
		{"bad value", strings.Replace(good, `rate = "1/h"`, `rate = "1/x"`, 1), `limitproxy.toml:17:3: policy "all" limits[0].rate: bad rate "1/x"`},
		{"unknown upstream", strings.Replace(good, `upstream = "app"`, `upstream = "nope"`, 1), `limitproxy.toml:14:1: policy "all" upstream: unknown upstream "nope"`},
	} {
		os.WriteFile(r.path, []byte(c.text), 0o644)
		resp, err := http.Post(r.admin+"/api/v1/reload", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Applied bool
			Errors  []struct{ Error string }
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 422 || body.Applied || len(body.Errors) == 0 || !strings.Contains(body.Errors[0].Error, c.want) {
			t.Errorf("%s: %d %+v, want 422 with %q", c.name, resp.StatusCode, body, c.want)
		}
		if q := r.quota(t); q != "10" {
			t.Errorf("%s: the old policy is not in force any more: quota %s", c.name, q)
		}
		last := r.status(t)["last_reload"].(map[string]any)
		if last["successful"] != false || !strings.Contains(last["error"].(string), c.want) {
			t.Errorf("%s: /api/v1/config last_reload %v", c.name, last)
		}
	}
	// Fixing the file recovers.
	os.WriteFile(r.path, []byte(configText(r.upstream.URL, 11, "1/h", "")), 0o644)
	r.waitQuota(t, "11")
	if last := r.lastReload(t, func(l map[string]any) bool { return l["successful"] == true }); last["successful"] != true {
		t.Errorf("after a good file: %v", last)
	}
}

// TestReloadKeepsCounters: a token bucket drained before a reload is still
// drained after one that keeps its policy and algorithm.
func TestReloadKeepsCounters(t *testing.T) {
	t.Parallel()
	r := startFile(t, func(path, up string) { os.WriteFile(path, []byte(configText(up, 3, "1/h", "")), 0o644) })
	status := func() int {
		resp, err := http.Get(r.proxy + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 3 {
		status()
	}
	if s := status(); s != 429 {
		t.Fatalf("drained bucket: %d", s)
	}
	// An unrelated change: a second upstream.
	writeAtomic(t, r.path, configText(r.upstream.URL, 3, "1/h", "[[upstream]]\nname = \"spare\"\ntargets = [\"http://127.0.0.1:1\"]"))
	poll.For(t, 10*time.Second, func() bool { return len(r.status(t)["upstreams"].([]any)) == 2 }, "the unrelated change was not applied")
	if s := status(); s != 429 {
		t.Errorf("after an unrelated reload the bucket admitted again (%d): its counter was reset", s)
	}
}

// TestReloadUnderLoad rewrites the file 20 times while clients send
// requests all along: bursts of five writes 30ms apart, of configuration A,
// then B, and so on, the last write invalid, each burst followed by a
// quiet until a reload has applied it. No request may fail, none may get a 5xx, and
// every answer must come from one of the two configurations.
func TestReloadUnderLoad(t *testing.T) {
	t.Parallel()
	r := startFile(t, func(path, up string) { os.WriteFile(path, []byte(configText(up, 1000000, "1000000/s", "")), 0o644) })
	a := configText(r.upstream.URL, 1000000, "1000000/s", "")
	b := configText(r.upstream.URL, 2000000, "1000000/s", "")
	var (
		requests, failures atomic.Int64
		mu                 sync.Mutex
		quotas             = map[string]int{}
		bad                []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			client := &http.Client{Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(r.proxy + "/x")
				requests.Add(1)
				if err != nil {
					failures.Add(1)
					mu.Lock()
					bad = append(bad, err.Error())
					mu.Unlock()
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				_, q, _ := strings.Cut(resp.Header.Get("RateLimit-Policy"), ";q=")
				q, _, _ = strings.Cut(q, ";")
				mu.Lock()
				quotas[q]++
				if resp.StatusCode != 200 {
					bad = append(bad, fmt.Sprintf("status %d", resp.StatusCode))
				}
				mu.Unlock()
			}
		})
	}
	count := func() float64 { // reloads tried, whether applied or refused
		last := r.status(t)["last_reload"].(map[string]any)
		return last["successes"].(float64) + last["failures"].(float64)
	}
	var reloads float64
	for i := range 20 {
		text := a
		switch {
		case i == 19:
			text = strings.Replace(a, "burst", "bursty", 1)
		case (i/5)%2 == 1:
			text = b
		}
		if i%5 == 0 {
			reloads = count()
		}
		if i%3 == 0 {
			os.WriteFile(r.path, []byte(text), 0o644)
		} else {
			writeAtomic(t, r.path, text)
		}
		if i%5 == 4 {
			// Quiet until the burst of five writes is applied: the
			// watcher reloads once the writes have stopped for its
			// debounce. The last burst ends with the invalid write,
			// whose reload fails.
			applied := func() bool {
				if i == 19 {
					return r.status(t)["last_reload"].(map[string]any)["successful"] == false
				}
				return count() > reloads && r.quota(t) == map[string]string{a: "1000000", b: "2000000"}[text]
			}
			poll.For(t, 10*time.Second, applied, "burst %d was not applied", i/5)
			continue
		}
		time.Sleep(30 * time.Millisecond) // the pace of a burst, shorter than the debounce: the scenario, not a wait
	}
	close(stop)
	wg.Wait()
	t.Logf("%d requests during 20 rewrites; answers by quota: %v", requests.Load(), quotas)
	if failures.Load() > 0 || len(bad) > 0 {
		t.Errorf("%d transport errors; bad answers: %v", failures.Load(), bad[:min(len(bad), 10)])
	}
	for q := range quotas {
		if q != "1000000" && q != "2000000" {
			t.Errorf("an answer with quota %q belongs to neither configuration", q)
		}
	}
	if quotas["2000000"] == 0 || quotas["1000000"] == 0 {
		t.Errorf("answers by quota %v: both configurations should have served", quotas)
	}
	if failed := r.status(t)["last_reload"].(map[string]any)["failures"].(float64); failed == 0 {
		t.Error("the invalid writes were not counted as failed reloads")
	}
}

// TestReloadWhileQueued: a request waiting in a leaky-bucket queue when
// the file changes is still forwarded.
func TestReloadWhileQueued(t *testing.T) {
	t.Parallel()
	leaky := func(up string, rate string) string {
		return strings.Replace(configText(up, 1, "1/h", ""), `  algorithm = "token_bucket"
  rate = "1/h"
  burst = 1`, `  algorithm = "leaky_bucket"
  rate = "`+rate+`"
  queue = 5
  max_wait = "10s"`, 1)
	}
	r := startFile(t, func(path, up string) { os.WriteFile(path, []byte(leaky(up, "1/s")), 0o644) })
	results := make(chan int, 3)
	for range 3 { // the first leaves at once, the others wait 1s and 2s
		go func() {
			resp, err := http.Get(r.proxy + "/x")
			if err != nil {
				results <- 0
				return
			}
			resp.Body.Close()
			results <- resp.StatusCode
		}()
	}
	waitMetric(t, r.admin, `limitproxy_queue_depth{policy="all"} 2`) // two of them wait
	writeAtomic(t, r.path, leaky(r.upstream.URL, "2/s"))
	poll.For(t, 10*time.Second, func() bool { return r.status(t)["last_reload"].(map[string]any)["successes"].(float64) >= 1 }, "the reload did not happen")
	var got []int
	for range 3 {
		got = append(got, <-results)
	}
	if slices.ContainsFunc(got, func(s int) bool { return s != 200 }) {
		t.Errorf("statuses %v: every queued request must be forwarded across a reload", got)
	}
}

// BenchmarkReloadLatency measures the time from an atomic file write to the
// new policy answering (the watcher's debounce, the load, the swap):
//
//	go test -run '^$' -bench ReloadLatency -benchtime 5x ./cmd/limitproxy/internal/server
func BenchmarkReloadLatency(b *testing.B) {
	r := startFile(b, func(path, up string) { os.WriteFile(path, []byte(configText(up, 100, "1000000/s", "")), 0o644) })
	b.ResetTimer()
	for i := range b.N {
		q := 101 + i
		writeAtomic(b, r.path, configText(r.upstream.URL, q, "1000000/s", ""))
		r.waitQuota(b, fmt.Sprint(q))
	}
}

// TestReloadRestartOnly: a file that also changes a setting needing a
// restart is applied except for that setting, which is reported.
func TestReloadRestartOnly(t *testing.T) {
	t.Parallel()
	r := startFile(t, func(path, up string) { os.WriteFile(path, []byte(configText(up, 10, "1/h", "")), 0o644) })
	text := strings.Replace(configText(r.upstream.URL, 12, "1/h", ""), `listen = "127.0.0.1:0"
[admin]`, `listen = "127.0.0.1:1"
[admin]`, 1)
	writeAtomic(t, r.path, text)
	r.waitQuota(t, "12") // the policy change is in force, on the old listener
	last := r.lastReload(t, func(l map[string]any) bool { return l["requires_restart"] != nil })
	if rr, _ := last["requires_restart"].([]any); len(rr) != 1 || rr[0] != "server.listen" {
		t.Errorf("requires_restart = %v, want [server.listen]", last["requires_restart"])
	}
}

// TestRemovedLimits: the state names of limits a reload removes, and only
// those, are handed to the store to release.
func TestRemovedLimits(t *testing.T) {
	parse := func(text string) *config.Config {
		t.Helper()
		cfg, err := config.Parse("x.toml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	a := parse(configText("http://127.0.0.1:1", 10, "1/h", ""))
	b := parse(configText("http://127.0.0.1:1", 20, "1/h", "")) // same policy and algorithm
	c := parse(strings.Replace(configText("http://127.0.0.1:1", 20, "1/h", ""), `name = "all"`, `name = "renamed"`, 1))
	if gone := removedLimits(a, b); len(gone) != 0 {
		t.Errorf("a changed burst released %v", gone)
	}
	if gone := removedLimits(a, c); len(gone) != 1 || !gone[a.LimitNames()[0]] {
		t.Errorf("renaming the policy released %v, want its old limit %q", gone, a.LimitNames()[0])
	}
}

// waitMetric polls the admin listener's /metrics until it has the line
// want, for at most 10 seconds.
func waitMetric(t testing.TB, admin, want string) {
	t.Helper()
	poll.For(t, 10*time.Second, func() bool {
		resp, err := http.Get(admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(b), want+"\n")
	}, "/metrics has no line %q", want)
}
