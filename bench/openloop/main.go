// Command openloop measures latency and CPU per request of proxies under
// an open-loop load on 127.0.0.1: requests at a fixed rate whatever the
// answers, each request's latency counted from its intended send time, so
// that a generator or a connection that falls behind does not hide the
// delay (no coordinated omission). The targets, at the same offered rates:
//
//   - the upstream alone, a Go server answering "ok" that openloop starts
//     (itself, with -serve);
//   - nginx proxy_pass, one worker, upstream keepalive, access log off;
//   - nginx with a limit_req that never rejects;
//   - limitproxy, access log off, one token_bucket policy keyed by client
//     IP that never rejects.
//
// Each round measures every target at every rate once, the targets in an
// order rotated from round to round, so that a busy moment of this shared
// machine hits all of them alike. It writes a Markdown table: latency
// percentiles over every round's requests, the latency a proxy adds to the
// upstream alone (same rate, same round) and the proxy's CPU time per
// request (its process's CPU clock; nginx: master and worker), with the
// ratios of limitproxy to nginx limit_req taken within each round. Since
// the machine may be shared, it also reports how much of its CPU time
// other work and the hypervisor (steal) took during the measurements.
//
// It starts every process it measures and stops each by its PID when done;
// every run is bounded (warm-up, duration, and at most 10 s for the last
// answers).
//
//	openloop -limitproxy BIN [-rates 1000,2000,4000] [-rounds 5] [-duration 2s]
//	         [-warmup 250ms] [-conns 256] [-pin CPUS] > section.md
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitproxy/limitproxy/bench/internal/proc"
	"github.com/limitproxy/limitproxy/bench/internal/stats"
)

// The targets' names, which the report's comparisons refer to.
const (
	nameUpstream   = "upstream alone"
	nameNginx      = "nginx proxy_pass"
	nameNginxNever = "nginx limit_req never rejecting"
	nameNever      = "limitproxy, token bucket never rejecting"
)

// nginxConf is the http block's content after proc.NginxPreamble, as in
// bench/proxybench: %[1]s the upstream, %[2]s and %[3]s the listen
// addresses of plain proxying and of a limit that never rejects.
const nginxConf = `  upstream app { server %[1]s; keepalive 64; }
  limit_req_zone $binary_remote_addr zone=never:10m rate=1000000000r/s;
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  server { listen %[2]s; location / { proxy_pass http://app; } }
  server { listen %[3]s; location / { limit_req zone=never burst=1000000 nodelay; proxy_pass http://app; } }
}
`

// policy follows proc.LimitproxyConfig: one token bucket by client IP
// that never rejects, as bench/proxybench's.
var policy = fmt.Sprintf(proc.TokenBucketPolicy, "1000000000/s", 1000000000)

// target is one server under load.
type target struct {
	name string
	addr string
	pid  int                   // the process measured for CPU (with its descendants); 0: none
	runs map[int][]measurement // by offered rate, one per round
}

type options struct {
	limitproxy string
	rates      []int
	rounds     int
	dur, warm  time.Duration
	conns      int
	pin        string
}

func main() {
	var o options
	serve := flag.String("serve", "", "run only the upstream, on this address (openloop starts itself so)")
	flag.StringVar(&o.limitproxy, "limitproxy", "", "limitproxy binary")
	rates := flag.String("rates", "1000,2000,4000", "offered rates, requests per second, comma-separated")
	flag.IntVar(&o.rounds, "rounds", 5, "interleaved rounds")
	flag.DurationVar(&o.dur, "duration", 2*time.Second, "measured time per target and rate in each round")
	flag.DurationVar(&o.warm, "warmup", 250*time.Millisecond, "unmeasured time before it, at the same rate")
	flag.IntVar(&o.conns, "conns", 256, "most connections the generator opens to a target")
	flag.StringVar(&o.pin, "pin", "", "run the proxies and the upstream on these CPUs (taskset -c), e.g. 1; pin openloop itself elsewhere")
	flag.Parse()
	if *serve != "" {
		upstream(*serve)
		return
	}
	for _, s := range strings.Split(*rates, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || r <= 0 {
			fmt.Fprintf(os.Stderr, "openloop: bad rate %q\n", s)
			os.Exit(2)
		}
		o.rates = append(o.rates, r)
	}
	if o.limitproxy == "" || o.rounds < 1 || o.dur <= 0 || o.warm < 0 || o.conns < 1 {
		fmt.Fprintln(os.Stderr, "usage: openloop -limitproxy BIN [-rates 1000,2000,4000] [-rounds 5] [-duration 2s] [-warmup 250ms] [-conns 256] [-pin CPUS]")
		os.Exit(2)
	}
	// The dispatcher sleeps in the kernel on a thread of its own; the
	// answers are read on another P (on one CPU, GOMAXPROCS would be 1).
	runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	if err := run(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "openloop:", err)
		os.Exit(1)
	}
}

// upstream serves proc.OKUpstream on addr, as bench/proxybench does.
func upstream(addr string) {
	srv := proc.OKUpstream(addr)
	fmt.Fprintln(os.Stderr, "openloop upstream:", srv.ListenAndServe())
	os.Exit(1)
}

// stop kills a process of ours by its PID and reaps it.
func stop(cmd *exec.Cmd) {
	cmd.Process.Kill()
	cmd.Wait()
}

func run(o options, out io.Writer) error {
	var wrap []string
	if o.pin != "" {
		wrap = []string{"taskset", "-c", o.pin}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	upAddr := proc.FreeAddr()
	up, err := proc.Start(wrap, upAddr, self, "-serve", upAddr)
	if err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	defer stop(up)
	targets := []*target{{name: nameUpstream, addr: upAddr}}

	ng := [2]string{proc.FreeAddr(), proc.FreeAddr()}
	ngx, err := proc.StartNginx(proc.NginxPreamble+fmt.Sprintf(nginxConf, upAddr, ng[0], ng[1]), ng[1], wrap...)
	if err != nil {
		return err
	}
	defer ngx.Stop()
	for i, name := range []string{nameNginx, nameNginxNever} {
		if err := proc.WaitUp(ng[i]); err != nil {
			return err
		}
		targets = append(targets, &target{name: name, addr: ng[i], pid: ngx.Pid()})
	}

	dir, err := os.MkdirTemp("", "openloop")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lpAddr := proc.FreeAddr()
	conf := filepath.Join(dir, "limitproxy.toml")
	if err := os.WriteFile(conf, []byte(proc.LimitproxyConfig(lpAddr, upAddr, "draft")+policy), 0o644); err != nil {
		return err
	}
	lp, err := proc.Start(wrap, lpAddr, o.limitproxy, "-config", conf)
	if err != nil {
		return fmt.Errorf("limitproxy: %w", err)
	}
	defer stop(lp)
	targets = append(targets, &target{name: nameNever, addr: lpAddr, pid: lp.Process.Pid})

	// Each process's CPU time over the whole run, from its CPU clock and
	// from /proc/PID/stat, to check the one against the other.
	type check struct{ clock, ticks [2]time.Duration }
	checks := map[int]*check{}
	read := func(k int) error {
		for pid, c := range checks {
			var err error
			if c.clock[k], err = proc.CPUTime(proc.Tree(pid)...); err != nil {
				return err
			}
			ticks, err := proc.CPUTicks(pid)
			if err != nil {
				return err
			}
			c.ticks[k] = time.Duration(ticks) * time.Second / proc.TicksPerSecond
		}
		return nil
	}
	for _, t := range targets {
		t.runs = map[int][]measurement{}
		if t.pid != 0 {
			checks[t.pid] = &check{}
		}
	}
	if err := read(0); err != nil {
		return err
	}

	// Every process of ours, to tell other work on the machine from it.
	ours := []int{os.Getpid(), up.Process.Pid}
	for _, pid := range []int{ngx.Pid(), lp.Process.Pid} {
		ours = append(ours, proc.Tree(pid)...)
	}
	usage := func() (busy, steal, own time.Duration, err error) {
		if busy, steal, err = proc.MachineCPU(); err != nil {
			return 0, 0, 0, err
		}
		own, err = proc.CPUTime(ours...)
		return busy, steal, own, err
	}

	began := time.Now()
	for r := range o.rounds {
		for _, rate := range o.rates {
			for i := range targets {
				t := targets[(i+r)%len(targets)]
				fmt.Fprintf(os.Stderr, "round %d/%d, %d r/s: %s\n", r+1, o.rounds, rate, t.name)
				l := load{addr: t.addr, rate: float64(rate), warm: o.warm, dur: o.dur, maxConns: o.conns}
				var pids []int // the proxy's, none for the upstream alone
				if t.pid != 0 {
					pids = proc.Tree(t.pid)
				}
				l.cpu = func() (c cpuTimes, err error) {
					if c.proxy, err = proc.CPUTime(pids...); err != nil {
						return c, err
					}
					c.upstream, err = proc.CPUTime(up.Process.Pid)
					return c, err
				}
				busy0, steal0, own0, err := usage()
				if err != nil {
					return err
				}
				t0 := time.Now()
				m, err := l.run()
				if err != nil {
					return fmt.Errorf("%s at %d r/s: %w", t.name, rate, err)
				}
				busy1, steal1, own1, err := usage()
				if err != nil {
					return err
				}
				all := float64(time.Since(t0)) * float64(runtime.NumCPU())
				m.others = max(0, float64((busy1-busy0)-(own1-own0))/all)
				m.steal = float64(steal1-steal0) / all
				fmt.Fprintf(os.Stderr, "  p50 %v, p99 %v, proxy CPU %.1f µs/request; other work %.0f%%, steal %.0f%%\n",
					stats.Percentile(m.latencies, 0.5).Round(time.Microsecond), stats.Percentile(m.latencies, 0.99).Round(time.Microsecond),
					cpuPerRequest(m), 100*m.others, 100*m.steal)
				if m.failed*1000 > m.requests {
					return fmt.Errorf("%s at %d r/s: %d of %d requests failed (not answered, or not 200)", t.name, rate, m.failed, m.requests)
				}
				if len(m.latencies) == 0 {
					return fmt.Errorf("%s at %d r/s: no answer", t.name, rate)
				}
				t.runs[rate] = append(t.runs[rate], m)
			}
		}
	}
	took := time.Since(began)
	if err := read(1); err != nil {
		return err
	}
	report(out, o, targets, took)
	var worst time.Duration
	for _, c := range checks {
		worst = max(worst, ((c.clock[1] - c.clock[0]) - (c.ticks[1] - c.ticks[0])).Abs())
	}
	fmt.Fprintf(out, "Over the whole run, each proxy's CPU time by its CPU clock and by /proc/PID/stat's utime+stime (in ticks of 10 ms) differ by at most %v.\n\n",
		worst.Round(time.Millisecond))
	return nil
}

// spread formats the median of v with its min–max.
func spread(v []float64, format string) string {
	return fmt.Sprintf(format+" ("+format+"–"+format+")", stats.Median(v), slices.Min(v), slices.Max(v))
}

// µs returns d in microseconds.
func µs(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// pooled returns the sorted latencies of every run.
func pooled(runs []measurement) []time.Duration {
	var all []time.Duration
	for _, m := range runs {
		all = append(all, m.latencies...)
	}
	slices.Sort(all)
	return all
}

// added returns, per round, the difference between a's and base's
// latency at the quantile p (µs).
func added(a, base []measurement, p float64) []float64 {
	var v []float64
	for i := range a {
		v = append(v, µs(stats.Percentile(a[i].latencies, p)-stats.Percentile(base[i].latencies, p)))
	}
	return v
}

// cpuPerRequest returns a run's CPU µs per measured request.
func cpuPerRequest(m measurement) float64 { return µs(m.cpu.proxy) / float64(m.requests) }

// coreUse returns the share of one CPU the proxy and the upstream used
// together during a run, in percent.
func coreUse(m measurement) float64 {
	return 100 * float64(m.cpu.proxy+m.cpu.upstream) / float64(m.cpuSpan)
}

// ratio formats the ratios a[i]/b[i] of each round: their median
// (min–max). A round whose b is not positive (an added latency within
// noise of zero, or below it) has no meaningful ratio: it is left out,
// and the rounds counted.
func ratio(a, b []float64) string {
	var r []float64
	for i := range a {
		if b[i] > 0 {
			r = append(r, a[i]/b[i])
		}
	}
	switch {
	case len(r) == 0:
		return "– (nginx's figure ≤ 0 in every round)"
	case len(r) < len(a):
		return spread(r, "%.2f×") + fmt.Sprintf(", %d of %d rounds (nginx's figure ≤ 0 in the others)", len(r), len(a))
	}
	return spread(r, "%.2f×")
}

func report(out io.Writer, o options, targets []*target, took time.Duration) {
	byName := map[string]*target{}
	for _, t := range targets {
		byName[t.name] = t
	}
	base := byName[nameUpstream]
	fmt.Fprintf(out, "Each target at each offered rate for %v after a warm-up of %v at the same rate, %d interleaved rounds (%v in all).\n",
		o.dur, o.warm, o.rounds, took.Round(time.Second))
	fmt.Fprintln(out, "Latency percentiles and max are over every round's requests; *added* is the proxy's percentile minus the upstream alone's,")
	fmt.Fprintln(out, "at the same rate in the same round: median over the rounds (min–max). CPU µs/request and achieved r/s: median (min–max) over the rounds;")
	fmt.Fprintln(out, "*core use*: the CPU time of the proxy and the upstream together over the measured time, in % of one core (median over the rounds);")
	fmt.Fprintln(out, "near 100%, the core they share is saturated and requests queue.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| offered r/s | target | achieved r/s | p50 µs | p99 µs | p99.9 µs | max µs | added p50 µs | added p99 µs | proxy CPU µs/request | core use | sent >1 ms late |")
	fmt.Fprintln(out, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var failed, requests, peak, poolFull int
	var lags []time.Duration
	for _, rate := range o.rates {
		for _, t := range targets {
			runs := t.runs[rate]
			all := pooled(runs)
			var achieved, cpu, core []float64
			late, n := 0, 0
			for _, m := range runs {
				achieved = append(achieved, m.achieved)
				cpu = append(cpu, cpuPerRequest(m))
				core = append(core, coreUse(m))
				late += m.late
				n += m.requests
				failed += m.failed
				peak = max(peak, m.peakConns)
				poolFull += m.poolFull
				lags = append(lags, m.lags...)
			}
			requests += n
			add50, add99, cpuCol := "–", "–", "–"
			if t != base {
				add50 = spread(added(runs, base.runs[rate], 0.5), "%.0f")
				add99 = spread(added(runs, base.runs[rate], 0.99), "%.0f")
			}
			if t.pid != 0 {
				cpuCol = spread(cpu, "%.1f")
			}
			fmt.Fprintf(out, "| %d | %s | %s | %.0f | %.0f | %.0f | %.0f | %s | %s | %s | %.0f%% | %d of %d |\n", rate, t.name, spread(achieved, "%.0f"),
				µs(stats.Percentile(all, 0.5)), µs(stats.Percentile(all, 0.99)), µs(stats.Percentile(all, 0.999)), µs(all[len(all)-1]),
				add50, add99, cpuCol, stats.Median(core), late, n)
		}
	}
	fmt.Fprintln(out)
	if failed == 0 {
		fmt.Fprintf(out, "Every one of the %d measured requests was answered 200. ", requests)
	} else {
		fmt.Fprintf(out, "%d of the %d measured requests failed (no answer, or not 200) and are left out of the latencies. ", failed, requests)
	}
	slices.Sort(lags)
	var others, steal []float64
	for _, t := range targets {
		for _, runs := range t.runs {
			for _, m := range runs {
				others = append(others, 100*m.others)
				steal = append(steal, 100*m.steal)
			}
		}
	}
	busy := 0
	for _, v := range others {
		if v > 10 {
			busy++
		}
	}
	fmt.Fprintf(out, "At most %d connections were open to a target at once (the pool's limit: %d); %d requests waited for one, all being busy.\n", peak, o.conns, poolFull)
	fmt.Fprintf(out, "The generator wrote requests a median %.0f µs after their intended instants (p99 %.0f µs, max %.0f µs), which every latency above\n",
		µs(stats.Percentile(lags, 0.5)), µs(stats.Percentile(lags, 0.99)), µs(lags[len(lags)-1]))
	fmt.Fprintln(out, "includes, for every target alike.")
	fmt.Fprintf(out, "Other work on the machine (an estimate: /proc/stat's busy time less that of openloop, the upstream and the proxies) took a median %.0f%% of its\n", stats.Median(others))
	fmt.Fprintf(out, "CPU time during a measurement (max %.0f%%; over 10%% in %d of %d measurements), and the hypervisor a median %.0f%% (steal time, max %.0f%%),\n",
		slices.Max(others), busy, len(others), stats.Median(steal), slices.Max(steal))
	fmt.Fprintf(out, "when this virtual machine's CPUs had work but did not run: where these are large, so is the noise in the tails.\n\n")

	lp, ngx := byName[nameNever], byName[nameNginxNever]
	fmt.Fprintln(out, "limitproxy against nginx limit_req (both never rejecting), ratios taken within each round, then their median (min–max).")
	fmt.Fprintln(out, "The issue's targets, reported and not tuned to: CPU per request ≤ 1.5× nginx limit_req's at equal open-loop rates;")
	fmt.Fprintln(out, "added p50 ≤ 1.5× nginx limit_req's at 1000 and 2000 r/s.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| offered r/s | CPU per request, limitproxy / nginx limit_req | added p50, limitproxy / nginx limit_req |")
	fmt.Fprintln(out, "|---:|---:|---:|")
	for _, rate := range o.rates {
		cpu := func(t *target) []float64 {
			var v []float64
			for _, m := range t.runs[rate] {
				v = append(v, cpuPerRequest(m))
			}
			return v
		}
		add := func(t *target) []float64 { return added(t.runs[rate], base.runs[rate], 0.5) }
		fmt.Fprintf(out, "| %d | %s | %s |\n", rate, ratio(cpu(lp), cpu(ngx)), ratio(add(lp), add(ngx)))
	}
	fmt.Fprintln(out)
}
