// Command profile shows where the proxies' CPU goes, on 127.0.0.1 only:
// nginx limit_req, the 429 path's floor (bench/bare429) and limitproxy,
// each far over a limit of 1000/s (nearly every answer a 429), and, for
// the forwarding path, nginx and limitproxy under a limit that never
// rejects. For each target it runs wrk once under `perf stat` attached to
// the target's processes (CPU time, system calls, context switches per
// request), and once under `perf record -g` (cpu-clock samples with call
// chains) for the Go targets, whose samples it sorts into components by
// their innermost frame that names one (see classify). Logging and metrics
// are as bench/proxybench measures them: limitproxy's default access log
// to a file, nginx's combined access log to a buffered file.
//
// It starts every process it measures and stops each by its PID.
//
//	profile -limitproxy BIN -bare429 BIN [-duration 4s] [-wrk-cpu 0 -own-cpu 0] > section.md
package main

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitproxy/limitproxy/bench/internal/proc"
)

// nginxConf follows bench/proxybench's: %[1]s the upstream, %[2]s a limit
// that never rejects, %[3]s 1000/s with a burst of 100, %[4]s the access
// log.
const nginxConf = `  upstream app { server %[1]s; keepalive 64; }
  limit_req_zone $binary_remote_addr zone=never:10m rate=1000000000r/s;
  limit_req_zone $binary_remote_addr zone=over:10m rate=1000r/s;
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  server { listen %[2]s; access_log %[4]s combined buffer=64k flush=100ms; location / { limit_req zone=never burst=1000000 nodelay; proxy_pass http://app; } }
  server { listen %[3]s; access_log %[4]s combined buffer=64k flush=100ms; location / { limit_req zone=over burst=100 nodelay; proxy_pass http://app; } }
}
`

type target struct {
	name, path, url string
	pid             int  // the process (and its children) measured
	goProfile       bool // sorted by component from perf record
	stat            stat
	parts           map[string]float64 // component → samples
	alloc, samples  float64
}

type stat struct {
	requests, non2xx   float64
	cpu                time.Duration
	syscalls, switches float64
}

func main() {
	lp := flag.String("limitproxy", "", "limitproxy binary")
	floor := flag.String("bare429", "", "bare429 binary")
	dur := flag.Duration("duration", 4*time.Second, "wrk duration per measurement")
	conns := flag.Int("conns", 64, "wrk connections")
	wrkCPU := flag.String("wrk-cpu", "", "run wrk on these CPUs (taskset -c)")
	ownCPU := flag.String("own-cpu", "", "move this process (the upstream) to these CPUs once the targets have started")
	flag.Parse()
	if *lp == "" || *floor == "" {
		fmt.Fprintln(os.Stderr, "usage: profile -limitproxy BIN -bare429 BIN [-duration D]")
		os.Exit(2)
	}
	if err := run(*lp, *floor, *dur, *conns, *wrkCPU, *ownCPU, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		os.Exit(1)
	}
}

func run(lp, floor string, dur time.Duration, conns int, wrkCPU, ownCPU string, out io.Writer) error {
	for _, c := range []string{"wrk", "perf"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("%s is not installed (bench/profile.sh installs it when run as root)", c)
		}
	}
	up, err := proc.StartOKUpstream()
	if err != nil {
		return err
	}
	defer up.Close()
	upAddr := up.Addr
	dir, err := os.MkdirTemp("", "profile")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The logs in a directory of their own: limitproxy watches its
	// configuration's directory, which a log would wake at each write.
	logDir := filepath.Join(dir, "logs")
	if err := os.Mkdir(logDir, 0o755); err != nil {
		return err
	}
	logs := []string{filepath.Join(logDir, "nginx-access.log")}
	ng := [2]string{proc.FreeAddr(), proc.FreeAddr()}
	ngx, err := proc.StartNginx(proc.NginxPreamble+fmt.Sprintf(nginxConf, upAddr, ng[0], ng[1], logs[0]), ng[1])
	if err != nil {
		return err
	}
	defer ngx.Stop()
	floorAddr := proc.FreeAddr()
	floorCmd, err := proc.Start(nil, floorAddr, floor, "-listen", floorAddr)
	if err != nil {
		return err
	}
	defer func() { floorCmd.Process.Kill(); floorCmd.Wait() }()
	targets := []*target{
		{name: "nginx limit_req", path: "429", url: "http://" + ng[1], pid: ngx.Pid()},
		{name: "bare net/http 429 (the floor)", path: "429", url: "http://" + floorAddr, pid: floorCmd.Process.Pid, goProfile: true},
	}
	var lpTargets []*target
	for _, c := range []struct {
		path, rate string
		burst      int
	}{{"429", "1000/s", 100}, {"forward", "1000000000/s", 1000000000}} {
		addr := proc.FreeAddr()
		conf := filepath.Join(dir, c.path+".toml")
		logPath := filepath.Join(logDir, c.path+".log")
		cmd, f, err := proc.LimitproxyCommand(lp, conf, proc.LimitproxyConfigAccessLog(addr, upAddr, "draft")+fmt.Sprintf(proc.TokenBucketPolicy, c.rate, c.burst), logPath)
		if err != nil {
			return err
		}
		defer f.Close()
		logs = append(logs, logPath)
		if err := cmd.Start(); err != nil {
			return err
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		if err := proc.WaitUp(addr); err != nil {
			return err
		}
		lpTargets = append(lpTargets, &target{name: "limitproxy", path: c.path, url: "http://" + addr, pid: cmd.Process.Pid, goProfile: true})
	}
	targets = append(targets, lpTargets[0],
		&target{name: "nginx limit_req", path: "forward", url: "http://" + ng[0], pid: ngx.Pid()}, lpTargets[1])
	if ownCPU != "" {
		if err := exec.Command("taskset", "-a", "-p", "-c", ownCPU, strconv.Itoa(os.Getpid())).Run(); err != nil {
			return fmt.Errorf("taskset -a -p -c %s: %w", ownCPU, err)
		}
	}
	truncate := func() {
		for _, l := range logs {
			os.Truncate(l, 0)
		}
	}
	for _, t := range targets {
		fmt.Fprintf(os.Stderr, "%s, %s path\n", t.name, t.path)
		// A warm-up, so that every thread the target will run exists
		// before perf attaches to its threads.
		if _, err := wrk(t.url, time.Second, conns, wrkCPU); err != nil {
			return err
		}
		if err := perfStat(t, dur, conns, wrkCPU, dir); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		truncate()
		if t.goProfile {
			if err := perfRecord(t, dur, conns, wrkCPU, dir); err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			truncate()
		}
	}
	report(out, targets, dur, conns)
	return nil
}

var (
	reqLine = regexp.MustCompile(`(\d+) requests in`)
	non2xx  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
)

// wrk runs wrk against url and returns its requests and non-2xx answers.
func wrk(url string, dur time.Duration, conns int, wrkCPU string) (stat, error) {
	args := []string{"wrk", "-t", "2", "-c", strconv.Itoa(conns), "-d", dur.String(), url + "/bench"}
	if wrkCPU != "" {
		args = append([]string{"taskset", "-c", wrkCPU}, args...)
	}
	b, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return stat{}, fmt.Errorf("wrk: %v: %s", err, b)
	}
	var s stat
	if m := reqLine.FindSubmatch(b); m != nil {
		s.requests, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	if m := non2xx.FindSubmatch(b); m != nil {
		s.non2xx, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	if s.requests == 0 {
		return s, fmt.Errorf("no requests in wrk's output: %s", b)
	}
	return s, nil
}

// attach starts perf (args) attached to every thread of t's processes,
// runs wrk, and stops perf.
func attach(t *target, dur time.Duration, conns int, wrkCPU string, args ...string) (stat, error) {
	var pids []string
	for _, p := range proc.Tree(t.pid) {
		pids = append(pids, strconv.Itoa(p))
	}
	perf := exec.Command("perf", append(args, "-p", strings.Join(pids, ","))...)
	var perfOut strings.Builder
	perf.Stderr = &perfOut
	if err := perf.Start(); err != nil {
		return stat{}, err
	}
	time.Sleep(300 * time.Millisecond) // perf attaches
	s, err := wrk(t.url, dur, conns, wrkCPU)
	perf.Process.Signal(os.Interrupt)
	perr := perf.Wait()
	if err != nil {
		return s, err
	}
	if perr != nil && !strings.Contains(perr.Error(), "interrupt") {
		return s, fmt.Errorf("perf: %v: %s", perr, perfOut.String())
	}
	return s, nil
}

func perfStat(t *target, dur time.Duration, conns int, wrkCPU, dir string) error {
	out := filepath.Join(dir, "stat.txt")
	s, err := attach(t, dur, conns, wrkCPU, "stat", "-x", ",", "-o", out, "-e", "task-clock,context-switches,raw_syscalls:sys_enter")
	if err != nil {
		return err
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	// CSV: value,unit,event,...
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(f[2], "task-clock"):
			s.cpu = time.Duration(v * float64(time.Millisecond))
		case strings.HasPrefix(f[2], "context-switches"):
			s.switches = v
		case strings.HasPrefix(f[2], "raw_syscalls:sys_enter"):
			s.syscalls = v
		}
	}
	if s.cpu == 0 {
		return fmt.Errorf("no task-clock in perf stat's output: %s", b)
	}
	t.stat = s
	return nil
}

func perfRecord(t *target, dur time.Duration, conns int, wrkCPU, dir string) error {
	data := filepath.Join(dir, "perf.data")
	if _, err := attach(t, dur, conns, wrkCPU, "record", "-q", "-e", "cpu-clock", "-F", "4999", "-g", "-o", data); err != nil {
		return err
	}
	cmd := exec.Command("perf", "script", "-i", data, "-F", "ip,sym")
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	t.parts = map[string]float64{}
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var stack []string
	flush := func() {
		if len(stack) == 0 {
			return
		}
		part, alloc := classify(stack)
		t.parts[part]++
		t.samples++
		if alloc {
			t.alloc++
		}
		stack = stack[:0]
	}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			flush()
			continue
		}
		// "ADDR SYMBOL+OFF" (frames, innermost first).
		_, sym, _ := strings.Cut(line, " ")
		if i := strings.LastIndexByte(sym, '+'); i > 0 {
			sym = sym[:i]
		}
		stack = append(stack, sym)
	}
	flush()
	if err := cmd.Wait(); err != nil {
		return err
	}
	if t.samples == 0 {
		return errors.New("perf record took no samples")
	}
	return nil
}

// rules name the components: the innermost frame that matches one of the
// specific rules names the sample's component, else the innermost that
// matches a generic one (so that a function decide calls is decide's, not
// "handler, other"). Frames of the allocator and of the runtime's helpers
// match none, so that allocation is charged to whoever allocated (and
// counted apart).
var rules = []struct{ part, prefix string }{
	{"write(2)", "internal/poll.(*FD).Write"},
	{"write(2)", "internal/poll.(*FD).Writev"},
	{"read(2)", "internal/poll.(*FD).Read"},
	{"read(2)", "syscall.read"}, // the HTTP/1.1 front's raw read (internal/h1's rawRead: syscall.Read, inlined)
	{"access log", "go.uber.org/zap"},
	{"access log", "github.com/limitproxy/limitproxy/proxy.(*Handler).logAccess"},
	{"access log", "github.com/limitproxy/limitproxy/proxy.(*Handler).loggedClient"},
	{"access log", "github.com/limitproxy/limitproxy/proxy.appendAccess"},
	{"access log", "github.com/limitproxy/limitproxy/cmd/limitproxy/internal/server.(*accessWriter)"},
	{"metrics", "github.com/prometheus"},
	{"metrics", "github.com/limitproxy/limitproxy/proxy.(*Metrics)"},
	{"limiter", "github.com/limitproxy/limitproxy/limiter"},
	{"RateLimit fields", "github.com/limitproxy/limitproxy/proxy.setRateLimitHeaders"},
	{"RateLimit fields", "github.com/limitproxy/limitproxy/proxy.appendQuotaPolicies"},
	{"RateLimit fields", "github.com/limitproxy/limitproxy/proxy.appendServiceLimit"},
	{"RateLimit fields", "github.com/limitproxy/limitproxy/proxy.setDraftFields"},
	{"RateLimit fields", "github.com/limitproxy/limitproxy/proxy.(*Handler).inform"},
	{"rejection (status, fields, body)", "github.com/limitproxy/limitproxy/proxy.reject"},
	{"rejection (status, fields, body)", "github.com/limitproxy/limitproxy/proxy.(*Handler).answer"},
	{"request id", "github.com/limitproxy/limitproxy/proxy.requestID"},
	{"request id", "crypto/"},
	{"decide (canonical form, match, key)", "github.com/limitproxy/limitproxy/proxy.(*Handler).decide"},
	{"decide (canonical form, match, key)", "github.com/limitproxy/limitproxy/policy"},
	{"upstream transport, ReverseProxy", "net/http/httputil"},
	{"upstream transport, ReverseProxy", "github.com/limitproxy/limitproxy/proxy.(*syncTransport)"},
	{"upstream transport, ReverseProxy", "github.com/limitproxy/limitproxy/proxy.(*syncBody)"},
	{"upstream transport, ReverseProxy", "github.com/limitproxy/limitproxy/proxy.(*Handler).forward"},
	{"HTTP/1.1 front (head, answer)", "github.com/limitproxy/limitproxy/internal/h1.parseHead"},
	{"HTTP/1.1 front (head, answer)", "github.com/limitproxy/limitproxy/internal/h1.(*response)"},
	{"HTTP/1.1 front (head, answer)", "github.com/limitproxy/limitproxy/internal/h1.(*conn).write"},
	{"net/http header maps", "net/textproto"},
	{"net/http header maps", "net/http.Header"},
	{"net/http header maps", "net/http.readRequest"},
	{"net/http header maps", "net/http.(*chunkWriter).writeHeader"},
	{"net/http header maps", "net/http.(*response).WriteHeader"},
}

var generic = []struct{ part, prefix string }{
	{"HTTP/1.1 front, other", "github.com/limitproxy/limitproxy/internal/h1"},
	{"handler, other", "github.com/limitproxy/limitproxy/"},
	{"handler, other", "main."},
	{"net/http server, other", "net/http"},
	{"net/http server, other", "bufio"},
	{"net/http server, other", "net"},
	{"GC (background)", "runtime.gcBgMarkWorker"},
	{"scheduler, netpoll", "runtime.schedule"},
	{"scheduler, netpoll", "runtime.findRunnable"},
	{"scheduler, netpoll", "runtime.netpoll"},
	{"scheduler, netpoll", "runtime.mcall"},
	{"scheduler, netpoll", "runtime.park_m"},
	{"scheduler, netpoll", "runtime.goexit0"},
}

// classify returns the component of a sample's stack and whether it was
// taken in the allocator.
func classify(stack []string) (string, bool) {
	alloc := slices.ContainsFunc(stack, func(f string) bool {
		return strings.HasPrefix(f, "runtime.mallocgc") || strings.HasPrefix(f, "runtime.growslice")
	})
	for _, set := range [][]struct{ part, prefix string }{rules, generic} {
		for _, f := range stack {
			for _, r := range set {
				if strings.HasPrefix(f, r.prefix) {
					return r.part, alloc
				}
			}
		}
	}
	return "runtime, kernel, other", alloc
}

func report(out io.Writer, targets []*target, dur time.Duration, conns int) {
	fmt.Fprintf(out, "System calls and context switches (`perf stat -e task-clock,context-switches,raw_syscalls:sys_enter -p PIDS` over one `wrk -t2 -c%d -d%v`), per request:\n\n", conns, dur)
	fmt.Fprintln(out, "| path | target | requests | non-2xx | CPU µs/request | syscalls/request | context switches/request |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|")
	for _, t := range targets {
		s := t.stat
		fmt.Fprintf(out, "| %s | %s | %.0f | %.0f%% | %.1f | %.2f | %.3f |\n", t.path, t.name, s.requests, 100*s.non2xx/s.requests,
			float64(s.cpu.Microseconds())/s.requests, s.syscalls/s.requests, s.switches/s.requests)
	}
	fmt.Fprintln(out)
	var gos []*target
	for _, t := range targets {
		if t.goProfile {
			gos = append(gos, t)
		}
	}
	parts := map[string]float64{}
	for _, t := range gos {
		for p, n := range t.parts {
			parts[p] += n / t.samples
		}
	}
	names := make([]string, 0, len(parts))
	for p := range parts {
		names = append(names, p)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(parts[b], parts[a]) })
	fmt.Fprintln(out, "Where the Go targets' CPU goes (`perf record -e cpu-clock -F 4999 -g -p PIDS` over another such run; each sample charged to the")
	fmt.Fprintln(out, "innermost frame that names a component, allocation to whoever allocated): share of samples, and µs per request (the share of")
	fmt.Fprintln(out, "the CPU per request above).")
	fmt.Fprintln(out)
	fmt.Fprint(out, "| component |")
	for _, t := range gos {
		fmt.Fprintf(out, " %s, %s path |", t.name, t.path)
	}
	fmt.Fprint(out, "\n|---|")
	for range gos {
		fmt.Fprint(out, "---:|")
	}
	fmt.Fprintln(out)
	row := func(name string, f func(t *target) float64) {
		fmt.Fprintf(out, "| %s |", name)
		for _, t := range gos {
			share := f(t) / t.samples
			us := share * float64(t.stat.cpu.Microseconds()) / t.stat.requests
			if share == 0 {
				fmt.Fprint(out, " – |")
				continue
			}
			fmt.Fprintf(out, " %.1f%% (%.2f µs) |", 100*share, us)
		}
		fmt.Fprintln(out)
	}
	for _, p := range names {
		row(p, func(t *target) float64 { return t.parts[p] })
	}
	row("*of which in the allocator*", func(t *target) float64 { return t.alloc })
	fmt.Fprintln(out)
}
