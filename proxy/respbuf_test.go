package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// pattern is byte i of the test answers: corruption or a lost run shows.
func pattern(i int64) byte { return byte(i % 251) }

// bigUpstream answers /big?n=N with N bytes of pattern (Content-Length
// set; chunked with &chunked, plus an X-Cost trailer of X-Want with
// &trailer), /small with "ok". It counts its connections in use (held)
// and the answers it has finished sending (done).
type bigUpstream struct {
	url  string
	srv  *httptest.Server
	done atomic.Int64

	mu    sync.Mutex
	state map[net.Conn]http.ConnState
}

func newBigUpstream(t *testing.T) *bigUpstream {
	u := &bigUpstream{state: map[net.Conn]http.ConnState{}}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/small" {
			io.WriteString(w, "ok")
			return
		}
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		q := r.URL.Query()
		if q.Has("trailer") {
			w.Header().Set("Trailer", "X-Cost")
		}
		if !q.Has("chunked") {
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		}
		buf := make([]byte, 64<<10)
		for off := int64(0); off < n; {
			k := min(int64(len(buf)), n-off)
			for i := range k {
				buf[i] = pattern(off + i)
			}
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
			off += k
		}
		if q.Has("trailer") {
			w.Header().Set("X-Cost", r.Header.Get("X-Want"))
		}
		u.done.Add(1)
	}))
	u.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		u.mu.Lock()
		u.state[c] = s
		if s == http.StateClosed || s == http.StateHijacked {
			delete(u.state, c)
		}
		u.mu.Unlock()
	}
	u.srv.Start()
	t.Cleanup(u.srv.Close)
	u.url = u.srv.URL
	return u
}

// held is how many of the upstream's connections are in use (not idle).
func (u *bigUpstream) held() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, s := range u.state {
		if s == http.StateActive {
			n++
		}
	}
	return n
}

// slowClient sends GET path on a raw connection whose receive buffer is
// a few KiB, and returns it unread: the caller reads (slowly) or not.
func slowClient(t *testing.T, addr, path string, header ...string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := "GET " + path + " HTTP/1.1\r\nHost: test\r\n"
	for i := 0; i+1 < len(header); i += 2 {
		req += header[i] + ": " + header[i+1] + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// trickle reads c at 1 KiB/s until it is closed.
func trickle(c net.Conn) {
	go func() {
		buf := make([]byte, 1024)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
			time.Sleep(time.Second) // a client slow in real time on a real socket: the pace is the scenario
		}
	}()
}

// tempFDs lists this process's open descriptors on files in dir (the
// spool files, unlinked, show as "dir/name (deleted)").
func tempFDs(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join("/proc/self/fd", e.Name())
		if l, err := os.Readlink(p); err == nil && strings.HasPrefix(l, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

const bufConfig = `
[server]
temp_dir = %q
response_buffer_budget = %d
[[upstream]]
name = "app"
targets = [%%q]
%s
  [upstream.concurrency]
  limit = 4
  queue = 8
  max_wait = "300ms"
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "100000/s"
`

func bufEnv(t *testing.T, u *bigUpstream, budget int64, upstreamKeys string) (*rlEnv, string) {
	dir := t.TempDir()
	e := newRLEnv(t, fmt.Sprintf(bufConfig, dir, budget, upstreamKeys), u.url, newRLBackend(t, "memory", time.Now), time.Now)
	return e, dir
}

func inFlight(e *rlEnv) int { return e.h.snap.Load().pools["app"].conc.Stats().InFlight }

// TestSlowReadersFreeSlots: with limit = 4, four clients reading an 8 MiB
// answer at 1 KiB/s no longer hold the upstream: once it has sent its
// answers, no upstream connection is in use and no slot is held (the
// answers wait in temp_dir, memory within response_buffer_budget), and
// other clients are served 200, not 503.
func TestSlowReadersFreeSlots(t *testing.T) {
	u := newBigUpstream(t)
	const budget = 128 << 10
	e, dir := bufEnv(t, u, budget, "")
	for range 4 {
		trickle(slowClient(t, e.addr, "/big?n=8388608"))
	}
	waitFor(t, "the upstream to send its four answers", func() bool { return u.done.Load() == 4 })
	waitFor(t, "the slots and upstream connections to be freed", func() bool { return inFlight(e) == 0 && u.held() == 0 })
	if used := e.h.resp.used.Load(); used > budget {
		t.Errorf("%d bytes of memory held, over the budget of %d", used, budget)
	}
	if n := e.h.resp.files.Load(); n != 4 {
		t.Errorf("%d spool files, want 4 (each answer past the memory budget)", n)
	}
	if fds := tempFDs(t, dir); len(fds) != 4 {
		t.Errorf("%d open files in temp_dir, want 4", len(fds))
	}
	for i := range 8 {
		if a := <-getAsync(e.addr, "/small"); a.code != 200 || a.body != "ok" {
			t.Fatalf("client %d while four read slowly: %d %q, want 200", i, a.code, a.body)
		}
	}
}

// TestBufferedClientGone: a client that vanishes in the middle of a
// buffered answer leaves nothing behind: no spool file, no memory, no
// slot, no upstream connection in use.
func TestBufferedClientGone(t *testing.T) {
	u := newBigUpstream(t)
	e, dir := bufEnv(t, u, 1<<20, "")
	c := slowClient(t, e.addr, "/big?n=8388608")
	waitFor(t, "the answer to be buffered", func() bool { return u.done.Load() == 1 && e.h.resp.files.Load() == 1 })
	if len(tempFDs(t, dir)) != 1 {
		t.Fatalf("no spool file open in temp_dir")
	}
	c.Close()
	waitFor(t, "everything to be freed", func() bool {
		return e.h.resp.files.Load() == 0 && e.h.resp.used.Load() == 0 && len(tempFDs(t, dir)) == 0 && inFlight(e) == 0 && u.held() == 0
	})
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("temp_dir holds %d files", len(ents))
	}
}

// readAnswer reads an HTTP/1.1 answer from c and checks its body is n
// bytes of pattern; it returns the answer, body read.
func readAnswer(t *testing.T, c net.Conn, n int64) *http.Response {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var i int64
	for ; ; i++ {
		b, err := br.ReadByte()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", i, err)
		}
		if b != pattern(i) {
			t.Fatalf("byte %d is %d, want %d", i, b, pattern(i))
		}
	}
	if i != n {
		t.Fatalf("%d bytes, want %d", i, n)
	}
	return resp
}

// TestBufferedPastFileBound: an answer larger than both bounds (64 KiB in
// memory, 1 MiB on disk) fills them, and the rest passes from the
// upstream as the client takes it, as documented: the upstream connection
// and the slot are then held until the client has it all; the client gets
// every byte in order.
func TestBufferedPastFileBound(t *testing.T) {
	u := newBigUpstream(t)
	e, dir := bufEnv(t, u, 1<<20, "response_buffer_memory = 65536\nresponse_buffer_file = 1048576")
	const n = 32 << 20 // more than loopback's socket buffers hold
	c := slowClient(t, e.addr, "/big?n="+strconv.Itoa(n))
	waitFor(t, "the file to reach its bound", func() bool {
		fds := tempFDs(t, dir)
		if len(fds) != 1 {
			return false
		}
		fi, err := os.Stat(fds[0])
		if err != nil {
			return false
		}
		return fi.Size() == 1<<20
	})
	time.Sleep(100 * time.Millisecond) // would the file grow further? (a negative: the spool gives no event for a write it refuses)
	if fds := tempFDs(t, dir); len(fds) == 1 {
		if fi, err := os.Stat(fds[0]); err == nil && fi.Size() != 1<<20 {
			t.Fatalf("the file grew to %d bytes, past its bound", fi.Size())
		}
	}
	if u.done.Load() != 0 || inFlight(e) != 1 || u.held() != 1 {
		t.Fatalf("past the bounds: done %d, slots %d, upstream connections %d; want 0, 1, 1 (the rest streams)", u.done.Load(), inFlight(e), u.held())
	}
	readAnswer(t, c, n)
	waitFor(t, "the slot and the file to be freed", func() bool {
		return inFlight(e) == 0 && u.held() == 0 && e.h.resp.files.Load() == 0 && e.h.resp.used.Load() == 0
	})
}

// TestBufferedTrailerCost: a buffered chunked answer keeps its trailer,
// and a cost_from limit reading it is charged what it reports, while the
// slot was given back before the client read a byte.
func TestBufferedTrailerCost(t *testing.T) {
	u := newBigUpstream(t)
	e := newRLEnv(t, fmt.Sprintf(`
[server]
temp_dir = %q
[[upstream]]
name = "app"
targets = [%%q]
  [upstream.concurrency]
  limit = 1
[[policy]]
name = "tokens"
upstream = "app"
key = ["header:X-Key"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 100
  window = "1h"
  cost_from = "trailer:X-Cost"
  estimate = 30
`, t.TempDir()), u.url, newRLBackend(t, "memory", time.Now), time.Now)
	p := e.set.Policies[0]
	key, _ := KeyFor(p, &e.set.Config.Server, []string{"k"})
	remaining := func() int64 {
		d, err := p.Limiter.Peek(context.Background(), key, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining + 1
	}
	const n = 4 << 20
	c := slowClient(t, e.addr, "/big?chunked&trailer&n="+strconv.Itoa(n), "X-Key", "k", "X-Want", "50")
	waitFor(t, "the upstream to answer and the slot to be freed", func() bool { return u.done.Load() == 1 && inFlight(e) == 0 && u.held() == 0 })
	resp := readAnswer(t, c, n)
	if got := resp.Trailer.Get("X-Cost"); got != "50" {
		t.Fatalf("trailer X-Cost %q, want 50", got)
	}
	waitFor(t, "the answer to be charged its reported cost", func() bool { return remaining() == 50 })
}

// TestStreamsStillStream: a server-sent event stream is not buffered (no
// memory, no file) and holds its slot while it streams; a chunked answer
// of an upstream that buffers is passed on as it comes: the first event
// and the first chunk reach the client before the upstream ends.
func TestStreamsStillStream(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sse" {
			w.Header().Set("Content-Type", "text/event-stream")
		}
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: last\n\n")
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(release) }) // before up.Close, which waits for its handlers
	e := newRLEnv(t, fmt.Sprintf(bufConfig, t.TempDir(), 1<<20, ""), up.URL, newRLBackend(t, "memory", time.Now), time.Now)
	// A first line held back until the upstream ends (never, here: it
	// ends at cleanup) fails the read within 5 s, rather than hanging
	// the test.
	client := &http.Client{Timeout: 5 * time.Second}
	for _, path := range []string{"/sse", "/chunked"} {
		resp, err := client.Get(e.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "data: first\n" {
			t.Fatalf("%s: first line %q, %v (not passed on before the upstream ended)", path, line, err)
		}
		if inFlight(e) < 1 {
			t.Errorf("%s: no slot held while the upstream streams", path)
		}
		if path == "/sse" && (e.h.resp.used.Load() != 0 || e.h.resp.files.Load() != 0) {
			t.Errorf("an event stream was buffered: %d bytes, %d files", e.h.resp.used.Load(), e.h.resp.files.Load())
		}
		resp.Body.Close()
	}
}

// TestBufferedPastDiskBudget: the files of all buffered answers together
// stay within [server] response_buffer_disk. Two slow readers of 8 MiB
// answers under a 1 MiB disk budget: the files hold at most 1 MiB between
// them, the answers that find it spent pass the rest on as their clients
// read (holding their upstream connections), every byte arrives in
// order, and the budget is whole again once they are done.
func TestBufferedPastDiskBudget(t *testing.T) {
	u := newBigUpstream(t)
	dir := t.TempDir()
	const disk = 1 << 20
	conf := strings.Replace(fmt.Sprintf(bufConfig, dir, 64<<10, "response_buffer_memory = 65536"),
		"response_buffer_budget", fmt.Sprintf("response_buffer_disk = %d\nresponse_buffer_budget", disk), 1)
	e := newRLEnv(t, conf, u.url, newRLBackend(t, "memory", time.Now), time.Now)
	const n = 8 << 20
	a := slowClient(t, e.addr, "/big?n="+strconv.Itoa(n))
	b := slowClient(t, e.addr, "/big?n="+strconv.Itoa(n))
	waitFor(t, "the disk budget to be spent", func() bool { return e.h.resp.onDisk.Load() == disk })
	var total int64
	for _, fd := range tempFDs(t, dir) {
		if fi, err := os.Stat(fd); err == nil {
			total += fi.Size()
		}
	}
	if total > disk {
		t.Fatalf("spool files hold %d bytes, over the disk budget of %d", total, disk)
	}
	if u.held() == 0 {
		t.Fatalf("no upstream connection held: past the budget an answer passes on as its client reads")
	}
	readAnswer(t, a, n)
	readAnswer(t, b, n)
	waitFor(t, "the budget to be whole again", func() bool {
		return e.h.resp.onDisk.Load() == 0 && e.h.resp.files.Load() == 0 && inFlight(e) == 0 && u.held() == 0
	})
}
