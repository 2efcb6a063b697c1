package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/limitproxy/limitproxy/internal/poll"
)

var update = flag.Bool("update", false, "rewrite docs/dashboard.png: the dashboard of a real server with traffic, as Chromium renders it")

// The dashboard's tests drive Debian's Chromium (scripts/test.sh installs
// it), headless, over the DevTools protocol on a pipe. Each page runs on a
// virtual clock that stands still while a fetch is under way
// (Emulation.setVirtualTimePolicy, as --virtual-time-budget does): the
// page polls every 2 s of virtual time, so a budget of 3.5 s means exactly
// two polls, in a fraction of a second of real time. A script error or a
// Content-Security-Policy violation on the page fails the test.

// chromiumPath returns Chromium's path, or fails: a missing browser is a
// failure, never a skip.
func chromiumPath(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Fatal("chromium is not installed: the dashboard tests load the page in a real browser; install Debian's package " +
		"(apt-get install chromium; scripts/test.sh does it as root)")
	return ""
}

// browser is one headless Chromium, in a process group of its own, driven
// with --remote-debugging-pipe: it reads commands on its fd 3 and writes
// answers and events on its fd 4, each a JSON object ended by a NUL. Not
// safe for concurrent use.
type browser struct {
	t      testing.TB
	cmd    *exec.Cmd
	in     *os.File        // commands to Chromium
	msgs   chan cdpMessage // from Chromium, in order; closed when it has gone
	stderr *syncWriter
	nextID int
	errs   []string // the page's script errors and policy violations

	stopOnce sync.Once
}

type cdpMessage struct {
	ID        int             `json:"id"`
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params"`
	Result    json.RawMessage `json:"result"`
	Error     *struct{ Message string }
	SessionID string `json:"sessionId"`
}

// startBrowser starts Chromium for the rest of the test; it is stopped,
// its whole process group killed, when the test ends.
func startBrowser(t testing.TB) *browser {
	t.Helper()
	bin := chromiumPath(t)
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, in: cmdW, msgs: make(chan cdpMessage, 64), stderr: &syncWriter{w: &bytes.Buffer{}}}
	b.cmd = exec.Command(bin,
		"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
		"--disable-background-networking", "--disable-component-update", "--disable-default-apps",
		"--hide-scrollbars", "--user-data-dir="+t.TempDir(), "--remote-debugging-pipe", "about:blank")
	b.cmd.ExtraFiles = []*os.File{cmdR, outW} // fds 3 and 4
	b.cmd.Stderr = b.stderr
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	cmdR.Close()
	outW.Close()
	go func() {
		defer close(b.msgs)
		defer outR.Close()
		rd := bufio.NewReader(outR)
		for {
			line, err := rd.ReadBytes(0)
			if err != nil {
				return
			}
			var m cdpMessage
			if json.Unmarshal(line[:len(line)-1], &m) == nil {
				b.msgs <- m
			}
		}
	}()
	t.Cleanup(b.stop)
	return b
}

// stop kills the browser's process group (its helpers with it: the
// profile is thrown away, so there is nothing to close cleanly) and waits
// for it. Stopping twice is harmless.
func (b *browser) stop() {
	b.stopOnce.Do(func() {
		// One signal is enough: a killed helper is dead, though init
		// may take a second to reap it.
		syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		b.cmd.Wait()
		b.in.Close()
		for range b.msgs {
		}
	})
}

// call sends a command (to the page of session, or "" for the browser)
// and stores its result in result, if not nil.
func (b *browser) call(session, method string, params, result any) {
	b.t.Helper()
	b.nextID++
	id := b.nextID
	req := map[string]any{"id": id, "method": method}
	if params != nil {
		req["params"] = params
	}
	if session != "" {
		req["sessionId"] = session
	}
	data, err := json.Marshal(req)
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.in.Write(append(data, 0)); err != nil {
		b.t.Fatalf("chromium: %s: %v", method, err)
	}
	m := b.await(func(m cdpMessage) bool { return m.ID == id })
	if m.Error != nil {
		b.t.Fatalf("chromium: %s: %s", method, m.Error.Message)
	}
	if result != nil {
		if err := json.Unmarshal(m.Result, result); err != nil {
			b.t.Fatalf("chromium: %s: %v", method, err)
		}
	}
}

// await returns the first message that pred accepts, noting the page's
// errors on the way; it fails after 30 s.
func (b *browser) await(pred func(cdpMessage) bool) cdpMessage {
	b.t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case m, ok := <-b.msgs:
			if !ok {
				b.t.Fatalf("chromium has gone:\n%s", b.stderr.w.String())
			}
			b.note(m)
			if pred(m) {
				return m
			}
		case <-timeout.C:
			b.t.Fatal("chromium: no answer within 30 s")
		}
	}
}

// note records the page's uncaught exceptions, console errors, and what
// the browser logs about it (a Content-Security-Policy violation, for
// one); not failed fetches, which the page shows itself.
func (b *browser) note(m cdpMessage) {
	switch m.Method {
	case "Runtime.exceptionThrown":
		var e struct {
			ExceptionDetails struct {
				Text      string
				Exception struct{ Description string }
			}
		}
		json.Unmarshal(m.Params, &e)
		b.errs = append(b.errs, e.ExceptionDetails.Text+" "+e.ExceptionDetails.Exception.Description)
	case "Runtime.consoleAPICalled":
		var e struct {
			Type string
			Args []struct{ Value any }
		}
		json.Unmarshal(m.Params, &e)
		if e.Type == "error" || e.Type == "warning" {
			b.errs = append(b.errs, fmt.Sprintf("console.%s %v", e.Type, e.Args))
		}
	case "Log.entryAdded":
		var e struct {
			Entry struct{ Source, Level, Text, URL string }
		}
		json.Unmarshal(m.Params, &e)
		if e.Entry.Level == "error" && e.Entry.Source != "network" {
			b.errs = append(b.errs, e.Entry.Source+": "+e.Entry.Text)
		}
	}
}

// open opens url in a new page of width x height pixels and lets it run
// for budget of virtual time; it returns the page's session and target.
func (b *browser) open(url string, budget time.Duration, width, height int) (session, target string) {
	b.t.Helper()
	var created struct {
		TargetID string `json:"targetId"`
	}
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &created)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": created.TargetID, "flatten": true}, &attached)
	s := attached.SessionID
	b.errs = nil
	for _, domain := range []string{"Page", "Runtime", "Log"} {
		b.call(s, domain+".enable", nil, nil)
	}
	b.call(s, "Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
	// The clock stands still until the navigation is under way; then it
	// runs, pausing while fetches are pending, for budget.
	b.call(s, "Emulation.setVirtualTimePolicy", map[string]any{"policy": "pause"}, nil)
	var nav struct{ ErrorText string }
	b.call(s, "Page.navigate", map[string]any{"url": url}, &nav)
	if nav.ErrorText != "" {
		b.t.Fatalf("chromium: %s: %s", url, nav.ErrorText)
	}
	b.call(s, "Emulation.setVirtualTimePolicy", map[string]any{"policy": "pauseIfNetworkFetchesPending", "budget": budget.Milliseconds()}, nil)
	b.await(func(m cdpMessage) bool { return m.SessionID == s && m.Method == "Emulation.virtualTimeBudgetExpired" })
	if len(b.errs) > 0 {
		b.t.Errorf("the page at %s: %s", url, strings.Join(b.errs, "\n"))
	}
	return s, created.TargetID
}

// evaluate returns the value of a JavaScript expression on the page.
func (b *browser) evaluate(session, expr string, v any) {
	b.t.Helper()
	var r struct {
		Result           struct{ Value json.RawMessage }
		ExceptionDetails *struct{ Text string }
	}
	b.call(session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r)
	if r.ExceptionDetails != nil {
		b.t.Fatalf("chromium: %s: %s", expr, r.ExceptionDetails.Text)
	}
	if err := json.Unmarshal(r.Result.Value, v); err != nil {
		b.t.Fatalf("chromium: %s: %v", expr, err)
	}
}

// page is the dashboard as Chromium rendered it.
type page struct {
	dom    string
	href   string            // its address when loaded
	text   map[string]string // data-testid → its text
	hidden map[string]bool   // id → whether the element is hidden
}

// load opens url for budget of virtual time and returns the page as
// rendered then.
func (b *browser) load(url string, budget time.Duration) page {
	b.t.Helper()
	s, target := b.open(url, budget, 1280, 1000)
	var dom, href string
	b.evaluate(s, "document.documentElement.outerHTML", &dom)
	b.evaluate(s, "location.href", &href)
	b.call("", "Target.closeTarget", map[string]any{"targetId": target}, nil)
	doc, err := html.Parse(strings.NewReader(dom))
	if err != nil {
		b.t.Fatalf("the page's DOM: %v", err)
	}
	p := page{dom: dom, href: href, text: map[string]string{}, hidden: map[string]bool{}}
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			var id string
			hidden := false
			for _, a := range n.Attr {
				switch a.Key {
				case "data-testid":
					p.text[a.Val] = textOf(n)
				case "id":
					id = a.Val
				case "hidden":
					hidden = true
				}
			}
			if id != "" {
				p.hidden[id] = hidden
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return p
}

// screenshot opens url for budget of virtual time and writes the whole
// page, width pixels wide, to path as PNG.
func (b *browser) screenshot(url string, budget time.Duration, width int, path string) {
	b.t.Helper()
	s, target := b.open(url, budget, width, 800)
	var height int
	b.evaluate(s, "document.documentElement.scrollHeight", &height)
	b.call(s, "Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
	var shot struct{ Data []byte } // base64 in JSON
	b.call(s, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot)
	b.call("", "Target.closeTarget", map[string]any{"targetId": target}, nil)
	if err := os.WriteFile(path, shot.Data, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.TrimSpace(b.String())
}

// want checks that each data-testid shows exactly its text.
func (p page) want(t testing.TB, want map[string]string) {
	t.Helper()
	for id, text := range want {
		got, ok := p.text[id]
		switch {
		case !ok:
			t.Errorf("no element with data-testid %q", id)
		case got != text:
			t.Errorf("%s = %q, want %q", id, got, text)
		}
	}
}

// number returns the number a data-testid shows, or fails.
func (p page) number(t testing.TB, id string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(p.text[id], 64)
	if err != nil {
		t.Errorf("%s = %q, want a number", id, p.text[id])
	}
	return v
}

// wantRate checks a rate shown for n requests counted between two polls
// 2 s apart (of virtual time: a little more, for the fetches'): n/2,
// give or take the rounding to one decimal and a slower poll.
func (p page) wantRate(t testing.TB, id string, n int) {
	t.Helper()
	got, want := p.number(t, id), float64(n)/2
	if got < float64(n)/2.5-0.05 || got > want+0.05 {
		t.Errorf("%s = %s, want %.1f (%d requests in one 2 s poll)", id, p.text[id], want, n)
	}
}

// front is a reverse proxy in front of the admin listener, through which
// Chromium loads the dashboard: it records what the page asks for and
// can send traffic at a chosen poll (the n-th request for /metrics).
type front struct {
	*httptest.Server
	mu        sync.Mutex
	seen      []*http.Request
	metrics   int
	onMetrics func(n int)
}

func newFront(t testing.TB, admin string) *front {
	target, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	f := &front{}
	rp := httputil.NewSingleHostReverseProxy(target)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		f.mu.Lock()
		f.seen = append(f.seen, req.Clone(context.Background()))
		hook := f.onMetrics
		if req.URL.Path == "/metrics" {
			f.metrics++
		}
		n := f.metrics
		f.mu.Unlock()
		if req.URL.Path == "/metrics" && hook != nil {
			hook(n)
		}
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(f.Close)
	return f
}

// run resets the record and the poll count and sets the hook for the
// next page load.
func (f *front) run(hook func(n int)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen, f.metrics, f.onMetrics = nil, 0, hook
}

// checkRequests checks what the page asked for since run: only this
// listener's paths; the token, when given, on /api/ requests only and
// never in a URL.
func (f *front) checkRequests(t testing.TB, token string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	paths := map[string]bool{}
	for _, req := range f.seen {
		paths[req.URL.Path] = true
		auth := req.Header.Get("Authorization")
		if strings.Contains(req.URL.String(), "s3cret") || strings.Contains(req.Header.Get("Referer"), "s3cret") {
			t.Errorf("the token in a request's URL: %s %s (Referer %q)", req.Method, req.URL, req.Header.Get("Referer"))
		}
		switch wantAuth := strings.HasPrefix(req.URL.Path, "/api/") && token != ""; {
		case wantAuth && auth != "Bearer "+token:
			t.Errorf("%s: Authorization %q, want the token", req.URL, auth)
		case !wantAuth && auth != "":
			t.Errorf("%s: Authorization %q, want none", req.URL, auth)
		}
	}
	for _, p := range []string{"/dashboard", "/dashboard/dashboard.js", "/dashboard/dashboard.css", "/metrics", "/api/v1/config", "/api/v1/top"} {
		if !paths[p] {
			t.Errorf("the page never asked for %s (it asked for %v)", p, paths)
		}
		delete(paths, p)
	}
	delete(paths, "/dashboard/favicon.svg") // not again once the browser has it
	if len(paths) > 0 {
		t.Errorf("the page asked for %v too", paths)
	}
}

// dashboardConfig is TestDashboard's configuration: three policies (an
// enforced fixed window, a shadow one, a leaky bucket) in front of two
// upstreams, one with a concurrency limit, one that fails; /api/
// behind the token in LIMITPROXY_TEST_TOKEN.
func dashboardConfig(app, flaky string) string {
	return fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
token_env = "LIMITPROXY_TEST_TOKEN"
[log]
level = "error"
access = false
[[upstream]]
name = "app"
targets = [%q]
  [upstream.concurrency]
  limit = 8
[[upstream]]
name = "flaky"
targets = [%q]
[[policy]]
name = "login"
upstream = "app"
match = { path = "/login" }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 4
  window = "1h"
[[policy]]
name = "search"
upstream = "flaky"
mode = "shadow"
match = { path_prefix = "/search" }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 2
  window = "1h"
[[policy]]
name = "reports"
upstream = "app"
match = { path_prefix = "/reports" }
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "5/s"
  queue = 5
`, app, flaky)
}

// startDashboard starts a real server on dashboardConfig (changed by
// edit, if not nil) and the front proxy to its admin listener. The flaky
// upstream answers 500, but 200 to a path ending in /ok.
func startDashboard(t testing.TB, edit func(string) string) (*running, *front) {
	t.Helper()
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasSuffix(req.URL.Path, "/ok") {
			io.WriteString(w, "ok")
			return
		}
		http.Error(w, "broken", http.StatusInternalServerError)
	}))
	t.Cleanup(flaky.Close)
	r := startFile(t, func(path, up string) {
		cfg := dashboardConfig(up, flaky.URL)
		if edit != nil {
			cfg = edit(cfg)
		}
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	return r, newFront(t, r.admin)
}

// send makes n requests for path through the proxy, one after the other,
// and reports a status other than want (0: any) with t.Errorf (it runs on
// the front proxy's goroutine too).
func (r *running) send(t testing.TB, path string, n, want int) {
	for range n {
		resp, err := http.Get(r.proxy + path)
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if want != 0 && resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

func adminJSON(t testing.TB, method, url string, v any) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
	}
	return resp.StatusCode
}

// TestDashboard loads the dashboard of a real server in Chromium and
// checks its figures against the traffic sent: totals exactly, rates
// (traffic sent between the page's two polls) within rounding, queue and
// upstream latencies within their histogram buckets, the reload status,
// and the top offenders as GET /api/v1/top lists them.
// Then a refused reload, shown with its error, and the page without the
// token: the metrics still, the API's panels asking for the token.
func TestDashboard(t *testing.T) {
	t.Parallel()
	r, f := startDashboard(t, nil)

	// Before the page loads: seen by its first poll.
	r.send(t, "/login", 3, 200)
	r.send(t, "/search", 1, 500)
	r.send(t, "/nope", 1, 404)
	if s := adminJSON(t, "POST", r.admin+"/api/v1/reload", nil); s != 200 {
		t.Fatalf("reload: %d", s)
	}
	// Between its two polls: the rates.
	f.run(func(n int) {
		if n != 2 {
			return
		}
		r.send(t, "/login", 1, 200)
		r.send(t, "/login", 4, 429)
		r.send(t, "/search", 3, 500) // 1 allowed, 2 shadow_rejected
		// At once: 1 allowed, 2 queued (200 and 400 ms, at 5/s).
		var reports sync.WaitGroup
		for range 3 {
			reports.Go(func() { r.send(t, "/reports", 1, 200) })
		}
		reports.Wait()
		r.send(t, "/nope", 2, 404)
	})
	b := startBrowser(t)
	begin := time.Now()
	p := b.load(f.URL+"/dashboard#token=s3cret", 3500*time.Millisecond)
	t.Logf("two polls in Chromium took %v", time.Since(begin).Round(time.Millisecond))
	f.checkRequests(t, "s3cret")
	if strings.Contains(p.href, "s3cret") {
		t.Errorf("the token is still in the address bar: %s", p.href)
	}

	body, err := os.ReadFile(r.path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	p.want(t, map[string]string{
		"polls":  "2",
		"status": p.text["status"], // checked below

		"total-login-allowed": "4", "total-login-rejected": "4", "total-login-queued": "0",
		"total-login-shadow_rejected": "0", "total-login-shed": "0", "total-login-banned": "0",
		"total-search-allowed": "2", "total-search-shadow_rejected": "2", "total-search-rejected": "0",
		"total-reports-allowed": "1", "total-reports-queued": "2", "total-reports-rejected": "0",
		"total-unmatched": "3", "total-invalid": "0",
		"rate-login-queued": "0.0", "rate-login-shed": "0.0", "rate-login-banned": "0.0",
		"queue-depth-reports": "0", "queue-depth-login": "–",
		"queue-wait-p50-login": "–", "queue-wait-p99-login": "–",

		"upstream-total-app": "7", "upstream-errors-total-app": "0", "upstream-errors-rate-app": "0.0",
		"upstream-total-flaky": "4", "upstream-errors-total-flaky": "4",
		"concurrency-limit-app": "8", "concurrency-in-flight-app": "0", "concurrency-queue-app": "0",
		"concurrency-shed-total-app": "0", "concurrency-shed-rate-app": "0.0",

		"reload-result": "ok", "reload-successes": "1", "reload-failures": "0", "reload-trigger": "api",
		"reload-hash": hex.EncodeToString(sum[:8]), "reload-file": r.path, "reload-restart": "nothing",
	})
	// Top offenders as GET /api/v1/top shows them now (nothing was sent
	// since the page's last poll): login's one client, rejected 4 times.
	top := wantTop(t, p, r.admin)
	if l, ok := top["login"]; !ok || l.TotalRejected != 4 || len(l.Rejected) != 1 || l.Rejected[0].Count != 4 {
		t.Errorf("GET /api/v1/top: login %+v, want its one client rejected 4 times", l)
	}
	if !strings.HasPrefix(p.text["status"], "live") {
		t.Errorf("status %q, want live", p.text["status"])
	}
	for id, n := range map[string]int{
		"rate-login-allowed": 1, "rate-login-rejected": 4,
		"rate-search-allowed": 1, "rate-search-shadow_rejected": 2,
		"rate-reports-allowed": 1, "rate-reports-queued": 2,
		"rate-unmatched":      2,
		"upstream-rate-app":   4, // login 1, reports 3
		"upstream-rate-flaky": 3, "upstream-errors-rate-flaky": 3,
	} {
		p.wantRate(t, id, n)
	}
	// The two queued requests waited about 200 and 400 ms: p50 and p99
	// within their buckets (0.1–0.25 s, 0.25–0.5 s), or the next ones up
	// for a late timer.
	for _, id := range []string{"queue-wait-p50-reports", "queue-wait-p99-reports"} {
		if v := p.number(t, id); v <= 100 || v > 1000 {
			t.Errorf("%s = %v ms, want 100 to 1000", id, v)
		}
	}
	if p50, p99 := p.number(t, "queue-wait-p50-reports"), p.number(t, "queue-wait-p99-reports"); p50 > p99 {
		t.Errorf("queue wait p50 %v > p99 %v", p50, p99)
	}
	// The upstreams answer at once: within the first buckets.
	for _, id := range []string{"upstream-p50-app", "upstream-p99-app", "upstream-p99-flaky"} {
		if v := p.number(t, id); v <= 0 || v > 250 {
			t.Errorf("%s = %v ms, want a few", id, v)
		}
	}
	if _, ok := p.text["concurrency-limit-flaky"]; ok {
		t.Errorf("concurrency figures for an upstream without a concurrency limit")
	}
	if !p.hidden["token-form"] || !p.hidden["reload-note"] || !p.hidden["reload-error"] {
		t.Errorf("token form, reload note or reload error shown: %v", p.hidden)
	}
	if t.Failed() {
		t.Logf("the page:\n%s", p.dom)
		return
	}

	// A refused reload: shown with its error, the figures unchanged.
	writeAtomic(t, r.path, strings.Replace(string(body), "limit = 4", "limit = 0", 1))
	var cfg struct {
		LastReload struct {
			Successful bool
			Error      string
			Failures   int
		} `json:"last_reload"`
	}
	poll.For(t, 10*time.Second, func() bool {
		adminJSON(t, "GET", r.admin+"/api/v1/config", &cfg)
		return !cfg.LastReload.Successful
	}, "the broken file was not refused")
	f.run(nil)
	p = b.load(f.URL+"/dashboard#token=s3cret", 500*time.Millisecond)
	p.want(t, map[string]string{
		"polls": "1", "reload-result": "failed", "reload-trigger": "file",
		"reload-failures": strconv.Itoa(cfg.LastReload.Failures), "reload-error": cfg.LastReload.Error,
		"total-login-allowed": "4", "rate-login-allowed": "–",
	})
	if !strings.Contains(p.text["reload-error"], "must be at least 1") || p.hidden["reload-error"] {
		t.Errorf("reload error %q (hidden %v), want the file's error", p.text["reload-error"], p.hidden["reload-error"])
	}

	// Without the token: the metrics' figures; the API's panels ask for it.
	f.run(nil)
	p = b.load(f.URL+"/dashboard", 500*time.Millisecond)
	f.checkRequests(t, "")
	p.want(t, map[string]string{
		"polls": "1", "total-login-allowed": "4", "total-reports-queued": "2", "upstream-total-flaky": "4",
		"reload-result": "failed", "reload-failures": strconv.Itoa(cfg.LastReload.Failures),
		"reload-trigger": "–", "reload-hash": "–",
		"reload-note": "The details need the admin API token.",
		"top-status":  "top offenders: needs the admin API token",
	})
	if p.hidden["token-form"] {
		t.Error("no token form without the token")
	}
	if t.Failed() {
		t.Logf("the page:\n%s", p.dom)
	}
}

// topList is one policy's list of GET /api/v1/top.
type topList struct {
	Policy        string
	WindowSeconds float64 `json:"window_seconds"`
	TotalRejected int     `json:"total_rejected"`
	ErrorBound    int     `json:"error_bound"`
	Rejected      []struct {
		Key          string
		Count, Error int
	}
	Closest []struct {
		Key  string
		Used float64
	}
}

// wantTop checks that the page shows the top offenders GET
// admin/api/v1/top?n=10 answers, and returns them by policy.
func wantTop(t testing.TB, p page, admin string) map[string]topList {
	t.Helper()
	req, _ := http.NewRequest("GET", admin+"/api/v1/top?n=10", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /api/v1/top: %d", resp.StatusCode)
	}
	var top struct{ Policies []topList }
	if err := json.NewDecoder(resp.Body).Decode(&top); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"top-status": ""}
	byPolicy := map[string]topList{}
	for _, l := range top.Policies {
		byPolicy[l.Policy] = l
		want["top-window-"+l.Policy] = strconv.Itoa(int(l.WindowSeconds))
		want["top-total-rejected-"+l.Policy] = strconv.Itoa(l.TotalRejected)
		want["top-error-bound-"+l.Policy] = strconv.Itoa(l.ErrorBound)
		for i, e := range l.Rejected {
			want[fmt.Sprintf("top-rejected-key-%s-%d", l.Policy, i)] = e.Key
			want[fmt.Sprintf("top-rejected-count-%s-%d", l.Policy, i)] = strconv.Itoa(e.Count)
			want[fmt.Sprintf("top-rejected-error-%s-%d", l.Policy, i)] = strconv.Itoa(e.Error)
		}
		for i, e := range l.Closest {
			want[fmt.Sprintf("top-closest-key-%s-%d", l.Policy, i)] = e.Key
			want[fmt.Sprintf("top-closest-used-%s-%d", l.Policy, i)] = strconv.FormatFloat(e.Used*100, 'f', 1, 64)
		}
	}
	p.want(t, want)
	for id := range p.text {
		if strings.HasPrefix(id, "top-") {
			if _, ok := want[id]; !ok {
				t.Errorf("the page shows %s = %q, which GET /api/v1/top does not", id, p.text[id])
			}
		}
	}
	return byPolicy
}

// TestDashboardComputes serves the page with canned metrics, configuration
// and top offenders (in GET /api/v1/top's shape), and checks what the page
// computes and renders from them exactly: a label value with escapes,
// histogram quantiles over the increase between two polls, and both top
// lists of each policy.
func TestDashboardComputes(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	registerDashboard(mux)
	var mu sync.Mutex
	scrapes := 0
	var topQuery string
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		scrapes++
		n := scrapes
		mu.Unlock()
		// Between the two polls: 100 answers, 50 within 5–10 ms and 50
		// within 10–25 ms: p50 is 10 ms, p99 10 + 15×49/50 = 24.7 ms.
		b10, b25 := 0, 0
		if n >= 2 {
			b10, b25 = 50, 100
		}
		fmt.Fprintf(w, `# HELP limitproxy_requests_total Requests.
# TYPE limitproxy_requests_total counter
limitproxy_requests_total{decision="allowed",policy="we\"ird, {name}\\"} %d
limitproxy_requests_total{decision="unmatched",policy=""} 0
# TYPE limitproxy_upstream_duration_seconds histogram
limitproxy_upstream_duration_seconds_bucket{code="200",upstream="app",le="0.005"} 0
limitproxy_upstream_duration_seconds_bucket{code="200",upstream="app",le="0.01"} %d
limitproxy_upstream_duration_seconds_bucket{code="200",upstream="app",le="0.025"} %d
limitproxy_upstream_duration_seconds_bucket{code="200",upstream="app",le="+Inf"} %d
limitproxy_upstream_duration_seconds_sum{code="200",upstream="app"} NaN
limitproxy_upstream_duration_seconds_count{code="200",upstream="app"} %d
limitproxy_config_last_reload_successful 1
limitproxy_config_reloads_total{result="success"} 3
limitproxy_config_reloads_total{result="failure"} 2
`, 7+b25, b10, b25, b25, b25)
	})
	mux.HandleFunc("GET /api/v1/config", func(w http.ResponseWriter, req *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"file": "/etc/limitproxy/config.toml", "hash": "25a6b30b7f6c3260698b78413020f019b1c45093a834570ee2d5bcdc8faf2193",
			"loaded_at": "2026-11-22T18:49:10Z", "policies": []map[string]any{{"name": "login"}},
			"upstreams": []map[string]any{{"name": "app"}},
			"last_reload": map[string]any{"at": "2026-11-22T18:49:10Z", "trigger": "sighup", "successful": true, "error": "",
				"successes": 3, "failures": 2, "requires_restart": []string{"server.listen", "log.format"}},
		})
	})
	topMissing := false
	mux.HandleFunc("GET /api/v1/top", func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		missing := topMissing
		mu.Unlock()
		if missing {
			http.NotFound(w, req)
			return
		}
		if req.Header.Get("Authorization") != "Bearer t0ken" {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "a valid bearer token is required"})
			return
		}
		mu.Lock()
		topQuery = req.URL.RawQuery
		mu.Unlock()
		io.WriteString(w, `{"policies":[
  {"policy":"login","window_seconds":60,"total_rejected":123,"error_bound":1,"keys":"hashed",
   "rejected":[{"key":"a1b2c3d4e5f60718","count":40,"error":0},{"key":"0f1e2d3c4b5a6978","count":12,"error":1}],
   "closest":[{"key":"a1b2c3d4e5f60718","used":0.93}]},
  {"policy":"api","window_seconds":3600,"total_rejected":0,"error_bound":0,"keys":"raw","rejected":[],"closest":[]}]}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	b := startBrowser(t)
	p := b.load(srv.URL+"/dashboard#token=t0ken", 3500*time.Millisecond)
	p.want(t, map[string]string{
		"polls":                                 "2",
		`total-we"ird, {name}\-allowed`:         "107",
		"total-login-allowed":                   "0",
		"rate-login-allowed":                    "0.0",
		"upstream-total-app":                    "100",
		"upstream-p50-app":                      "10.0",
		"upstream-p99-app":                      "24.7",
		"reload-result":                         "ok",
		"reload-successes":                      "3",
		"reload-failures":                       "2",
		"reload-trigger":                        "sighup",
		"reload-hash":                           "25a6b30b7f6c3260",
		"reload-restart":                        "server.listen, log.format",
		"top-status":                            "",
		"top-window-login":                      "60",
		"top-total-rejected-login":              "123",
		"top-error-bound-login":                 "1",
		"top-rejected-key-login-0":              "a1b2c3d4e5f60718",
		"top-rejected-count-login-0":            "40",
		"top-rejected-error-login-0":            "0",
		"top-rejected-key-login-1":              "0f1e2d3c4b5a6978",
		"top-rejected-count-login-1":            "12",
		"top-rejected-error-login-1":            "1",
		"top-closest-key-login-0":               "a1b2c3d4e5f60718",
		"top-closest-used-login-0":              "93.0",
		"top-total-rejected-api":                "0",
		"top-window-api":                        "3600",
		`rate-we"ird, {name}\-shed`:             "0.0",
		`queue-depth-we"ird, {name}\`:           "–",
		`queue-wait-p99-we"ird, {name}\`:        "–",
		"upstream-errors-total-app":             "0",
		`total-we"ird, {name}\-shadow_rejected`: "0",
	})
	p.wantRate(t, `rate-we"ird, {name}\-allowed`, 100)
	p.wantRate(t, "upstream-rate-app", 100)
	if _, ok := p.text["top-rejected-key-login-2"]; ok {
		t.Error("a third rejected key shown")
	}
	mu.Lock()
	if topQuery != "n=10" {
		t.Errorf("GET /api/v1/top?%s, want ?n=10", topQuery)
	}
	topMissing = true // as a limitproxy without the endpoint answers
	mu.Unlock()
	if t.Failed() {
		t.Logf("the page:\n%s", p.dom)
		return
	}

	p = b.load(srv.URL+"/dashboard#token=t0ken", 500*time.Millisecond)
	p.want(t, map[string]string{"polls": "1", "top-status": "top offenders: not available", "reload-result": "ok"})
	if _, ok := p.text["top-window-login"]; ok {
		t.Error("a top list without GET /api/v1/top")
	}
}

// TestDashboardPage checks the page's headers and that it loads nothing
// from elsewhere, without a browser.
func TestDashboardPage(t *testing.T) {
	t.Parallel()
	r := startFile(t, func(path, up string) { os.WriteFile(path, []byte(configText(up, 2, "1/h", "")), 0o644) })
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct{ method, path, contentType string }{
		{"GET", "/dashboard", "text/html; charset=utf-8"},
		{"HEAD", "/dashboard", "text/html; charset=utf-8"},
		{"GET", "/dashboard/dashboard.js", "text/javascript; charset=utf-8"},
		{"GET", "/dashboard/dashboard.css", "text/css; charset=utf-8"},
		{"GET", "/dashboard/favicon.svg", "image/svg+xml"},
	} {
		req, _ := http.NewRequest(c.method, r.admin+c.path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != 200 || h.Get("Content-Type") != c.contentType {
			t.Errorf("%s %s: %d %q", c.method, c.path, resp.StatusCode, h.Get("Content-Type"))
		}
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self';") ||
			strings.Contains(csp, "unsafe") || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s: headers %v", c.path, h)
		}
		if c.method == "GET" {
			// Nothing from elsewhere: the only absolute URL is SVG's
			// namespace, which is a name, not a request.
			text := strings.ReplaceAll(string(body), "http://www.w3.org/2000/svg", "")
			for _, bad := range []string{"http://", "https://", "src=\"/", "href=\"/", "@import", "url("} {
				if strings.Contains(text, bad) {
					t.Errorf("%s contains %q", c.path, bad)
				}
			}
			if etag := h.Get("ETag"); etag != "" {
				req, _ := http.NewRequest("GET", r.admin+c.path, nil)
				req.Header.Set("If-None-Match", etag)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotModified {
					t.Errorf("%s with If-None-Match: %d, want 304", c.path, resp.StatusCode)
				}
			} else {
				t.Errorf("%s: no ETag", c.path)
			}
		}
	}
	resp, err := client.Get(r.admin + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/dashboard" {
		t.Errorf("GET /: %d to %q, want 302 to /dashboard", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, path := range []string{"/dashboard/", "/dashboard/nope.js", "/nope"} {
		resp, err := client.Get(r.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
}

// TestDashboardScreenshot makes docs/dashboard.png with -update: the
// dashboard of a real server that gets a little traffic at each poll, 30 s
// (of virtual time) after it was opened.
func TestDashboardScreenshot(t *testing.T) {
	if !*update {
		t.Skip("makes docs/dashboard.png with -update")
	}
	// The page's clock is virtual and a poll lasts 250 ms of real time
	// here, so the windows are short to match; login is keyed by user, so
	// that the top lists have several keys.
	r, f := startDashboard(t, func(cfg string) string {
		cfg = strings.Replace(cfg, `match = { path = "/login" }`, `match = { path = "/login" }`+"\nkey = [\"header:X-User\"]", 1)
		cfg = strings.Replace(cfg, `rate = "5/s"`, `rate = "12/s"`, 1)
		return strings.ReplaceAll(cfg, `window = "1h"`, `window = "1s"`)
	})
	get := func(path, user string) {
		req, _ := http.NewRequest("GET", r.proxy+path, nil)
		req.Header.Set("X-User", user)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	var queued sync.WaitGroup
	defer queued.Wait()
	f.run(func(n int) {
		wave := []int{4, 3, 2, 1, 2, 3}[n%6] // at its top at the last poll (the 60th)
		for u := 1; u <= 6; u++ {
			for range wave * (7 - u) / 3 {
				get("/login", fmt.Sprintf("user-%d", u))
			}
		}
		for i := range 1 + wave {
			if i%4 == 3 {
				get("/search", "")
			} else {
				get("/search/ok", "")
			}
		}
		if n%3 == 0 {
			get("/nope", "")
		}
		// Queued requests, some still waiting when /metrics answers.
		for range wave {
			queued.Go(func() { get("/reports", "") })
		}
		time.Sleep(250 * time.Millisecond) // a real browser polls on the real clock: this paces the picture's traffic
	})
	out, err := filepath.Abs("../../../../docs/dashboard.png")
	if err != nil {
		t.Fatal(err)
	}
	// 60 polls: the sparklines' two minutes.
	startBrowser(t).screenshot(f.URL+"/dashboard#token=s3cret", 120500*time.Millisecond, 1280, out)
	t.Logf("wrote %s", out)
}
