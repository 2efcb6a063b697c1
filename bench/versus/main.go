// Command versus measures what limitproxy's algorithms and nginx's
// limit_req let through, over real HTTP on 127.0.0.1: an upstream in this
// process records the instant every request reaches it, and a load
// generator in this process drives the proxies. It measures
//
//   - admission under overload: 5× a configured 1000 r/s (burst 100 where
//     it applies), open loop, for every algorithm and nginx: admitted per
//     second and the most admitted in any one-second window;
//   - a bursty trace (1 s at 4× the limit, 3 s at a quarter, three times)
//     through every algorithm and nginx, drawn as admitted rate over time;
//   - the leaky bucket's smoothness: the gaps between arrivals at the
//     upstream at 100 r/s with 20 concurrent clients, for limitproxy's
//     leaky_bucket and for nginx limit_req without nodelay (its leaky
//     bucket with delay), drawn as histograms;
//   - the window-edge scenario on nginx (real time, at the scenario's
//     scale of a minute), next to limitproxy's figures from its test suite
//     (injected time), which it reads from `go test -v` output.
//
// It writes a Markdown section to stdout and the figures as SVG files. It
// starts every process it measures and stops each when done.
//
//	versus -limitproxy BIN -svg DIR [-svgref PATH] [-pin CPUS]
//	       [-boundary-memory FILE] [-boundary-redis FILE] [-duration 10s]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitproxy/limitproxy/bench/internal/proc"
	"github.com/limitproxy/limitproxy/bench/internal/stats"
	"github.com/limitproxy/limitproxy/bench/internal/svgplot"
)

func main() {
	lp := flag.String("limitproxy", "", "limitproxy binary")
	svgDir := flag.String("svg", "docs", "directory the SVG figures are written to")
	svgRef := flag.String("svgref", "docs/", "how the Markdown refers to that directory")
	pin := flag.String("pin", "", "run the proxies on these CPUs (taskset -c), e.g. 1")
	bmem := flag.String("boundary-memory", "", "go test -v output of the memory store's boundary tests")
	bredis := flag.String("boundary-redis", "", "go test -v output of the Redis store's boundary tests")
	dur := flag.Duration("duration", 10*time.Second, "length of the overload and leaky-bucket runs")
	flag.Parse()
	if *lp == "" {
		fmt.Fprintln(os.Stderr, "usage: versus -limitproxy BIN [-svg DIR] [-pin CPUS] [-boundary-memory FILE] [-boundary-redis FILE]")
		os.Exit(2)
	}
	if *dur < 3*time.Second {
		fmt.Fprintln(os.Stderr, "versus: -duration must be at least 3s (the leaky-bucket run skips its first second)")
		os.Exit(2)
	}
	var wrap []string
	if *pin != "" {
		wrap = []string{"taskset", "-c", *pin}
	}
	b := &bench{lp: *lp, wrap: wrap, dur: *dur, svgDir: *svgDir, svgRef: *svgRef, out: os.Stdout}
	if err := b.run(*bmem, *bredis); err != nil {
		fmt.Fprintln(os.Stderr, "versus:", err)
		os.Exit(1)
	}
}

// limitAt is the configured rate of the admission runs, per second.
const limitAt = 1000

// An algorithm under test: its name in paths and policies, and its
// limitproxy limit (TOML) at 1000 r/s.
type algo struct {
	id, label, toml, allows string
}

var algos = []algo{
	{"tb", "token_bucket", `algorithm = "token_bucket"
  rate = "1000/s"
  burst = 100`, "1100 (a full bucket, then the rate)"},
	{"lb", "leaky_bucket", `algorithm = "leaky_bucket"
  rate = "1000/s"
  queue = 100
  max_wait = "1s"`, "1000, 1 ms apart"},
	{"fw", "fixed_window", `algorithm = "fixed_window"
  limit = 1000
  window = "1s"`, "2000 (1000 at the end of one window, 1000 at the start of the next)"},
	{"sl", "sliding_log", `algorithm = "sliding_log"
  limit = 1000
  window = "1s"`, "1000 (exact)"},
	{"sw1", "sliding_window, 1 slot", `algorithm = "sliding_window"
  limit = 1000
  window = "1s"
  slots = 1`, "about 1000 (an estimate)"},
	{"sw10", "sliding_window, 10 slots", `algorithm = "sliding_window"
  limit = 1000
  window = "1s"
  slots = 10`, "about 1000 (an estimate)"},
}

// nginxLabel names nginx's row in every table.
const nginxLabel = "nginx limit_req"

type bench struct {
	lp             string
	wrap           []string
	dur            time.Duration
	svgDir, svgRef string
	out            io.Writer

	lpAddr, ngAddr string
	rec            *recorder
	client         *http.Client
}

// recorder is the upstream: it notes when each request arrives, by path.
type recorder struct {
	mu       sync.Mutex
	arrivals map[string][]time.Time
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	r.mu.Lock()
	r.arrivals[req.URL.Path] = append(r.arrivals[req.URL.Path], now)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, "ok\n")
}

// since returns the arrivals on path as offsets from start, sorted.
func (r *recorder) since(path string, start time.Time) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d []time.Duration
	for _, t := range r.arrivals[path] {
		d = append(d, t.Sub(start))
	}
	slices.Sort(d)
	return d
}

const lpPolicy = `[[policy]]
name = %q
upstream = "app"
key = ["ip"]
match = { path_prefix = %q }
  [[policy.limits]]
  %s
`

const nginxConf = `  upstream app { server %[1]s; keepalive 64; }
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  limit_req_zone $binary_remote_addr zone=acc:1m rate=1000r/s;
  limit_req_zone $binary_remote_addr zone=burst:1m rate=1000r/s;
  limit_req_zone $binary_remote_addr zone=gap:1m rate=100r/s;
  limit_req_zone $binary_remote_addr zone=bnd:1m rate=1000r/m;
  server {
    listen %[2]s;
    location /acc/ { limit_req zone=acc burst=100 nodelay; proxy_pass http://app; }
    location /burst/ { limit_req zone=burst burst=100 nodelay; proxy_pass http://app; }
    location /gap/ { limit_req zone=gap burst=50; proxy_pass http://app; }
    location /boundary/ { limit_req zone=bnd burst=1000 nodelay; proxy_pass http://app; }
  }
}
`

func (b *bench) run(bmem, bredis string) error {
	b.rec = &recorder{arrivals: map[string][]time.Time{}}
	upAddr := proc.FreeAddr()
	up := &http.Server{Addr: upAddr, Handler: b.rec, ReadHeaderTimeout: 5 * time.Second}
	go up.ListenAndServe()
	defer up.Close()
	if err := proc.WaitUp(upAddr); err != nil {
		return err
	}
	b.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute, DisableCompression: true}}

	// limitproxy: one policy per algorithm and run.
	b.lpAddr = proc.FreeAddr()
	var conf strings.Builder
	conf.WriteString(proc.LimitproxyConfig(b.lpAddr, upAddr, "none"))
	for _, run := range []string{"acc", "burst"} {
		for _, a := range algos {
			fmt.Fprintf(&conf, lpPolicy, run+"-"+a.id, "/"+run+"/"+a.id, a.toml)
		}
	}
	fmt.Fprintf(&conf, lpPolicy, "gap", "/gap/", `algorithm = "leaky_bucket"
  rate = "100/s"
  queue = 50
  max_wait = "5s"`)
	dir, err := os.MkdirTemp("", "versus")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "limitproxy.toml")
	if err := os.WriteFile(path, []byte(conf.String()), 0o644); err != nil {
		return err
	}
	args := slices.Concat(b.wrap, []string{b.lp, "-config", path})
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := proc.WaitUp(b.lpAddr); err != nil {
		return err
	}

	b.ngAddr = proc.FreeAddr()
	ngx, err := proc.StartNginx(proc.NginxPreamble+fmt.Sprintf(nginxConf, upAddr, b.ngAddr), b.ngAddr, b.wrap...)
	if err != nil {
		return err
	}
	defer ngx.Stop()

	if err := os.MkdirAll(b.svgDir, 0o755); err != nil {
		return err
	}
	if err := b.admission(); err != nil {
		return err
	}
	if err := b.bursty(); err != nil {
		return err
	}
	if err := b.gaps(); err != nil {
		return err
	}
	return b.boundary(bmem, bredis)
}

// url returns the URL of run/id on limitproxy, or on nginx for id "nginx".
func (b *bench) url(run, id string) string {
	if id == "nginx" {
		return "http://" + b.ngAddr + "/" + run + "/nginx"
	}
	return "http://" + b.lpAddr + "/" + run + "/" + id
}

// counts are what a load run got back.
type counts struct {
	ok, rejected, other, errors atomic.Int64
	late                        time.Duration // how far the generator fell behind its schedule at most
}

func (b *bench) get(url string, c *counts) {
	resp, err := b.client.Get(url)
	if err != nil {
		c.errors.Add(1)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode == 200:
		c.ok.Add(1)
	case resp.StatusCode == 429:
		c.rejected.Add(1)
	default:
		c.other.Add(1)
	}
}

// openLoop sends a request to url at each instant of schedule (offsets
// from the start), whatever the answers: up to workers at once.
func (b *bench) openLoop(url string, schedule []time.Duration, workers int) (time.Time, *counts) {
	c := &counts{}
	jobs := make(chan struct{}, len(schedule))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range jobs {
				b.get(url, c)
			}
		})
	}
	start := time.Now()
	for _, at := range schedule {
		if d := at - time.Since(start); d > 0 {
			time.Sleep(d)
		} else {
			c.late = max(c.late, -d)
		}
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	return start, c
}

// closedLoop runs clients that each send a request as soon as their
// previous one is answered, for d.
func (b *bench) closedLoop(url string, clients int, d time.Duration) (time.Time, *counts) {
	c := &counts{}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				b.get(url, c)
			}
		})
	}
	wg.Wait()
	return start, c
}

// uniform returns the instants of rate requests per second, evenly
// spaced, from from to to.
func uniform(rate float64, from, to time.Duration) []time.Duration {
	var s []time.Duration
	step := time.Duration(float64(time.Second) / rate)
	for t := from; t < to; t += step {
		s = append(s, t)
	}
	return s
}

// mostInWindow returns the most arrivals in any window of length w
// (half-open at its start, like sliding_log's (t−w, t]).
func mostInWindow(ts []time.Duration, w time.Duration) int {
	most, i := 0, 0
	for j := range ts {
		for ts[i] <= ts[j]-w {
			i++
		}
		most = max(most, j-i+1)
	}
	return most
}

// perSecond counts arrivals in each whole second [k s, (k+1) s) up to d.
func perSecond(ts []time.Duration, d time.Duration) []float64 {
	n := int(d / time.Second)
	bins := make([]float64, n)
	for _, t := range ts {
		if k := int(t / time.Second); t >= 0 && k < n {
			bins[k]++
		}
	}
	return bins
}

func (b *bench) admission() error {
	offered := 5 * limitAt
	fmt.Fprintf(b.out, "### Admission under overload\n\n")
	fmt.Fprintf(b.out, "Each limiter configured for %d r/s (burst 100 where it applies; the leaky bucket's queue 100), offered %d r/s for %v\n", limitAt, offered, b.dur)
	fmt.Fprintf(b.out, "(open loop: a request every %v whatever the answers), all from one client. Counted at the upstream: *admitted/s* is the\n", time.Second/time.Duration(offered))
	fmt.Fprintf(b.out, "total over the run divided by its length; *per second* the counts in each whole second of the run; *most in any 1 s* the\n")
	fmt.Fprintf(b.out, "largest count in any one-second window, slid over every arrival, against what the algorithm's definition allows. Arrivals are\n")
	fmt.Fprintf(b.out, "timed at the upstream, after forwarding, whose jitter moves a few across a window's edge: an exact limiter can read a few over.\n")
	fmt.Fprintf(b.out, "The leaky bucket's admitted/s includes the queue it held when the run ended (forwarded just after).\n\n")
	fmt.Fprintln(b.out, "| limiter | admitted/s | vs 1000 | per second (min–max) | most in any 1 s | the definition allows in any 1 s | rejected | generator behind schedule (max) |")
	fmt.Fprintln(b.out, "|---|---:|---:|---:|---:|---|---:|---:|")
	rows := slices.Clone(algos)
	rows = append(rows, algo{"nginx", nginxLabel, "", "1100 with burst=100 nodelay (a leaky bucket that admits the burst at once)"})
	for _, a := range rows {
		fmt.Fprintf(os.Stderr, "admission: %s\n", a.label)
		url := b.url("acc", a.id)
		start, c := b.openLoop(url, uniform(float64(offered), 0, b.dur), 256)
		time.Sleep(200 * time.Millisecond) // the leaky bucket's last departures
		ts := b.rec.since(pathOf(url), start)
		if c.errors.Load() > 0 || c.other.Load() > 0 {
			return fmt.Errorf("%s: %d transport errors, %d answers neither 200 nor 429", a.label, c.errors.Load(), c.other.Load())
		}
		sec := perSecond(ts, b.dur)
		fmt.Fprintf(b.out, "| %s | %.0f | %.3f× | %.0f–%.0f | %d | %s | %d | %v |\n", a.label,
			float64(len(ts))/b.dur.Seconds(), float64(len(ts))/b.dur.Seconds()/limitAt,
			slices.Min(sec), slices.Max(sec), mostInWindow(ts, time.Second), a.allows, c.rejected.Load(), c.late.Round(time.Millisecond))
	}
	fmt.Fprintln(b.out)
	return nil
}

func hostOf(url string) string {
	return strings.SplitN(strings.TrimPrefix(url, "http://"), "/", 2)[0]
}

// pathOf returns the path of one of b's URLs.
func pathOf(url string) string { return strings.TrimPrefix(url, "http://"+hostOf(url)) }

func (b *bench) bursty() error {
	// Three times: 1 s at 4× the limit, then 3 s at a quarter of it.
	var schedule []time.Duration
	for k := range 3 {
		at := time.Duration(k) * 4 * time.Second
		schedule = append(schedule, uniform(4*limitAt, at, at+time.Second)...)
		schedule = append(schedule, uniform(limitAt/4, at+time.Second, at+4*time.Second)...)
	}
	const total = 12 * time.Second
	const bin = 100 * time.Millisecond
	rates := func(ts []time.Duration) ([]float64, []float64) {
		n := int(total / bin)
		y := make([]float64, n)
		for _, t := range ts {
			if k := int(t / bin); t >= 0 && k < n {
				y[k] += float64(time.Second / bin)
			}
		}
		x := make([]float64, n)
		for i := range x {
			x[i] = (float64(i) + 0.5) * bin.Seconds()
		}
		return x, y
	}
	ox, oy := rates(schedule)
	rows := slices.Clone(algos)
	rows = append(rows, algo{id: "nginx", label: nginxLabel + " (burst=100 nodelay)"})
	chart := svgplot.Chart{
		Title:  fmt.Sprintf("Admitted rate, bursty trace: limit %d r/s, 100 ms bins at the upstream", limitAt),
		XLabel: "seconds", YLabel: "requests per second", XMax: total.Seconds(), PanelHeight: 110,
	}
	for i, a := range rows {
		fmt.Fprintf(os.Stderr, "bursty trace: %s\n", a.label)
		url := b.url("burst", a.id)
		start, c := b.openLoop(url, schedule, 256)
		time.Sleep(200 * time.Millisecond)
		if c.errors.Load() > 0 || c.other.Load() > 0 {
			return fmt.Errorf("%s: %d transport errors, %d answers neither 200 nor 429", a.label, c.errors.Load(), c.other.Load())
		}
		x, y := rates(b.rec.since(pathOf(url), start))
		chart.Panels = append(chart.Panels, svgplot.Panel{Title: a.label, YMax: 4500, Series: []svgplot.Series{
			{Name: "offered", Color: "#bbb", X: ox, Y: oy, Step: true},
			{Name: "admitted", Color: svgplot.Palette[i%len(svgplot.Palette)], X: x, Y: y, Step: true},
		}})
	}
	name := "admitted-over-time.svg"
	if err := os.WriteFile(filepath.Join(b.svgDir, name), chart.SVG(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(b.out, "### Admitted rate over time, bursty trace\n\n")
	fmt.Fprintf(b.out, "Three times over: 1 s at %d r/s (4× the limit), then 3 s at %d r/s, open loop through each limiter of the table above.\n", 4*limitAt, limitAt/4)
	fmt.Fprintf(b.out, "What to look for: the token bucket and nginx let the burst of 100 through, then the rate; the fixed window lets a\n")
	fmt.Fprintf(b.out, "window's 1000 through at once when a burst starts, and again when a window edge falls inside the burst; the sliding\n")
	fmt.Fprintf(b.out, "log admits the quiet second's unused share at once, then nothing until a second has passed (never more than 1000 in\n")
	fmt.Fprintf(b.out, "any second); the sliding windows estimate that, 10 slots closely, one slot loosely (the table above gives how far over\n")
	fmt.Fprintf(b.out, "they went); the leaky bucket forwards at its rate, delaying what fits in its queue.\n\n")
	fmt.Fprintf(b.out, "![admitted rate over time](%s%s)\n\n", b.svgRef, name)
	return nil
}

// gapStats summarises inter-arrival gaps in ms.
type gapStats struct {
	n                      int
	p1, p50, p99, max, bad float64 // bad: share below 0.9 of the interval
	rate                   float64
}

func (b *bench) gaps() error {
	const rate, clients = 100, 20
	interval := time.Second / rate
	warm := time.Second
	fmt.Fprintf(b.out, "### Smoothness of the leaky bucket\n\n")
	fmt.Fprintf(b.out, "%d r/s, %d concurrent clients from one address, each sending its next request when the last is answered, for %v;\n", rate, clients, b.dur)
	fmt.Fprintf(b.out, "the gaps between consecutive arrivals at the upstream after the first %v. A perfect leaky bucket gives every gap = %v.\n", warm, interval)
	fmt.Fprintf(b.out, "limitproxy: leaky_bucket rate 100/s, queue 50, max_wait 5s. nginx: limit_req rate=100r/s burst=50 without nodelay\n")
	fmt.Fprintf(b.out, "(requests over the rate are delayed, nginx's leaky bucket).\n\n")
	fmt.Fprintln(b.out, "| proxy | gaps | rate at the upstream | p1 ms | p50 ms | p99 ms | max ms | gaps < 0.9/rate (9 ms) | rejected |")
	fmt.Fprintln(b.out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	chart := svgplot.Chart{Title: fmt.Sprintf("Gaps between arrivals at the upstream: %d r/s, %d clients, 0.25 ms bins", rate, clients),
		XLabel: "gap (ms)", YLabel: "share of gaps", XMax: 20, PanelHeight: 140}
	for i, p := range []struct{ id, label string }{{"lp", "limitproxy leaky_bucket"}, {"nginx", nginxLabel + " (no nodelay)"}} {
		fmt.Fprintf(os.Stderr, "leaky gaps: %s\n", p.label)
		url := "http://" + b.lpAddr + "/gap/lp"
		if p.id == "nginx" {
			url = b.url("gap", "nginx")
		}
		start, c := b.closedLoop(url, clients, b.dur)
		if c.errors.Load() > 0 || c.other.Load() > 0 {
			return fmt.Errorf("%s: %d transport errors, %d answers neither 200 nor 429", p.label, c.errors.Load(), c.other.Load())
		}
		ts := b.rec.since(pathOf(url), start)
		var gaps []float64
		for j := 1; j < len(ts); j++ {
			if ts[j-1] >= warm && ts[j] <= b.dur {
				gaps = append(gaps, float64(ts[j]-ts[j-1])/float64(time.Millisecond))
			}
		}
		if len(gaps) < 10 {
			return fmt.Errorf("%s: only %d gaps", p.label, len(gaps))
		}
		s := summarise(gaps, float64(interval)/float64(time.Millisecond))
		fmt.Fprintf(b.out, "| %s | %d | %.1f/s | %.2f | %.2f | %.2f | %.2f | %.1f%% | %d |\n", p.label, s.n, s.rate,
			s.p1, s.p50, s.p99, s.max, 100*s.bad, c.rejected.Load())
		const width = 0.25
		x := make([]float64, int(20/width)+1)
		y := make([]float64, len(x))
		for k := range x {
			x[k] = float64(k) * width
		}
		for _, g := range gaps {
			if k := int(g / width); k < len(y)-1 {
				y[k] += 1 / float64(len(gaps))
			}
		}
		chart.Panels = append(chart.Panels, svgplot.Panel{Title: p.label, YMax: 1, Series: []svgplot.Series{
			{Name: fmt.Sprintf("%d gaps", len(gaps)), Color: svgplot.Palette[i], X: x, Y: y, Step: true}}})
	}
	name := "leaky-gaps.svg"
	if err := os.WriteFile(filepath.Join(b.svgDir, name), chart.SVG(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(b.out, "\n![gaps between arrivals: limitproxy and nginx](%s%s)\n\n", b.svgRef, name)
	return nil
}

func summarise(gaps []float64, interval float64) gapStats {
	s := slices.Sorted(slices.Values(gaps))
	q := func(p float64) float64 { return s[min(len(s)-1, int(math.Floor(p*float64(len(s)))))] }
	bad := 0
	sum := 0.0
	for _, g := range s {
		if g < 0.9*interval {
			bad++
		}
		sum += g
	}
	return gapStats{n: len(s), p1: q(0.01), p50: stats.Median(s), p99: q(0.99), max: s[len(s)-1],
		bad: float64(bad) / float64(len(s)), rate: 1000 * float64(len(s)) / sum}
}

// boundaryLine is a line of the boundary tests' -v output.
var boundaryLine = regexp.MustCompile(`^\s+\S+\.go:\d+: (\S+) (.*?)\s+admitted (\d+) of 2000 \((.*)\)$`)

type boundaryRow struct{ alg, params, admitted, why string }

func readBoundary(path string) ([]boundaryRow, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rows []boundaryRow
	for _, l := range strings.Split(string(data), "\n") {
		if m := boundaryLine.FindStringSubmatch(l); m != nil {
			rows = append(rows, boundaryRow{m[1], m[2], m[3], m[4]})
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no boundary results (is it `go test -v` output of the Boundary tests?)", path)
	}
	return rows, nil
}

func (b *bench) boundary(bmem, bredis string) error {
	mem, err := readBoundary(bmem)
	if err != nil {
		return err
	}
	red, err := readBoundary(bredis)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "boundary: nginx (2 s of real time)\n")
	url := b.url("boundary", "nginx")
	burst := func() int64 {
		var c counts
		var wg sync.WaitGroup
		var next atomic.Int64
		for range 8 {
			wg.Go(func() {
				for next.Add(1) <= 1000 {
					b.get(url, &c)
				}
			})
		}
		wg.Wait()
		return c.ok.Load()
	}
	t0 := time.Now()
	first := burst()
	took := time.Since(t0)
	time.Sleep(time.Until(t0.Add(2 * time.Second)))
	second := burst()

	fmt.Fprintf(b.out, "### Seed 002's boundary scenario\n\n")
	fmt.Fprintf(b.out, "A limit of 1000 per minute; 1000 requests at 0:59, 1000 more at 1:01. An exact limit admits 1000 of the 2000 in any minute.\n")
	fmt.Fprintf(b.out, "limitproxy's rows are its test suite's (`limitertest.RunBoundary` and the leaky-bucket boundary tests, injected time, each burst at one\n")
	fmt.Fprintf(b.out, "instant), for the memory store and the Redis store. nginx's row is measured over loopback in real time: its limit_req has no\n")
	fmt.Fprintf(b.out, "windows, so only the 2 s between the bursts matter; each burst took about %v (8 connections), during which its bucket drains too.\n\n", took.Round(time.Millisecond))
	fmt.Fprintln(b.out, "| limiter | parameters | admitted of 2000, memory store | Redis store | why |")
	fmt.Fprintln(b.out, "|---|---|---:|---:|---|")
	redis := map[string]string{}
	for _, r := range red {
		redis[r.alg+" "+r.params] = r.admitted
	}
	for _, r := range mem {
		rv := redis[r.alg+" "+r.params]
		if rv == "" {
			rv = "–"
		}
		fmt.Fprintf(b.out, "| %s | %s | %s | %s | %s |\n", r.alg, r.params, r.admitted, rv, r.why)
	}
	fmt.Fprintf(b.out, "| %s | rate=1000r/m burst=1000 nodelay | %d (%d + %d), measured | – | a leaky bucket of 1000 that drains 1000/min, counting in ms |\n\n",
		nginxLabel, first+second, first, second)
	return nil
}
