// Command proxybench measures the proxy's cost with wrk, on 127.0.0.1 only:
// the upstream alone, a bare httputil.ReverseProxy with limitproxy's
// Transport, nginx's proxy_pass, nginx with a limit_req that never rejects,
// limitproxy forwarding under a token bucket that never rejects, and
// limitproxy and nginx far over a limit of 1000/s, burst 100 (wrk, a closed
// loop, then offers tens of times the limit and nearly every answer is a
// 429), and beside them the floor of the 429 path: a bare net/http server
// answering every request with the same 429 (bench/bare429). nginx runs
// one worker, upstream keepalive on, and an access log to a file, buffered
// (64 KiB, flushed at least every 100 ms); limitproxy its default log
// (level info, a line per request) to a file through its own batching
// writer: the configuration one would deploy. It runs interleaved
// rounds (each round measures every target once, in a rotated order, so a
// busy moment of this shared machine hits all of them alike) and writes a
// Markdown section: medians with min–max, ratios to the bare proxy computed
// within each round, and the proxy's CPU time per request from /proc (on 2
// cores wrk competes for the CPU, so CPU per request is the fairer figure).
//
// It starts every process it measures and stops each by its PID when done.
//
//	proxybench -limitproxy BIN -bareproxy BIN -bare429 BIN [-rounds 5] [-duration 5s] [-conns 64] > section.md
//	proxybench -compare 'NAME|BIN[|LINE;…]' -compare … [-rounds 5] [-duration 5s]   (limitproxy variants forwarding, compare.go)
package main

import (
	"bufio"
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
	"github.com/limitproxy/limitproxy/bench/internal/stats"
)

type target struct {
	name, url string
	cmd       *exec.Cmd // a proxy of ours; nil for nginx or in-process
	pid       int       // the process measured for CPU; 0: in-process (no CPU figure)
	rounds    []sample
}

// The targets' names, which the report's comparisons refer to.
const (
	nameDirect     = "upstream direct"
	nameBare       = "bare ReverseProxy"
	nameNginx      = "nginx proxy_pass"
	nameNginxNever = "nginx limit_req never rejecting"
	nameNever      = "limitproxy, token bucket never rejecting"
	nameOver       = "limitproxy over its limit of 1000/s (429s)"
	nameNginxOver  = "nginx limit_req over its limit of 1000/s (429s)"
	nameFloor      = "bare net/http 429, the floor (no limit, no log)"
)

// nginxConf is the http block's content after proc.NginxPreamble: %[1]s the
// upstream, %[2]s..%[4]s the listen addresses of plain proxying, a limit
// that never rejects, and 1000/s with a burst of 100; %[5]s the access
// log's file (the combined format, buffered as one would deploy it).
const nginxConf = `  upstream app { server %[1]s; keepalive 64; }
  limit_req_zone $binary_remote_addr zone=never:10m rate=1000000000r/s;
  limit_req_zone $binary_remote_addr zone=over:10m rate=1000r/s;
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  server { listen %[2]s; access_log %[5]s combined buffer=64k flush=100ms; location / { proxy_pass http://app; } }
  server { listen %[3]s; access_log %[5]s combined buffer=64k flush=100ms; location / { limit_req zone=never burst=1000000 nodelay; proxy_pass http://app; } }
  server { listen %[4]s; access_log %[5]s combined buffer=64k flush=100ms; location / { limit_req zone=over burst=100 nodelay; proxy_pass http://app; } }
}
`

// multiFlag is a flag that may be given more than once.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, " ") }

// Set adds v.
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

type sample struct {
	rps, p50, p99 float64 // requests/s, ms, ms
	non2xx        float64 // share of responses that were not 2xx/3xx
	cpuPerReq     float64 // µs of the proxy's CPU per request
}

func main() {
	lp := flag.String("limitproxy", "", "limitproxy binary")
	bare := flag.String("bareproxy", "", "bareproxy binary")
	bare429 := flag.String("bare429", "", "bare429 binary (the 429 path's floor)")
	rounds := flag.Int("rounds", 5, "interleaved rounds")
	dur := flag.Duration("duration", 5*time.Second, "wrk duration per measurement")
	conns := flag.Int("conns", 64, "wrk connections")
	threads := flag.Int("threads", 2, "wrk threads")
	wrkCPU := flag.String("wrk-cpu", "", "run wrk on these CPUs (taskset -c), e.g. 0; the caller pins the rest elsewhere")
	ownCPU := flag.String("own-cpu", "", "once the proxies have started (inheriting this process's CPUs), move this process — the upstream — to these CPUs (taskset -a -p -c), e.g. 0, so that the proxies have their CPUs to themselves")
	var variants multiFlag
	flag.Var(&variants, "compare", "instead of the whole run, compare limitproxy variants forwarding, interleaved: NAME|BIN[|LINE;LINE…] (lines added to [[upstream]], or to [server] as server.KEY = …), repeated; ratios against the first")
	rate := flag.String("compare-rate", "1000000000/s", "with -compare: the token bucket's rate (1000/s: mostly 429s)")
	burst := flag.Int("compare-burst", 1000000000, "with -compare: the token bucket's burst")
	flag.Parse()
	if len(variants) > 0 {
		if err := compare(variants, *rate, *burst, *rounds, *dur, *conns, *threads, *wrkCPU, *ownCPU, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "proxybench:", err)
			os.Exit(1)
		}
		return
	}
	if *lp == "" || *bare == "" || *bare429 == "" {
		fmt.Fprintln(os.Stderr, "usage: proxybench -limitproxy BIN -bareproxy BIN -bare429 BIN [-rounds N] [-duration D] [-conns N]")
		os.Exit(2)
	}
	if err := run(*lp, *bare, *bare429, *rounds, *dur, *conns, *threads, *wrkCPU, *ownCPU, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "proxybench:", err)
		os.Exit(1)
	}
}

func run(lp, bare, bare429 string, rounds int, dur time.Duration, conns, threads int, wrkCPU, ownCPU string, out io.Writer) error {
	if _, err := exec.LookPath("wrk"); err != nil {
		return errors.New("wrk is not installed (bench/proxy.sh installs it when run as root)")
	}
	// The upstream: in this process, a fixed small answer.
	up, err := proc.StartOKUpstream()
	if err != nil {
		return err
	}
	defer up.Close()
	upAddr := up.Addr

	dir, err := os.MkdirTemp("", "proxybench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var targets []*target
	targets = append(targets, &target{name: nameDirect, url: "http://" + upAddr})
	bareAddr := proc.FreeAddr()
	targets = append(targets, &target{name: nameBare, url: "http://" + bareAddr,
		cmd: exec.Command(bare, "-listen", bareAddr, "-target", "http://"+upAddr)})
	floorAddr := proc.FreeAddr()
	targets = append(targets, &target{name: nameFloor, url: "http://" + floorAddr,
		cmd: exec.Command(bare429, "-listen", floorAddr)})
	// The access logs: truncated after each measurement (their writers
	// append), so that they do not fill the disk.
	logDir := filepath.Join(dir, "logs")
	if err := os.Mkdir(logDir, 0o755); err != nil {
		return err
	}
	nginxLog := filepath.Join(logDir, "nginx-access.log")
	logs := []string{nginxLog}
	ng := [3]string{proc.FreeAddr(), proc.FreeAddr(), proc.FreeAddr()}
	ngx, err := proc.StartNginx(proc.NginxPreamble+fmt.Sprintf(nginxConf, upAddr, ng[0], ng[1], ng[2], nginxLog), ng[2])
	if err != nil {
		return err
	}
	defer ngx.Stop()
	for i, name := range []string{nameNginx, nameNginxNever, nameNginxOver} {
		if err := proc.WaitUp(ng[i]); err != nil {
			return err
		}
		targets = append(targets, &target{name: name, url: "http://" + ng[i], pid: ngx.Pid()})
	}
	for _, c := range []struct {
		name, rate string
		burst      int
	}{
		{nameNever, "1000000000/s", 1000000000},
		{nameOver, "1000/s", 100},
	} {
		addr := proc.FreeAddr()
		path := filepath.Join(dir, strconv.Itoa(len(targets))+".toml")
		// Its log, the access log with it, goes to a file, in a directory
		// of its own (proc.LimitproxyCommand).
		logPath := filepath.Join(logDir, strconv.Itoa(len(targets))+".log")
		cmd, f, err := proc.LimitproxyCommand(lp, path, proc.LimitproxyConfigAccessLog(addr, upAddr, "draft")+fmt.Sprintf(proc.TokenBucketPolicy, c.rate, c.burst), logPath)
		if err != nil {
			return err
		}
		defer f.Close()
		logs = append(logs, logPath)
		targets = append(targets, &target{name: c.name, url: "http://" + addr, cmd: cmd})
	}
	for _, t := range targets {
		if t.cmd == nil {
			continue
		}
		if t.cmd.Stderr == nil {
			t.cmd.Stderr = os.Stderr
		}
		if err := t.cmd.Start(); err != nil {
			return err
		}
		t.pid = t.cmd.Process.Pid
		defer func(c *exec.Cmd) { c.Process.Kill(); c.Wait() }(t.cmd)
		if err := proc.WaitUp(strings.TrimPrefix(t.url, "http://")); err != nil {
			return err
		}
	}

	if ownCPU != "" {
		// The proxies keep the CPUs they were started on; this process
		// (the upstream) leaves them, every thread of it.
		if err := exec.Command("taskset", "-a", "-p", "-c", ownCPU, strconv.Itoa(os.Getpid())).Run(); err != nil {
			return fmt.Errorf("taskset -a -p -c %s: %w", ownCPU, err)
		}
	}
	for r := range rounds {
		for i := range targets {
			t := targets[(i+r)%len(targets)]
			fmt.Fprintf(os.Stderr, "round %d/%d: %s\n", r+1, rounds, t.name)
			s, err := measure(t, dur, conns, threads, wrkCPU)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			t.rounds = append(t.rounds, s)
			for _, l := range logs {
				if err := os.Truncate(l, 0); err != nil {
					return err
				}
			}
		}
	}
	report(out, targets, rounds, dur, conns, threads)
	return nil
}

var (
	reqLine   = regexp.MustCompile(`(\d+) requests in`)
	rpsLine   = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	non2xx    = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	pctLine   = regexp.MustCompile(`^\s+(50|99)%\s+([\d.]+)(us|ms|s)`)
	errorLine = regexp.MustCompile(`Socket errors: .*`)
)

func measure(t *target, dur time.Duration, conns, threads int, wrkCPU string) (sample, error) {
	var before int64
	if t.pid != 0 {
		var err error
		if before, err = proc.CPUTicks(t.pid); err != nil {
			return sample{}, err
		}
	}
	args := []string{"wrk", "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns), "-d", dur.String(), "--latency", t.url + "/bench"}
	if wrkCPU != "" {
		args = append([]string{"taskset", "-c", wrkCPU}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	outb, err := cmd.CombinedOutput()
	if err != nil {
		return sample{}, fmt.Errorf("wrk: %v: %s", err, outb)
	}
	var s sample
	text := string(outb)
	if m := rpsLine.FindStringSubmatch(text); m != nil {
		s.rps, _ = strconv.ParseFloat(m[1], 64)
	}
	var total float64
	if m := reqLine.FindStringSubmatch(text); m != nil {
		total, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := non2xx.FindStringSubmatch(text); m != nil && total > 0 {
		n, _ := strconv.ParseFloat(m[1], 64)
		s.non2xx = n / total
	}
	if m := errorLine.FindString(text); m != "" {
		fmt.Fprintln(os.Stderr, t.name+": "+m)
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		m := pctLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[3] {
		case "us":
			v /= 1000
		case "s":
			v *= 1000
		}
		if m[1] == "50" {
			s.p50 = v
		} else {
			s.p99 = v
		}
	}
	if t.pid != 0 && total > 0 {
		after, err := proc.CPUTicks(t.pid)
		if err != nil {
			return sample{}, err
		}
		s.cpuPerReq = float64(after-before) / proc.TicksPerSecond * 1e6 / total
	}
	if s.rps == 0 {
		return s, fmt.Errorf("no Requests/sec in wrk's output: %s", text)
	}
	return s, nil
}

func spread(v []float64, format string) string {
	return fmt.Sprintf(format+" ("+format+"–"+format+")", stats.Median(v), slices.Min(v), slices.Max(v))
}

func column(t *target, f func(sample) float64) []float64 {
	var v []float64
	for _, s := range t.rounds {
		v = append(v, f(s))
	}
	return v
}

func report(out io.Writer, targets []*target, rounds int, dur time.Duration, conns, threads int) {
	bare := targets[1] // nameBare
	fmt.Fprintf(out, "wrk -t%d -c%d -d%v against each target, %d interleaved rounds; medians (min–max). Ratios are taken within each round against the bare ReverseProxy, then their median.\n\n", threads, conns, dur, rounds)
	fmt.Fprintln(out, "| target | requests/s | p50 ms | p99 ms | non-2xx | proxy CPU µs/request | req/s vs bare | CPU vs bare |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, t := range targets {
		rps := column(t, func(s sample) float64 { return s.rps })
		cpu := "–"
		cpuRatio := "–"
		if t.pid != 0 {
			cpu = spread(column(t, func(s sample) float64 { return s.cpuPerReq }), "%.1f")
			var r []float64
			for i := range t.rounds {
				r = append(r, t.rounds[i].cpuPerReq/bare.rounds[i].cpuPerReq)
			}
			cpuRatio = spread(r, "%.2f×")
		}
		var rr []float64
		for i := range t.rounds {
			rr = append(rr, t.rounds[i].rps/bare.rounds[i].rps)
		}
		fmt.Fprintf(out, "| %s | %s | %.2f | %.2f | %.0f%% | %s | %s | %s |\n", t.name, spread(rps, "%.0f"),
			stats.Median(column(t, func(s sample) float64 { return s.p50 })), stats.Median(column(t, func(s sample) float64 { return s.p99 })),
			100*stats.Median(column(t, func(s sample) float64 { return s.non2xx })), cpu, spread(rr, "%.2f×"), cpuRatio)
	}
	fmt.Fprintln(out)
	byName := map[string]*target{}
	for _, t := range targets {
		byName[t.name] = t
	}
	// Ratios within each round, then their median (min–max).
	ratio := func(a, b string, f func(sample) float64) string {
		var r []float64
		for i := range byName[a].rounds {
			r = append(r, f(byName[a].rounds[i])/f(byName[b].rounds[i]))
		}
		return spread(r, "%.2f×")
	}
	rps := func(s sample) float64 { return s.rps }
	cpu := func(s sample) float64 { return s.cpuPerReq }
	fmt.Fprintf(out, "- limitproxy's 429 path answers %s as many requests per second as its forwarding path.\n", ratio(nameOver, nameNever, rps))
	fmt.Fprintf(out, "- Forwarding under a limit that never rejects, limitproxy against nginx limit_req: %s the requests/s, %s the proxy CPU per request.\n",
		ratio(nameNever, nameNginxNever, rps), ratio(nameNever, nameNginxNever, cpu))
	fmt.Fprintf(out, "- Over the limit (mostly 429s), limitproxy against nginx limit_req: %s the requests/s, **%s the proxy CPU per request**.\n",
		ratio(nameOver, nameNginxOver, rps), ratio(nameOver, nameNginxOver, cpu))
	fmt.Fprintf(out, "- The 429 path's floor (a bare net/http server answering the same 429, no log) against nginx limit_req over its limit: %s the CPU per request;"+
		" limitproxy over its limit against that floor: %s.\n",
		ratio(nameFloor, nameNginxOver, cpu), ratio(nameOver, nameFloor, cpu))
	fmt.Fprintf(out, "- nginx limit_req against nginx proxy_pass alone: %s the proxy CPU per request; limitproxy's limit against the bare ReverseProxy: %s.\n\n",
		ratio(nameNginxNever, nameNginx, cpu), ratio(nameNever, nameBare, cpu))
}
