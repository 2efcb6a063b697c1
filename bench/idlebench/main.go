// Command idlebench measures what an idle client connection costs a
// server, on 127.0.0.1 (issue 40): for each count N and each target it
// starts the server afresh, warms it up with 1,000 connections of one
// request each, closed (warmUp), reads its resident memory (VmRSS, summed over the
// process and its children: nginx's master and worker), then opens N
// keep-alive connections, each sending one request and reading its
// answer, and holds them open and idle. It reads the memory again a few
// seconds later ("right after": (after − before) / N) and, for a Go
// server, once more after the garbage collector has run while the
// connections idle ("settled"): an idle Go process collects only when
// the runtime forces it, two minutes after its last collection, and
// until then holds as free heap what the burst of N connections and
// their requests left (stacks grown by the handlers, garbage). The
// settled figure, counted from the server's own baseline (started
// alike, warmed up and settled with no connection, in a process of its
// own), is what the connections themselves hold; for nginx the two are
// one. For limitproxy it also reads, from its metrics, the Go
// heap and stacks in use (HeapInuse + StackInuse) when settled.
//
// The targets: limitproxy answering 429 and forwarding, over plain
// HTTP/1.1 (its own front), HTTP/1.1 over TLS and HTTP/2 over TLS
// (net/http's server); nginx with limit_req, the same ways; a bare
// net/http server answering the same 429 (bench/bare429) and a bare
// httputil.ReverseProxy (bench/bareproxy). The clients are child
// processes, one a target (this program run with -hold), so that each
// has a descriptor limit of its own: raw connections (crypto/tls for
// TLS, x/net/http2's framer for HTTP/2), 16 opened at a time, closed
// with a reset (SO_LINGER 0) so that no port waits in TIME_WAIT. A count
// needs as many descriptors in the server; when the hard limit (ulimit
// -Hn) allows fewer and cannot be raised (that takes CAP_SYS_RESOURCE),
// the count is cut to what it allows, and the report says so. Past
// 25,000 connections a client connects from further loopback addresses
// (127.0.0.2…), each having its own 28,000 ports. The Go servers wait
// for their collection together, -parallel at a time, so that a run
// takes minutes, not one wait per server.
//
// It starts every process it measures and stops each by its PID.
//
//	idlebench -limitproxy BIN -bare429 BIN -bareproxy BIN [-conns 1000,10000,50000] [-parallel 4] > section.md
package main

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/limitproxy/limitproxy/bench/internal/proc"
)

// proto is how the client speaks to a target.
type proto int

const (
	plain   proto = iota // HTTP/1.1
	overTLS              // HTTP/1.1 over TLS
	h2                   // HTTP/2 over TLS (ALPN h2)
)

func (p proto) String() string {
	return [...]string{"HTTP/1.1", "HTTP/1.1 + TLS", "HTTP/2 + TLS"}[p]
}

// target is a server to measure: start runs it on addr.
type target struct {
	name   string
	proto  proto
	goProc bool // a Go process: it settles (see the package comment)
	start  func(addr string) (running, error)
}

// running is a started target.
type running struct {
	pid     int
	metrics string // its Prometheus metrics' URL; "": none
	stop    func()
}

// result is one target's measurement at one count.
type result struct {
	n         int
	before    int64 // RSS, bytes, warmed up
	after     int64 // RSS right after
	base      int64 // RSS of the server warmed up and settled with no connection (before, for nginx)
	settled   int64 // RSS once settled (after, for nginx)
	goBase    int64 // HeapInuse+StackInuse, bytes, settled with no connection; -1: unknown
	goSettled int64 // the same once settled with the connections; -1: unknown
	statuses  map[int]int
	opened    time.Duration
}

// baseline is a Go server's memory warmed up and settled with no
// connection held, measured in a process of its own started alike: what
// the settled figures are counted from (the reading before the
// connections are opened still holds the warm-up's garbage, which the
// collection that settles them gives back).
type baseline struct{ rss, goMem int64 }

// settleAfter is how long a Go server's connections idle before its
// memory is read settled: an idle Go process is forced to collect two
// minutes after its last collection, up to a minute later when nothing
// else wakes its runtime (a server with no timer), and gives back what
// it freed within seconds.
const settleAfter = 2*time.Minute + 80*time.Second

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-hold" {
		hold(os.Args[2:])
		return
	}
	lp := flag.String("limitproxy", "", "limitproxy binary")
	bare429 := flag.String("bare429", "", "bench/bare429 binary")
	bareproxy := flag.String("bareproxy", "", "bench/bareproxy binary")
	connsFlag := flag.String("conns", "1000,10000,50000", "connection counts")
	parallel := flag.Int("parallel", 4, "Go servers loaded and settling at once")
	only := flag.String("only", "", "measure only the targets whose names contain this")
	flag.Parse()
	if *lp == "" || *bare429 == "" || *bareproxy == "" {
		fmt.Fprintln(os.Stderr, "usage: idlebench -limitproxy BIN -bare429 BIN -bareproxy BIN [-conns …] [-parallel 4]")
		os.Exit(2)
	}
	var counts []int
	for s := range strings.SplitSeq(*connsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "idlebench: bad count %q\n", s)
			os.Exit(2)
		}
		counts = append(counts, n)
	}
	if err := run(*lp, *bare429, *bareproxy, counts, max(1, *parallel), *only, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "idlebench:", err)
		os.Exit(1)
	}
}

// reserve is the descriptors a count leaves for everything else, in the
// server (its listeners, upstream connections, log files) and in a
// client.
const reserve = 400

// raiseFiles raises this process's descriptor limit to n where it may
// (the hard one too, as root with CAP_SYS_RESOURCE), else to the hard
// one, and returns the limit it has.
func raiseFiles(n uint64) uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	if lim.Max < n {
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}) == nil {
			return n
		}
	}
	lim.Cur = lim.Max
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	return lim.Cur
}

func run(lp, bare429, bareproxy string, counts []int, parallel int, only string, out io.Writer) error {
	hard := raiseFiles(uint64(slices.Max(counts) + reserve))
	capped := int(hard) - reserve
	dir, err := os.MkdirTemp("", "idlebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cert, key, err := selfSigned(dir)
	if err != nil {
		return err
	}
	up, err := proc.StartOKUpstream()
	if err != nil {
		return err
	}
	defer up.Close()
	var targets []target
	for _, t := range targetsFor(lp, bare429, bareproxy, dir, cert, key, up.Addr, hard) {
		if only == "" || strings.Contains(t.name, only) {
			targets = append(targets, t)
		}
	}
	// The Go servers first, so that they settle while nginx is
	// measured.
	slices.SortStableFunc(targets, func(a, b target) int {
		if a.goProc == b.goProc {
			return 0
		}
		if a.goProc {
			return -1
		}
		return 1
	})
	results := map[string][]result{}
	began := time.Now()
	bases := map[string]baseline{}
	var goTargets []target
	for _, t := range targets {
		if t.goProc {
			goTargets = append(goTargets, t)
		}
	}
	for group := range slices.Chunk(goTargets, parallel) {
		var ls []*loaded
		for _, t := range group {
			fmt.Fprintf(os.Stderr, "%s, baseline (%v in)\n", t.name, time.Since(began).Round(time.Second))
			l, err := load(t, 0)
			if err != nil {
				for _, l := range ls {
					l.stop()
				}
				return fmt.Errorf("%s, baseline: %w", t.name, err)
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			err := l.settle()
			l.stop()
			if err != nil {
				return fmt.Errorf("%s, baseline: %w", l.t.name, err)
			}
			bases[l.t.name] = baseline{rss: l.r.settled, goMem: l.r.goSettled}
		}
	}
	for _, n := range counts {
		n := min(n, capped)
		var waiting []*loaded
		finish := func() error {
			for _, l := range waiting {
				if err := l.settle(); err != nil {
					return fmt.Errorf("%s, %d connections: %w", l.t.name, n, err)
				}
				l.stop()
				l.r.base, l.r.goBase = bases[l.t.name].rss, bases[l.t.name].goMem
				fmt.Fprintf(os.Stderr, "%s, %d connections: settled %s a connection (right after: %s)\n", l.t.name, n,
					bytesLabel(perConn(l.r.base, l.r.settled, n)), bytesLabel(perConn(l.r.before, l.r.after, n)))
				results[l.t.name] = append(results[l.t.name], l.r)
			}
			waiting = nil
			return nil
		}
		for _, t := range targets {
			fmt.Fprintf(os.Stderr, "%s, %d connections (%v in)\n", t.name, n, time.Since(began).Round(time.Second))
			l, err := load(t, n)
			if err != nil {
				for _, l := range waiting {
					l.stop()
				}
				return fmt.Errorf("%s, %d connections: %w", t.name, n, err)
			}
			if !t.goProc {
				l.r.base, l.r.settled, l.r.goBase = l.r.before, l.r.after, -1
				l.stop()
				results[t.name] = append(results[t.name], l.r)
				continue
			}
			waiting = append(waiting, l)
			if len(waiting) == parallel {
				if err := finish(); err != nil {
					return err
				}
			}
		}
		if err := finish(); err != nil {
			return err
		}
	}
	report(out, targets, results, counts, capped, hard, time.Since(began))
	return nil
}

func perConn(before, after int64, n int) float64 {
	if before < 0 || after < 0 {
		return -1
	}
	return float64(after-before) / float64(n)
}

// loaded is a target started, warmed up and holding its connections.
type loaded struct {
	t      target
	rt     running
	client *exec.Cmd
	stdin  io.WriteCloser
	at     time.Time // when its connections were all open
	r      result
}

// load starts t, warms it with one request, reads its memory, has a
// client open n idle connections to it, and reads its memory again a
// few seconds later.
func load(t target, n int) (*loaded, error) {
	addr := proc.FreeAddr()
	rt, err := t.start(addr)
	if err != nil {
		return nil, err
	}
	l := &loaded{t: t, rt: rt, r: result{n: n, goSettled: -1, goBase: -1}}
	fail := func(err error) (*loaded, error) {
		l.stop()
		return nil, err
	}
	if err := warmUp(t.proto, addr); err != nil {
		return fail(fmt.Errorf("warm-up: %w", err))
	}
	time.Sleep(time.Second)
	if l.r.before, err = rss(rt.pid); err != nil {
		return fail(err)
	}
	if n == 0 {
		l.at = time.Now()
		return l, nil
	}
	start := time.Now()
	cmd := exec.Command(os.Args[0], "-hold", addr, strconv.Itoa(n), strconv.Itoa(int(t.proto)))
	cmd.Stderr = os.Stderr
	proc.DieWithParent(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fail(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fail(err)
	}
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	l.client, l.stdin = cmd, stdin
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return fail(fmt.Errorf("the client exited before its connections were open"))
	}
	if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ready "); !ok {
		return fail(fmt.Errorf("client: %s", strings.TrimSpace(line)))
	} else if l.r.statuses, err = parseStatuses(rest); err != nil {
		return fail(err)
	}
	l.at = time.Now()
	l.r.opened = l.at.Sub(start)
	time.Sleep(3 * time.Second) // past the front's shedAfter (1 s)
	if l.r.after, err = rss(rt.pid); err != nil {
		return fail(err)
	}
	return l, nil
}

// settle waits until settleAfter has passed since l's connections were
// open, without a look at its metrics meanwhile (a scrape allocates,
// and would have a server collect more often than the others: each
// collection halves an idle goroutine's stack), and reads its memory.
func (l *loaded) settle() error {
	time.Sleep(time.Until(l.at.Add(settleAfter)))
	var err error
	if l.r.settled, err = rss(l.rt.pid); err != nil {
		return err
	}
	l.r.goSettled = goMemory(l.rt.metrics)
	return nil
}

// stop closes l's connections (its client exits) and stops its server.
func (l *loaded) stop() {
	if l.client != nil {
		l.stdin.Close()
		done := make(chan struct{})
		go func() { l.client.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			l.client.Process.Kill()
			<-done
		}
	}
	l.rt.stop()
}

// warmUps is how many connections warm a server up: each opened, one
// request, closed. Enough that a Go server has collected at least once
// (its heap has grown to the runtime's 4 MiB minimum goal) and filled
// its pools and maps, which would otherwise be counted against the
// connections measured; a few seconds under TLS.
const warmUps = 1000

// warmUp opens warmUps connections to addr, 16 at a time, each sending
// one request, and closes them.
func warmUp(p proto, addr string) error {
	work := make(chan int)
	errs := make(chan error, warmUps)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				c, _, err := open(p, addr, i)
				if err != nil {
					errs <- err
					continue
				}
				c.Close()
			}
		})
	}
	for i := range warmUps {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

// hold is a client (-hold ADDR N PROTO): it opens N connections to ADDR,
// each sending one request and reading its answer, prints "ready" and
// the answers' status codes, and holds them until its input closes.
func hold(args []string) {
	if len(args) != 3 {
		fmt.Println("error: usage: -hold ADDR N PROTO")
		os.Exit(2)
	}
	addr := args[0]
	n, _ := strconv.Atoi(args[1])
	p, _ := strconv.Atoi(args[2])
	raiseFiles(uint64(n + reserve))
	conns := make([]net.Conn, n)
	statuses := map[int]int{}
	var mu sync.Mutex
	var firstErr error
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				c, status, err := open(proto(p), addr, i)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("connection %d: %w", i, err)
				}
				statuses[status]++
				mu.Unlock()
				conns[i] = c
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		fmt.Printf("error: %v\n", firstErr)
		os.Exit(1)
	}
	fmt.Printf("ready %s\n", statusLabel(statuses))
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
}

func parseStatuses(s string) (map[int]int, error) {
	m := map[int]int{}
	for f := range strings.SplitSeq(s, ", ") {
		count, code, ok := strings.Cut(f, "×")
		n, err1 := strconv.Atoi(count)
		c, err2 := strconv.Atoi(code)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("client: bad answer count %q", f)
		}
		m[c] = n
	}
	return m, nil
}

// open opens the i-th connection to addr, sends one GET and reads its
// answer whole; it returns the connection, held open, and the status.
// Under TLS it returns the TCP connection under it: the client's TLS
// state is dropped (nothing more is sent), so that the client holds
// little for each.
func open(p proto, addr string, i int) (net.Conn, int, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	if i >= 25000 {
		// Another loopback address for each 25,000 connections: one
		// has about 28,000 ports to connect from.
		d.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i/25000))}
	}
	raw, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	raw.(*net.TCPConn).SetLinger(0)
	raw.SetDeadline(time.Now().Add(20 * time.Second))
	c := raw
	if p != plain {
		proto := "http/1.1"
		if p == h2 {
			proto = "h2"
		}
		tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}, ServerName: "127.0.0.1"})
		if err := tc.Handshake(); err != nil {
			raw.Close()
			return nil, 0, err
		}
		if got := tc.ConnectionState().NegotiatedProtocol; got != proto && !(got == "" && p == overTLS) {
			raw.Close()
			return nil, 0, fmt.Errorf("ALPN: %q negotiated, want %q", got, proto)
		}
		c = tc
	}
	var status int
	if p == h2 {
		status, err = getH2(c, addr)
	} else {
		status, err = getH1(c)
	}
	if err != nil {
		c.Close()
		return nil, 0, err
	}
	raw.SetDeadline(time.Time{})
	return raw, status, nil
}

// getH1 sends a GET on c and reads the answer whole.
func getH1(c net.Conn) (int, error) {
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: idlebench\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	if resp.Close {
		return 0, fmt.Errorf("answered %d with Connection: close", resp.StatusCode)
	}
	return resp.StatusCode, nil
}

// getH2 speaks HTTP/2 on c: the preface, its settings, one GET on stream
// 1, and the frames that follow until that stream ends (acknowledging
// the server's settings).
func getH2(c net.Conn, addr string) (int, error) {
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return 0, err
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return 0, err
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", addr}, {":path", "/"}, {"user-agent", "idlebench"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		return 0, err
	}
	dec := hpack.NewDecoder(4096, nil)
	status := 0
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return 0, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					return 0, err
				}
			}
		case *http2.HeadersFrame:
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				return 0, err
			}
			for _, hf := range fields {
				if hf.Name == ":status" {
					status, _ = strconv.Atoi(hf.Value)
				}
			}
			if f.StreamEnded() {
				return status, nil
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				return status, nil
			}
		case *http2.GoAwayFrame:
			return 0, fmt.Errorf("GOAWAY %v", f.ErrCode)
		case *http2.RSTStreamFrame:
			return 0, fmt.Errorf("RST_STREAM %v", f.ErrCode)
		}
	}
}

// rss returns the resident memory of pid and its children, in bytes.
func rss(pid int) (int64, error) {
	var total int64
	for _, p := range proc.Tree(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			return 0, err
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("/proc/%d/status: %q", p, line)
				}
				total += kb << 10
			}
		}
	}
	return total, nil
}

// goMemory returns go_memstats_heap_inuse_bytes +
// go_memstats_stack_inuse_bytes from the metrics at url, or -1.
func goMemory(url string) int64 {
	heap, stacks := metric(url, "go_memstats_heap_inuse_bytes"), metric(url, "go_memstats_stack_inuse_bytes")
	if heap < 0 || stacks < 0 {
		return -1
	}
	return int64(heap + stacks)
}

// metric returns the value of the metric name (without labels) at url,
// or -1.
func metric(url, name string) float64 {
	if url == "" {
		return -1
	}
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// selfSigned writes a certificate for 127.0.0.1 and its key (ECDSA
// P-256, as a deployment would have) into dir.
func selfSigned(dir string) (cert, key string, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return "", "", err
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", "", err
	}
	return cert, key, nil
}

// The limits: one that rejects all but a client's first request, and
// one that never rejects.
const (
	rejecting = `[[policy]]
name = "bench"
upstream = "app"
key = ["ip"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/1h"
  burst = 1
`
	never = `[[policy]]
name = "bench"
upstream = "app"
key = ["ip"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000000000/s"
  burst = 1000000000
`
)

func targetsFor(lp, bare429, bareproxy, dir, cert, key, upstream string, files uint64) []target {
	var ts []target
	for _, p := range []proto{plain, overTLS, h2} {
		for _, limit := range []struct{ name, policy string }{{"429", rejecting}, {"forwarding", never}} {
			ts = append(ts, target{name: "limitproxy " + limit.name + ", " + p.String(), proto: p, goProc: true,
				start: func(addr string) (running, error) {
					return startLimitproxy(lp, dir, addr, upstream, p, cert, key, limit.policy)
				}})
		}
	}
	for _, p := range []proto{plain, overTLS, h2} {
		for _, limit := range []string{"429", "forwarding"} {
			ts = append(ts, target{name: "nginx " + limit + ", " + p.String(), proto: p,
				start: func(addr string) (running, error) {
					return startNginx(addr, upstream, p, cert, key, limit == "429", files)
				}})
		}
	}
	ts = append(ts,
		target{name: "bare net/http 429, HTTP/1.1", proto: plain, goProc: true, start: func(addr string) (running, error) {
			return startCmd(exec.Command(bare429, "-listen", addr), addr)
		}},
		target{name: "bare ReverseProxy, HTTP/1.1", proto: plain, goProc: true, start: func(addr string) (running, error) {
			return startCmd(exec.Command(bareproxy, "-listen", addr, "-target", "http://"+upstream), addr)
		}})
	return ts
}

func startCmd(cmd *exec.Cmd, addr string) (running, error) {
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	proc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return running{}, err
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	if err := proc.WaitUp(addr); err != nil {
		stop()
		return running{}, err
	}
	return running{pid: cmd.Process.Pid, stop: stop}, nil
}

// startLimitproxy runs limitproxy as deployed (its access log on, to a
// file; metrics), with max_connections above the count and its admin
// listener on another port, for its metrics.
func startLimitproxy(bin, dir, addr, upstream string, p proto, cert, key, policy string) (running, error) {
	admin := proc.FreeAddr()
	conf := proc.LimitproxyConfigAccessLog(addr, upstream, "draft")
	conf = strings.Replace(conf, "[server]\n", "[server]\nmax_connections = 1000000\n", 1)
	conf = strings.Replace(conf, "[admin]\nlisten = \"\"\n", fmt.Sprintf("[admin]\nlisten = %q\n", admin), 1)
	if p != plain {
		conf = strings.Replace(conf, "[admin]\n", fmt.Sprintf("[server.tls]\nmode = \"files\"\ncert_file = %q\nkey_file = %q\n[admin]\n", cert, key), 1)
	}
	sub, err := os.MkdirTemp(dir, "limitproxy")
	if err != nil {
		return running{}, err
	}
	cmd, f, err := proc.LimitproxyCommand(bin, filepath.Join(sub, "config.toml"), conf+policy, filepath.Join(dir, filepath.Base(sub)+".log"))
	if err != nil {
		return running{}, err
	}
	rt, err := startCmd(cmd, addr)
	if err != nil {
		f.Close()
		return running{}, err
	}
	stop := rt.stop
	rt.stop = func() { stop(); f.Close() }
	rt.metrics = "http://" + admin + "/metrics"
	return rt, nil
}

// startNginx runs nginx with one worker allowed files descriptors,
// limit_req keyed by client address (rejecting all but a client's first
// request, or none), keep-alive connections kept 120 s, and the upstream
// behind it.
func startNginx(addr, upstream string, p proto, cert, key string, rejects bool, files uint64) (running, error) {
	rate, burst := "1r/m", ""
	if !rejects {
		rate, burst = "100000r/s", " burst=1000000"
	}
	listen := addr
	switch p {
	case overTLS:
		listen += " ssl"
	case h2:
		listen += " ssl http2"
	}
	conf := fmt.Sprintf(`worker_processes 1;
worker_rlimit_nofile %d;
error_log stderr error;
pid nginx.pid;
events { worker_connections %d; }
http {
  access_log off;
  client_body_temp_path tmp/body;
  proxy_temp_path tmp/proxy;
  fastcgi_temp_path tmp/fastcgi;
  uwsgi_temp_path tmp/uwsgi;
  scgi_temp_path tmp/scgi;
  keepalive_timeout 120s;
  limit_req_log_level info;
  limit_req_status 429;
  limit_req_zone $binary_remote_addr zone=bench:1m rate=%s;
  upstream app {
    server %s;
    keepalive 64;
  }
  server {
    listen %s;
    ssl_certificate %s;
    ssl_certificate_key %s;
    location / {
      limit_req zone=bench%s nodelay;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://app;
    }
  }
}
`, files, files, rate, upstream, listen, cert, key, burst)
	n, err := proc.StartNginx(conf, addr)
	if err != nil {
		return running{}, err
	}
	return running{pid: n.Pid(), stop: n.Stop}, nil
}

// report writes the section's tables: settled, then right after.
func report(out io.Writer, targets []target, results map[string][]result, counts []int, capped int, hard uint64, took time.Duration) {
	last := countLabel(counts[len(counts)-1], capped)
	// slopes are the columns of what one connection more adds between
	// two counts, from each count's absolute memory (servers started
	// alike): it leaves out what a server spends once, whatever the
	// count (a Go heap's minimum, pools, maps), which weighs on the
	// smallest count.
	table := func(value func(result) float64, abs func(result) int64, goColumn bool) {
		fmt.Fprint(out, "| target |")
		for _, n := range counts {
			fmt.Fprintf(out, " %s |", countLabel(n, capped))
		}
		for i := 1; i < len(counts); i++ {
			fmt.Fprintf(out, " %s→%s |", thousands(min(counts[i-1], capped)), thousands(min(counts[i], capped)))
		}
		if goColumn {
			fmt.Fprintf(out, " Go heap+stacks, %s | answers |", last)
		}
		fmt.Fprint(out, "\n|---|")
		for range 2*len(counts) - 1 {
			fmt.Fprint(out, "---:|")
		}
		if goColumn {
			fmt.Fprint(out, "---:|---|")
		}
		fmt.Fprintln(out)
		for _, t := range targets {
			rs := results[t.name]
			if len(rs) == 0 {
				continue
			}
			fmt.Fprintf(out, "| %s |", t.name)
			for _, r := range rs {
				fmt.Fprintf(out, " %s |", bytesLabel(value(r)))
			}
			for i := 1; i < len(rs); i++ {
				if rs[i].n == rs[i-1].n {
					fmt.Fprint(out, " – |")
					continue
				}
				fmt.Fprintf(out, " %s |", bytesLabel(float64(abs(rs[i])-abs(rs[i-1]))/float64(rs[i].n-rs[i-1].n)))
			}
			if goColumn {
				r := rs[len(rs)-1]
				if g := perConn(r.goBase, r.goSettled, r.n); r.goSettled < 0 || r.goBase < 0 {
					fmt.Fprint(out, " – |")
				} else {
					fmt.Fprintf(out, " %s |", bytesLabel(g))
				}
				fmt.Fprintf(out, " %s |", statusLabel(r.statuses))
			}
			fmt.Fprintln(out)
		}
	}
	fmt.Fprintln(out, "#### Settled: resident memory a connection, once the server has collected while they idle (against its settled baseline)")
	fmt.Fprintln(out)
	table(func(r result) float64 { return perConn(r.base, r.settled, r.n) }, func(r result) int64 { return r.settled }, true)
	fmt.Fprintln(out)
	fmt.Fprintln(out, "#### Right after: resident memory a connection, 3 s after the last was opened")
	fmt.Fprintln(out)
	table(func(r result) float64 { return perConn(r.before, r.after, r.n) }, func(r result) int64 { return r.after }, false)
	fmt.Fprintln(out)
	if capped < slices.Max(counts) {
		fmt.Fprintf(out, "The largest count was cut to %s connections: the hard descriptor limit here is %d and could not be raised"+
			" (no CAP_SYS_RESOURCE); as root with it, the harness raises it and measures %s.\n", thousands(capped), hard, thousands(slices.Max(counts)))
	}
	fmt.Fprintf(out, "The run took %v.\n", took.Round(time.Minute))
}

func countLabel(n, capped int) string {
	if n > capped {
		return fmt.Sprintf("%s (cut to %s)", thousands(n), thousands(capped))
	}
	return thousands(n)
}

func thousands(n int) string {
	if n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

func bytesLabel(b float64) string {
	if b >= 10*1024 {
		return fmt.Sprintf("%.1f KiB", b/1024)
	}
	if b >= 1024 {
		return fmt.Sprintf("%.2f KiB", b/1024)
	}
	return fmt.Sprintf("%.0f B", b)
}

func statusLabel(m map[int]int) string {
	var codes []int
	for c := range m {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d×%d", m[c], c))
	}
	return strings.Join(parts, ", ")
}
