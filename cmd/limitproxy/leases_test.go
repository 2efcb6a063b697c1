package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/internal/testproc"
)

// TestLeasesThreeProcesses runs three limitproxy processes on one real
// Redis, with limits of accuracy "bounded", and drives them with Zipf
// keys over keep-alive connections: from the three access logs (each
// request's `received`, the instant its limits decided at), no key is
// admitted more than a fixed window's limit in any window, nor more
// than a sliding log's limit × (1 + the documented bound, 3 × 1.5 ×
// max_share) in any interval of its window; a key sent heavy traffic on
// its own is decided without a round trip to Redis for ≥ 99% of its
// requests (the limitproxy_leases_decisions_total series of the three).
func TestLeasesThreeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three processes")
	}
	srv := redistest.Start(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "limitproxy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()

	const maxShare = 0.1
	var procs []*process
	for i := range 3 {
		conf := func(proxyPort, adminPort int) string {
			return fmt.Sprintf(`[server]
listen = "127.0.0.1:%d"
[admin]
listen = "127.0.0.1:%d"
[log]
access_replay = true
access_file = %q
[store]
backend = "redis"
[store.redis]
addrs = [%q]
timeout = "1s"
on_error = "deny"
[store.leases]
lease_time = "500ms"
max_share = %v
min_lease = 8
[[upstream]]
name = "app"
targets = [%q]
[[policy]]
name = "fw"
upstream = "app"
match = { path_prefix = "/fw/" }
key = ["path"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 400
  window = "2s"
  accuracy = "bounded"
[[policy]]
name = "sl"
upstream = "app"
match = { path_prefix = "/sl/" }
key = ["path"]
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 400
  window = "2s"
  accuracy = "bounded"
[[policy]]
name = "hot"
upstream = "app"
match = { path = "/hot" }
key = []
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "100000/s"
  burst = 100000
  accuracy = "bounded"
`, proxyPort, adminPort, filepath.Join(dir, fmt.Sprintf("access%d.log", i)), srv.Addr(), maxShare, up.URL)
		}
		procs = append(procs, startProcess(t, bin, filepath.Join(dir, fmt.Sprintf("p%d.toml", i)), conf))
	}

	// A key alone, after half a second of warming up (it is exact until
	// an instance admitted min_lease of it in a lease_time, and its
	// leases grow with its rate).
	hot := func(*rand.Rand) string { return "/hot" }
	drive(t, procs, 500*time.Millisecond, hot)
	// At least 2,000 decisions, in 2 s on an idle machine; a loaded one
	// (under -race, beside other packages' tests) is given up to 20 s.
	before := leaseDecisions(t, procs)
	var local, redis float64
	for start := time.Now(); local+redis < 2000 && time.Since(start) < 20*time.Second; {
		drive(t, procs, 2*time.Second, hot)
		after := leaseDecisions(t, procs)
		local, redis = after[0]-before[0], after[1]-before[1]
	}
	t.Logf("one hot key: %.0f decisions local, %.0f through Redis (%.2f%% local)", local, redis, 100*local/(local+redis))
	if local+redis < 2000 {
		t.Fatalf("only %.0f decisions in 20s: the test measures nothing", local+redis)
	}
	if local/(local+redis) < 0.99 {
		t.Errorf("hot key: %.2f%% of its decisions local, want ≥ 99%%", 100*local/(local+redis))
	}

	// Zipf keys over both windowed policies, three windows' worth.
	drive(t, procs, 6*time.Second, func(r *rand.Rand) string {
		k := zipfKey(r)
		if r.IntN(2) == 0 {
			return "/fw/k" + k
		}
		return "/sl/k" + k
	})
	for _, p := range procs {
		p.stop(t)
	}
	fw, sl := map[string][]time.Time{}, map[string][]time.Time{}
	for _, p := range procs {
		for _, a := range p.admitted(t) {
			switch {
			case strings.HasPrefix(a.path, "/fw/"):
				fw[a.path] = append(fw[a.path], a.at)
			case strings.HasPrefix(a.path, "/sl/"):
				sl[a.path] = append(sl[a.path], a.at)
			}
		}
	}
	// The Redis store counts windows on Redis's clock: each instant is
	// moved by Redis's offset from this machine's clock, and a request
	// within 5ms of a window's edge (the round trip and the offset's
	// error) may count in either window, as it may for exact decisions.
	offset := redisOffset(t, srv.Addr())
	const edge = 5 * time.Millisecond
	worstFW, worstSL := 0, 0
	for key, ts := range fw {
		perWindow, nearEdge := map[int64]int{}, map[int64]int{}
		for _, at := range ts {
			ns := at.Add(offset).UnixNano()
			w := ns / int64(2*time.Second)
			perWindow[w]++
			if in := time.Duration(ns % int64(2*time.Second)); in < edge || in > 2*time.Second-edge {
				nearEdge[w]++
			}
		}
		for w, c := range perWindow {
			worstFW = max(worstFW, c)
			if c > 400+nearEdge[w] {
				t.Errorf("fixed window, key %s, window %d: %d admitted by three instances (%d within %v of an edge), limit 400", key, w, c, nearEdge[w], edge)
			}
		}
	}
	bound := 3 * 1.5 * maxShare
	for key, ts := range sl {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		c := mostWithin(ts, 2*time.Second)
		worstSL = max(worstSL, c)
		if float64(c) > 400*(1+bound) {
			t.Errorf("sliding log, key %s: %d admitted within 2s by three instances, limit 400 × (1 + %.2f)", key, c, bound)
		}
	}
	t.Logf("most admitted: fixed window %d a window (limit 400, bound 0), sliding log %d within 2s (limit 400, bound %.0f%%)", worstFW, worstSL, 100*bound)
	if worstFW < 300 || worstSL < 300 {
		t.Errorf("the hottest keys were admitted at most %d and %d: the load never reached the limits, the test measures nothing", worstFW, worstSL)
	}
}

// redisOffset returns how far Redis's clock is ahead of this machine's,
// from the middle of a TIME call's round trip.
func redisOffset(t *testing.T, addr string) time.Duration {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	best, offset := time.Duration(math.MaxInt64), time.Duration(0)
	for range 20 {
		before := time.Now()
		rt, err := c.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		if rtt := after.Sub(before); rtt < best {
			best, offset = rtt, rt.Sub(before.Add(rtt/2))
		}
	}
	t.Logf("Redis's clock is %v ahead (round trip %v)", offset, best)
	return offset
}

// zipfKey draws a key of 50 with a Zipf law (s = 1.3).
func zipfKey(r *rand.Rand) string {
	return strconv.FormatUint(rand.NewZipf(r, 1.3, 1, 49).Uint64(), 10)
}

func mostWithin(ts []time.Time, w time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// process is one limitproxy process this test started.
type process struct {
	cmd          *exec.Cmd
	exited       chan struct{} // closed once cmd has ended (its Wait returned)
	proxy, admin string
	accessLog    string
	stopped      bool
}

var accessRE = regexp.MustCompile(`access_file = "([^"]+)"`)

// startProcess runs limitproxy (bin) on the configuration conf(proxy
// port, admin port) writes at path, its proxy and admin listeners on
// loopback ports free when chosen, until the test ends, and waits until
// it is ready. Ports that another process takes between their choice and
// limitproxy's bind (it exits, or another's listener answers there) are
// found out, the process owning no socket that listens on them
// (testproc.ListensOn), and others tried, up to five in all.
func startProcess(t *testing.T, bin, path string, conf func(proxyPort, adminPort int) string) *process {
	t.Helper()
	var why []string
	for range 5 {
		proxyPort, adminPort := freePort(t), freePort(t)
		text := conf(proxyPort, adminPort)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		p := &process{proxy: fmt.Sprintf("127.0.0.1:%d", proxyPort), admin: fmt.Sprintf("127.0.0.1:%d", adminPort),
			accessLog: accessRE.FindStringSubmatch(text)[1], exited: make(chan struct{})}
		p.cmd = exec.Command(bin, "-config", path)
		logFile, err := os.Create(path + ".log")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { logFile.Close() })
		p.cmd.Stderr = logFile
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.cmd.Wait(); close(p.exited) }()
		t.Cleanup(func() { p.stop(t) })
		err = p.ready(proxyPort, adminPort)
		if err == nil {
			return p
		}
		p.stop(t)
		log, _ := os.ReadFile(path + ".log")
		why = append(why, fmt.Sprintf("%s: %v: %s", p.proxy, err, log))
	}
	t.Fatalf("limitproxy did not start:\n%s", strings.Join(why, "\n"))
	return nil
}

// ready waits until p listens on both its ports and its admin listener
// answers /readyz with 200, within 20 s.
func (p *process) ready(proxyPort, adminPort int) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("exited (%v)", p.cmd.ProcessState)
		default:
		}
		pid := p.cmd.Process.Pid
		if testproc.ListensOn(pid, proxyPort) && testproc.ListensOn(pid, adminPort) {
			resp, err := http.Get("http://" + p.admin + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return errors.New("not ready after 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *process) stop(t *testing.T) {
	if p.stopped {
		return
	}
	p.stopped = true
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

type admittedRequest struct {
	path string
	at   time.Time
}

// admitted reads the process's access log: the requests its limits
// admitted, at the instant they decided.
func (p *process) admitted(t *testing.T) []admittedRequest {
	t.Helper()
	f, err := os.Open(p.accessLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []admittedRequest
	var first string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if first == "" {
			first = sc.Text()
		}
		var line struct {
			Path     string `json:"path"`
			Decision string `json:"decision"`
			Received string `json:"received"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		if os.Getenv("LEASEDEBUG") != "" && line.Path == "/fw/k1" {
			fmt.Println(p.accessLog[len(p.accessLog)-11:], line.Received, line.Decision)
		}
		if line.Decision != "allowed" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, line.Received)
		if err != nil {
			t.Fatalf("access log %s: received %q: %v", p.accessLog, line.Received, err)
		}
		out = append(out, admittedRequest{line.Path, at})
	}
	if len(out) == 0 {
		t.Fatalf("access log %s: no admitted request; its first line: %s", p.accessLog, first)
	}
	return out
}

// drive sends requests to every process from 8 keep-alive clients each,
// for d, on the paths next draws.
func drive(t *testing.T, procs []*process, d time.Duration, next func(*rand.Rand) string) {
	t.Helper()
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for i, p := range procs {
		for w := range 8 {
			wg.Go(func() {
				c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
				defer c.CloseIdleConnections()
				r := rand.New(rand.NewPCG(uint64(i), uint64(w)))
				for time.Now().Before(end) {
					resp, err := c.Get("http://" + p.proxy + next(r))
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 && resp.StatusCode != 429 {
						t.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		}
	}
	wg.Wait()
}

var decisionsRE = regexp.MustCompile(`(?m)^limitproxy_leases_decisions_total\{where="(local|redis)"\} (\S+)$`)

// leaseDecisions sums limitproxy_leases_decisions_total over procs:
// local, then redis.
func leaseDecisions(t *testing.T, procs []*process) [2]float64 {
	t.Helper()
	var sum [2]float64
	for _, p := range procs {
		resp, err := http.Get("http://" + p.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ms := decisionsRE.FindAllStringSubmatch(string(b), -1)
		if len(ms) != 2 {
			t.Fatalf("metrics of %s: no limitproxy_leases_decisions_total series", p.admin)
		}
		for _, m := range ms {
			v, _ := strconv.ParseFloat(m[2], 64)
			if m[1] == "local" {
				sum[0] += v
			} else {
				sum[1] += v
			}
		}
	}
	return sum
}
