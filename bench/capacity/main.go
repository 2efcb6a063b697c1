// Command capacity measures how well a proxy protects a backend of fixed
// capacity from overload: an open-loop load at 0.5× to 10× the
// backend's capacity on 127.0.0.1, through
//
//   - limitproxy with a token bucket that never rejects ("no limit");
//   - limitproxy with a token bucket at the backend's nominal rate, one
//     key for everyone ("static limit": the static rate guess);
//   - HAProxy with maxconn on the server and a queue timeout, tuned by
//     hand ("HAProxy maxconn");
//   - limitproxy with the upstream's adaptive concurrency limit and its
//     defaults ("limitproxy adaptive"), when the limitproxy binary
//     accepts [upstream.concurrency]; otherwise the arm is reported
//     unavailable and the others run.
//
// The backend is this program itself (-serve): W workers, each request
// holding one for the service time, the others waiting in arrival order
// without bound, and POST /control?workers=N to change W. Each request's
// latency counts from its intended send time (no coordinated omission)
// and a request unanswered within the timeout counts as timed out, not
// as goodput. It measures, per arm and offered load, goodput, admitted
// (2xx) latency, sheds (429, 503) and their latency; the backend alone at
// half its capacity, for the unloaded latency; and, at twice the
// capacity, what each arm does when the backend's workers halve mid-run,
// with limitproxy's learned limit read from its metrics every 100 ms.
//
// It writes a Markdown section to stdout and three SVG figures. It
// starts every process it measures and stops each by its PID when done;
// every run is bounded (warm-up, duration, then at most the timeout and
// a second for the last answers).
//
//	capacity -limitproxy BIN [-haproxy BIN] [-svg DIR] [-svgref PATH] [-pin CPUS]
//	         [-workers 8] [-service 50ms] [-loads 0.5,1,1.5,2,4,7,10]
//	         [-warmup 2s] [-duration 8s] [-timeout 2s] [-halving 30s]
//	         [-haproxy-maxconn 8] [-haproxy-queue 25ms] [-arms LIST] > section.md
//	capacity -serve ADDR [-workers 8] [-service 50ms]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/limitproxy/limitproxy/bench/internal/proc"
	"github.com/limitproxy/limitproxy/bench/internal/stats"
)

// The arms, by id (the -arms flag) and name (the report).
const (
	idNone     = "none"
	idStatic   = "static"
	idHAProxy  = "haproxy"
	idAdaptive = "adaptive"
)

var armNames = map[string]string{
	idNone:     "no limit",
	idStatic:   "static limit",
	idHAProxy:  "HAProxy maxconn",
	idAdaptive: "limitproxy adaptive",
}

// armOrder is the order of the report's rows and of the halving runs.
var armOrder = []string{idNone, idStatic, idHAProxy, idAdaptive}

// halvingLoad is the offered load of the capacity-halving run, in
// multiples of the backend's capacity.
const halvingLoad = 2

// HAProxy's values, tuned by hand for the default backend (8 workers ×
// 50 ms) with -arms haproxy at 1× to 10×; the report says how.
const (
	tunedMaxconn = 8
	tunedQueue   = 25 * time.Millisecond
)

// settleBand is how close to its final median the learned limit must
// stay to count as settled: ±25%.
const settleBand = 0.25

type options struct {
	limitproxy, haproxy string
	svgDir, svgRef      string
	pin                 string
	workers             int
	service             time.Duration
	loads               []float64
	warm, dur, timeout  time.Duration
	halving             time.Duration // 0: no halving run
	haMaxconn           int
	haQueue             time.Duration
	arms                []string
}

// capacity is the backend's nominal capacity, requests per second.
func (o options) capacity() float64 { return float64(o.workers) / o.service.Seconds() }

// halveAt is when the halving run halves the backend's workers.
func (o options) halveAt() time.Duration { return o.halving / 3 }

// tail is the final window of the halving run over which its outcome is
// taken: the last 10 s, or the last half of the time after the halving
// if that is shorter.
func (o options) tail() time.Duration { return min(10*time.Second, (o.halving-o.halveAt())/2) }

func main() {
	var o options
	serveAddr := flag.String("serve", "", "run only the backend, on this address (capacity starts itself so)")
	flag.StringVar(&o.limitproxy, "limitproxy", "", "limitproxy binary")
	flag.StringVar(&o.haproxy, "haproxy", "haproxy", "haproxy binary")
	flag.StringVar(&o.svgDir, "svg", "docs", "directory the SVG figures are written to")
	flag.StringVar(&o.svgRef, "svgref", "docs/", "how the Markdown refers to that directory")
	flag.StringVar(&o.pin, "pin", "", "run the proxies and the backend on these CPUs (taskset -c), e.g. 1; pin capacity itself elsewhere")
	flag.IntVar(&o.workers, "workers", 8, "the backend's workers (even, for the halving run)")
	flag.DurationVar(&o.service, "service", 50*time.Millisecond, "how long each request holds a worker")
	loads := flag.String("loads", "0.5,1,1.5,2,4,7,10", "offered loads, in multiples of the backend's capacity, comma-separated")
	flag.DurationVar(&o.warm, "warmup", 2*time.Second, "unmeasured time before each measurement, at the same rate")
	flag.DurationVar(&o.dur, "duration", 8*time.Second, "measured time per arm and load")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Second, "client timeout, from each request's intended send time")
	flag.DurationVar(&o.halving, "halving", 30*time.Second, "length of the capacity-halving run (the workers halve at a third of it); 0: none")
	flag.IntVar(&o.haMaxconn, "haproxy-maxconn", tunedMaxconn, "HAProxy: maxconn of the server")
	flag.DurationVar(&o.haQueue, "haproxy-queue", tunedQueue, "HAProxy: timeout queue")
	arms := flag.String("arms", strings.Join(armOrder, ","), "arms to run, comma-separated: "+strings.Join(armOrder, ", "))
	flag.Parse()
	if *serveAddr != "" {
		serve(*serveAddr, o.workers, o.service)
		return
	}
	usage := func(msg string) {
		fmt.Fprintln(os.Stderr, "capacity:", msg)
		fmt.Fprintln(os.Stderr, "usage: capacity -limitproxy BIN [-haproxy BIN] [-svg DIR] [-svgref PATH] [-pin CPUS] [-workers 8] [-service 50ms]")
		fmt.Fprintln(os.Stderr, "       [-loads 0.5,1,1.5,2,4,7,10] [-warmup 2s] [-duration 8s] [-timeout 2s] [-halving 30s]")
		fmt.Fprintln(os.Stderr, "       [-haproxy-maxconn 8] [-haproxy-queue 25ms] [-arms none,static,haproxy,adaptive]")
		os.Exit(2)
	}
	for _, s := range strings.Split(*loads, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || f <= 0 {
			usage(fmt.Sprintf("bad load %q", s))
		}
		o.loads = append(o.loads, f)
	}
	slices.Sort(o.loads)
	for _, s := range strings.Split(*arms, ",") {
		s = strings.TrimSpace(s)
		if armNames[s] == "" {
			usage(fmt.Sprintf("unknown arm %q", s))
		}
		o.arms = append(o.arms, s)
	}
	switch {
	case o.limitproxy == "":
		usage("-limitproxy is required")
	case o.workers < 2 || o.workers%2 != 0 || o.service <= 0:
		usage("-workers must be even and at least 2, -service positive")
	case o.warm < 0 || o.dur < time.Second || o.timeout <= 0:
		usage("-duration must be at least 1s, -timeout positive")
	case o.halving != 0 && o.halving < 6*time.Second:
		usage("-halving must be 0 or at least 6s")
	case o.haMaxconn < 1 || o.haQueue <= 0:
		usage("-haproxy-maxconn and -haproxy-queue must be positive")
	}
	// The dispatcher sleeps in the kernel on a thread of its own; the
	// answers are read on another P (on one CPU, GOMAXPROCS would be 1).
	runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	// Every request of a timeout's worth at the highest load may be in
	// flight at once, each on a connection of its own.
	if err := proc.RaiseNoFile(uint64(maxConns(o.loads[len(o.loads)-1]*o.capacity(), o.timeout)) + 256); err != nil {
		fmt.Fprintln(os.Stderr, "capacity:", err)
		os.Exit(1)
	}
	if err := run(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "capacity:", err)
		os.Exit(1)
	}
}

// maxConns is the generator's pool limit at rate: a timeout's worth of
// requests and a quarter more.
func maxConns(rate float64, timeout time.Duration) int {
	return int(rate*timeout.Seconds()*1.25) + 64
}

// arm is one way of protecting the backend, and what was measured of it.
type arm struct {
	id, name    string
	addr        string // where the load goes
	admin       string // limitproxy's admin listener; "" for HAProxy
	unavailable string // why the arm did not run; "" if it did
	points      map[float64]*measured
	halving     *halving
}

// measured is one arm at one offered load.
type measured struct {
	point
	limit     []float64          // the learned limit's samples in the measured window (adaptive only)
	shedBy    map[string]float64 // limitproxy_upstream_shed_total's increase by reason (adaptive only)
	peakConns int
	poolFull  int
}

// halving is one arm's capacity-halving run.
type halving struct {
	seconds       []point  // second by second (perSecond)
	samples       []sample // limitproxy's metrics (adaptive only)
	halvedAt      time.Duration
	before, after point // the seconds from 2 s to the halving, and the final window
	settle        time.Duration
	settled       bool
	final         float64 // the learned limit's median over the final window
}

// bench is one run of the whole harness: the backend, the arms, and
// what was measured.
type bench struct {
	o        options
	self     string
	wrap     []string
	backend  string // the backend's address
	client   *http.Client
	arms     []*arm
	unloaded *measured // the backend alone at half its capacity
}

func run(o options, out io.Writer) error {
	b := &bench{o: o, client: &http.Client{Timeout: 5 * time.Second}}
	if o.pin != "" {
		b.wrap = []string{"taskset", "-c", o.pin}
	}
	var err error
	if b.self, err = os.Executable(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "capacity")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	b.backend = proc.FreeAddr()
	be, err := proc.Start(b.wrap, b.backend, b.self, "-serve", b.backend,
		"-workers", strconv.Itoa(o.workers), "-service", o.service.String())
	if err != nil {
		return fmt.Errorf("backend: %w", err)
	}
	defer stop(be)

	for _, id := range armOrder {
		if !slices.Contains(o.arms, id) {
			continue
		}
		a := &arm{id: id, name: armNames[id], points: map[float64]*measured{}}
		var cmd *exec.Cmd
		if id == idHAProxy {
			cmd, err = b.startHAProxy(a, dir)
		} else {
			cmd, err = b.startLimitproxy(a, dir)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		if cmd != nil {
			defer stop(cmd)
		}
		if a.unavailable != "" {
			fmt.Fprintf(os.Stderr, "capacity: arm %q unavailable, carrying on without it: %s\n", a.name, a.unavailable)
		}
		b.arms = append(b.arms, a)
	}
	running := b.ran()

	began := time.Now()
	fmt.Fprintf(os.Stderr, "backend alone at %g× capacity\n", 0.5)
	if b.unloaded, err = b.measure(&arm{name: "backend alone", addr: b.backend}, 0.5); err != nil {
		return err
	}
	if len(b.unloaded.admitted) == 0 {
		return fmt.Errorf("the backend alone answered nothing at half its capacity")
	}
	for li, f := range o.loads {
		for i := range running {
			a := running[(i+li)%len(running)]
			m, err := b.measure(a, f)
			if err != nil {
				return fmt.Errorf("%s at %g×: %w", a.name, f, err)
			}
			a.points[f] = m
		}
	}
	if o.halving > 0 {
		for _, a := range running {
			if err := b.halve(a); err != nil {
				return fmt.Errorf("%s, capacity halving: %w", a.name, err)
			}
		}
	}
	took := time.Since(began)
	if err := b.plots(); err != nil {
		return err
	}
	b.report(out, took)
	return nil
}

// stop stops a process of ours by its PID (SIGTERM, then SIGKILL after
// 5 s) and reaps it.
func stop(cmd *exec.Cmd) {
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// lpConfig is a limitproxy configuration: %[1]s the listen address,
// %[2]s the admin listener's, %[3]s the backend's, %[4]s the upstream's
// concurrency table (or nothing), %[5]s the policy's key, %[6]s and
// %[7]d its token bucket's rate and burst.
const lpConfig = `[server]
listen = %[1]q
rate_limit_headers = "none"
[admin]
listen = %[2]q
[log]
level = "warn"
access = false
[[upstream]]
name = "app"
targets = ["http://%[3]s"]
%[4]s
[[policy]]
name = "bench"
upstream = "app"
key = %[5]s
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = %[6]q
  burst = %[7]d
`

// adaptiveTable turns the adaptive concurrency limit on, with its
// defaults.
const adaptiveTable = `  [upstream.concurrency]
  adaptive = true
`

// startLimitproxy writes a's configuration and starts limitproxy with
// it. The adaptive arm's configuration is checked first: a limitproxy
// that refuses it leaves the arm unavailable (a.unavailable says why),
// with no process and no error.
func (b *bench) startLimitproxy(a *arm, dir string) (*exec.Cmd, error) {
	a.addr, a.admin = proc.FreeAddr(), proc.FreeAddr()
	var conf string
	switch a.id {
	case idNone, idAdaptive:
		table := ""
		if a.id == idAdaptive {
			table = adaptiveTable
		}
		conf = fmt.Sprintf(lpConfig, a.addr, a.admin, b.backend, table, `["ip"]`, "1000000000/s", 1000000000)
	case idStatic:
		rate := int(math.Round(b.o.capacity()))
		conf = fmt.Sprintf(lpConfig, a.addr, a.admin, b.backend, "", `[]`, fmt.Sprintf("%d/s", rate), max(1, rate/10))
	}
	path := filepath.Join(dir, "limitproxy-"+a.id+".toml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if a.id == idAdaptive {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		msg, err := exec.CommandContext(ctx, b.o.limitproxy, "check", "-config", path).CombinedOutput()
		if err != nil {
			a.unavailable = fmt.Sprintf("`limitproxy check` refuses its configuration (%v): %s", err, oneLine(string(msg)))
			return nil, nil
		}
	}
	cmd, err := proc.Start(b.wrap, a.addr, b.o.limitproxy, "-config", path)
	if err != nil {
		return nil, err
	}
	if err := proc.WaitUp(a.admin); err != nil {
		stop(cmd)
		return nil, err
	}
	return cmd, nil
}

// oneLine joins the lines of s with "; ", the path of the temporary
// configuration file left out.
func oneLine(s string) string {
	var v []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			if i := strings.Index(l, ".toml:"); i >= 0 {
				l = "FILE" + l[i+len(".toml"):]
			}
			v = append(v, l)
		}
	}
	return strings.Join(v, "; ")
}

// haConfig is HAProxy's configuration: %[1]s its listen address, %[2]s
// the backend's, %[3]d the server's maxconn, %[4]s the queue timeout.
// One thread, as limitproxy's one core; no logs; keep-alive on both
// sides; a request whose client has gone leaves the queue
// (abortonclose).
const haConfig = `global
  nbthread 1
  maxconn 8000
defaults
  mode http
  timeout connect 1s
  timeout client 30s
  timeout server 30s
  timeout http-keep-alive 30s
  timeout queue %[4]s
  option abortonclose
frontend fe
  bind %[1]s
  maxconn 8000
  default_backend app
backend app
  http-reuse always
  server s1 %[2]s maxconn %[3]d
`

// startHAProxy writes HAProxy's configuration and runs it in the
// foreground (-db: no daemon, no master process), so that its PID is
// the process to stop. A missing haproxy leaves the arm unavailable.
func (b *bench) startHAProxy(a *arm, dir string) (*exec.Cmd, error) {
	bin, err := lookHAProxy(b.o.haproxy)
	if err != nil {
		a.unavailable = "haproxy is not installed (bench/capacity.sh installs it when run as root: apt-get install haproxy)"
		return nil, nil
	}
	a.addr = proc.FreeAddr()
	path := filepath.Join(dir, "haproxy.cfg")
	queue := fmt.Sprintf("%dms", b.o.haQueue.Milliseconds())
	if err := os.WriteFile(path, []byte(fmt.Sprintf(haConfig, a.addr, b.backend, b.o.haMaxconn, queue)), 0o644); err != nil {
		return nil, err
	}
	return proc.Start(b.wrap, a.addr, bin, "-db", "-f", path)
}

// lookHAProxy finds the haproxy binary: bin in PATH, or Debian's
// /usr/sbin/haproxy when bin is the default and /usr/sbin is not in PATH.
func lookHAProxy(bin string) (string, error) {
	p, err := exec.LookPath(bin)
	if err != nil && bin == "haproxy" {
		if _, e := os.Stat("/usr/sbin/haproxy"); e == nil {
			return "/usr/sbin/haproxy", nil
		}
	}
	return p, err
}

// haproxyVersion returns "HAProxy 2.6.12-1+deb12u4" (haproxy -v's
// first line, its third word), or "HAProxy" if that fails.
func haproxyVersion(bin string) string {
	p, err := lookHAProxy(bin)
	if err != nil {
		return "HAProxy"
	}
	v, err := exec.Command(p, "-v").Output()
	if f := strings.Fields(string(v)); err == nil && len(f) >= 3 {
		return "HAProxy " + f[2]
	}
	return "HAProxy"
}

// control sets the backend's workers (n > 0) or only reads its state,
// and returns how many requests hold a worker or wait for one.
func (b *bench) control(n int) (busy, waiting int, err error) {
	u := "http://" + b.backend + "/control"
	var resp *http.Response
	if n > 0 {
		resp, err = b.client.PostForm(u, url.Values{"workers": {strconv.Itoa(n)}})
	} else {
		resp, err = b.client.Get(u)
	}
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	var workers int
	if _, err := fmt.Sscanf(string(body), "workers %d busy %d waiting %d", &workers, &busy, &waiting); err != nil {
		return 0, 0, fmt.Errorf("backend control: %q: %w", body, err)
	}
	return busy, waiting, nil
}

// reset gives the backend its full workers back and waits (up to 10 s)
// until no request holds one or waits.
func (b *bench) reset() error {
	if _, _, err := b.control(b.o.workers); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		busy, waiting, err := b.control(0)
		if err != nil {
			return err
		}
		if busy == 0 && waiting == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the backend is still busy 10 s after a run: %d requests at a worker, %d waiting", busy, waiting)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scrape reads limitproxy's metrics.
func (b *bench) scrape(admin string) ([]metric, error) {
	resp, err := b.client.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(string(body))
}

// sampler reads limitproxy's concurrency metrics every 100 ms until
// stopped.
type sampler struct {
	cancel context.CancelFunc
	done   chan []timed
}

type timed struct {
	at time.Time
	sample
}

func (b *bench) startSampler(admin string) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{cancel: cancel, done: make(chan []timed, 1)}
	go func() {
		var v []timed
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			at := time.Now()
			if ms, err := b.scrape(admin); err == nil {
				x := timed{at: at}
				x.limit, x.ok = find(ms, "limitproxy_upstream_concurrency_limit")
				x.inFlight, _ = find(ms, "limitproxy_upstream_in_flight")
				x.queued, _ = find(ms, "limitproxy_upstream_queue_depth")
				v = append(v, x)
			}
			select {
			case <-ctx.Done():
				s.done <- v
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the samples, their times counted
// from start.
func (s *sampler) stop(start time.Time) []sample {
	s.cancel()
	var v []sample
	for _, x := range <-s.done {
		x.t = x.at.Sub(start)
		v = append(v, x.sample)
	}
	return v
}

// measure runs a at offered load f (× capacity): warm-up, then the
// measured window.
func (b *bench) measure(a *arm, f float64) (*measured, error) {
	o := b.o
	rate := f * o.capacity()
	if err := b.reset(); err != nil {
		return nil, err
	}
	var smp *sampler
	var shed0 map[string]float64
	if a.id == idAdaptive {
		ms, err := b.scrape(a.admin)
		if err != nil {
			return nil, err
		}
		shed0 = byLabel(ms, "limitproxy_upstream_shed_total", "reason")
		smp = b.startSampler(a.admin)
	}
	res, err := load(a.addr, rate, o.warm, o.dur, o.timeout).Run()
	var samples []sample
	if smp != nil {
		samples = smp.stop(res.Start)
	}
	if err != nil {
		return nil, err
	}
	m := &measured{point: summarise(res.Out, rate, o.warm, o.warm+o.dur, o.timeout), peakConns: res.PeakConns, poolFull: res.PoolFull}
	if a.id == idAdaptive {
		for _, s := range samples {
			if s.ok && s.t >= o.warm && s.t < o.warm+o.dur {
				m.limit = append(m.limit, s.limit)
			}
		}
		ms, err := b.scrape(a.admin)
		if err != nil {
			return nil, err
		}
		m.shedBy = byLabel(ms, "limitproxy_upstream_shed_total", "reason")
		for k, v := range shed0 {
			m.shedBy[k] -= v
		}
	}
	p99, _ := quantile(m.admitted, 0.99)
	s99, _ := quantile(m.shed, 0.99)
	fmt.Fprintf(os.Stderr, "%g× (%.0f r/s) %s: goodput %.0f r/s, admitted p99 %.1f ms, shed %d (p99 %.1f ms), timeouts %d, errors %d\n",
		f, rate, a.name, m.goodput, p99, len(m.shed), s99, m.timeouts, m.errors)
	return m, nil
}

// halve runs a at twice the backend's capacity for o.halving, halving
// the backend's workers at o.halveAt().
func (b *bench) halve(a *arm) error {
	o := b.o
	rate := halvingLoad * o.capacity()
	if err := b.reset(); err != nil {
		return err
	}
	var smp *sampler
	if a.id == idAdaptive {
		smp = b.startSampler(a.admin)
	}
	h := &halving{}
	var timer *time.Timer
	halved := make(chan error, 1)
	onStart := func(start time.Time) {
		timer = time.AfterFunc(time.Until(start.Add(o.halveAt())), func() {
			_, _, err := b.control(o.workers / 2)
			h.halvedAt = time.Since(start)
			halved <- err
		})
	}
	fmt.Fprintf(os.Stderr, "capacity halving: %s at %.0f r/s for %v, %d workers, then %d from %v\n",
		a.name, rate, o.halving, o.workers, o.workers/2, o.halveAt())
	l := load(a.addr, rate, 0, o.halving, o.timeout)
	l.OnStart = onStart
	res, err := l.Run()
	if smp != nil {
		h.samples = smp.stop(res.Start)
	}
	if err != nil {
		return err
	}
	if timer.Stop() {
		return fmt.Errorf("the run ended before the halving")
	}
	if err := <-halved; err != nil {
		return err
	}
	h.seconds = perSecond(res.Out, rate, o.halving, o.timeout)
	h.before = summarise(res.Out, rate, 2*time.Second, o.halveAt(), o.timeout)
	h.after = summarise(res.Out, rate, o.halving-o.tail(), o.halving, o.timeout)
	if smp != nil {
		h.settle, h.final, h.settled = settleTime(h.samples, h.halvedAt, o.tail(), settleBand)
	}
	a.halving = h
	p99, _ := quantile(h.after.admitted, 0.99)
	fmt.Fprintf(os.Stderr, "  goodput %.0f r/s before, %.0f r/s over the last %v (admitted p99 %.0f ms)\n", h.before.goodput, h.after.goodput, o.tail(), p99)
	return nil
}

// medianSpread formats the median of v with its min–max; "–" for none.
func medianSpread(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f (%.0f–%.0f)", stats.Median(v), slices.Min(v), slices.Max(v))
}
