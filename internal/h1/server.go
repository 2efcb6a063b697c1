// Package h1 is limitproxy's HTTP/1.1 front: the server of the proxy's
// plain-HTTP listener. It serves the common request itself — HTTP/1.1,
// the whole head in hand, no body — and hands every other connection,
// with the bytes it read, to the net/http server it was built from, which
// serves it from then on as it always did: bodies, Expect, upgrades,
// HTTP/1.0, h2c, heads that come slowly or in pieces, and anything
// malformed (net/http answers those 400, 431 or 501).
//
// The front exists for cost. net/http's server spends, per request, a
// goroutine and a read in the background, a canonicalized header map,
// a clone of the response header and a bufio pair; under a flood of
// requests that are refused at once, that is most of a rejection's CPU.
// The front reads a head with one read into a buffer taken from a pool,
// checks it against a strict subset of what net/http accepts, and
// writes the answer with one write, byte for byte what net/http writes
// for the same handler calls (response_test.go).
//
// It exists for memory too: a connection waiting for its next request
// holds no buffer, and past a second no goroutine either, parked with
// the others in an epoll set (idle.go, park_linux.go): about 1.2 KiB of
// heap, where net/http's server holds a goroutine and its buffers,
// 20 KiB.
//
// What the front does not do that net/http's server does: watch every
// request's connection for the client going away. A handler that will
// wait (for an upstream, a queue, a slot) asks for that with the
// response writer's WatchClient method, saying when the read in the
// background is to start: an answer given before then costs no
// goroutine and no read. (The proxy watches a queued request at once,
// one being forwarded after 10 ms.)
package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// readBuffer is the size of a connection's read buffer, and so the
// largest head the front serves (net/http serves larger ones).
const readBuffer = 8 << 10

// outBuffer is the size of a connection's write buffer: a response
// head and a small body go out in one write.
const outBuffer = 4 << 10

// Server serves a listener as the package says. Build one with New;
// its methods are safe for concurrent use.
type Server struct {
	fallback *http.Server
	handoff  *handoffListener
	base     context.Context

	mu     sync.Mutex
	ln     net.Listener
	conns  map[*conn]struct{}
	closed bool

	parker parker        // the connections waiting with no goroutine (park_linux.go)
	shed   time.Duration // shedAfter

	connState   func(net.Conn, http.ConnState) // the server's ConnState hook; nil: none
	closing     atomic.Bool                    // Shutdown or Close called: no keep-alive, no new conns
	noKeepAlive atomic.Bool                    // SetKeepAlivesEnabled(false)
	dates       atomic.Pointer[dateLine]
}

// New returns a front for srv: it serves srv.Handler under srv's
// ReadHeaderTimeout, IdleTimeout (ReadTimeout when zero), MaxHeaderBytes,
// BaseContext, ConnContext and ErrorLog, and hands srv the connections
// it does not serve. srv must not be served otherwise. New wraps
// srv.ConnContext so that it sees each handed connection as it was
// accepted. srv.ReadTimeout and WriteTimeout must be zero: a request
// served here has no body to time, and the handler sets its own write
// deadlines.
func New(srv *http.Server) *Server {
	s := &Server{fallback: srv, conns: map[*conn]struct{}{}, shed: shedAfter}
	s.handoff = &handoffListener{ch: make(chan net.Conn), done: make(chan struct{})}
	orig := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if orig != nil {
			return orig(ctx, unhanded(c))
		}
		return ctx
	}
	if state := srv.ConnState; state != nil {
		s.connState = state
		srv.ConnState = func(c net.Conn, st http.ConnState) {
			if st == http.StateNew && c != unhanded(c) {
				return // the front said so when it accepted it
			}
			state(unhanded(c), st)
		}
	}
	return s
}

// Serve accepts connections on ln and serves them until Shutdown or
// Close, after which it returns http.ErrServerClosed; ln is closed then.
// It returns another error if ln's Accept fails other than for a time.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	s.ln = ln
	s.handoff.addr = ln.Addr()
	s.mu.Unlock()

	base := context.Background()
	if s.fallback.BaseContext != nil {
		base = s.fallback.BaseContext(ln)
	}
	s.base = context.WithValue(base, http.ServerContextKey, s.fallback)
	fallback := make(chan error, 1)
	go func() { fallback <- s.fallback.Serve(s.handoff) }()

	var pause time.Duration
	for {
		rw, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// As net/http: a passing failure (out of descriptors)
				// is waited out, 5 ms doubling up to 1 s.
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				s.logf("http: Accept error: %v; retrying in %v", err, pause)
				time.Sleep(pause)
				continue
			}
			s.handoff.Close()
			return err
		}
		pause = 0
		c := s.newConn(rw)
		if c == nil {
			rw.Close()
			return http.ErrServerClosed
		}
		c.setState(http.StateNew)
		go c.serve()
	}
}

// Shutdown stops accepting, closes idle connections, and waits for the
// requests in flight (the front's and net/http's) to end, or for ctx to
// be done, whose error it then returns. Responses written meanwhile
// carry Connection: close. It may be called again, as the proxy's drain
// does once its budget has run out.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	s.closeListener()
	fallback := make(chan error, 1)
	go func() { fallback <- s.fallback.Shutdown(ctx) }()
	pause := time.Millisecond
	for !s.closeIdle() {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			<-fallback
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
	s.stopParker()
	return <-fallback
}

// Close closes the listener and every connection at once, the front's
// and net/http's.
func (s *Server) Close() error {
	s.closing.Store(true)
	s.closeListener()
	err := s.fallback.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.state.Store(stateClosed)
		c.rwc.Close()
		s.wake(c) // if parked: a goroutine to close it
	}
	s.mu.Unlock()
	s.stopParker()
	return err
}

func (s *Server) closeListener() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.ln != nil {
		s.ln.Close()
	}
	s.handoff.Close()
}

// closeIdle closes the connections that wait for a request (those that
// never sent one after 5 s, as net/http) and reports whether none is
// left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := time.Now().Add(-5 * time.Second).UnixNano()
	for c := range s.conns {
		st := c.state.Load()
		if st == stateIdle || st == stateNew && c.born < old {
			if c.state.CompareAndSwap(st, stateClosed) {
				c.rwc.Close()
				s.wake(c) // if parked: a goroutine to close it
			}
		}
	}
	return len(s.conns) == 0
}

// handler is the server's handler, http.DefaultServeMux if none, as for
// net/http.
func (s *Server) handler() http.Handler {
	if h := s.fallback.Handler; h != nil {
		return h
	}
	return http.DefaultServeMux
}

// keepAlives reports whether connections may serve another request:
// not while shutting down, nor after SetKeepAlivesEnabled(false).
func (s *Server) keepAlives() bool { return !s.closing.Load() && !s.noKeepAlive.Load() }

// SetKeepAlivesEnabled controls HTTP keep-alive, as
// http.Server.SetKeepAlivesEnabled does, for the front and net/http's
// server both (call this one, not net/http's: the front cannot read
// that). Enabled by default.
func (s *Server) SetKeepAlivesEnabled(v bool) {
	s.noKeepAlive.Store(!v)
	s.fallback.SetKeepAlivesEnabled(v)
}

func (s *Server) logf(format string, args ...any) {
	if l := s.fallback.ErrorLog; l != nil {
		l.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// dateLine is the Date field's value for one second.
type dateLine struct {
	sec int64
	b   [len(http.TimeFormat)]byte
}

// date appends the Date field's value for now to b, formatted once a
// second.
func (s *Server) date(b []byte) []byte {
	now := time.Now()
	sec := now.Unix()
	if d := s.dates.Load(); d != nil && d.sec == sec {
		return append(b, d.b[:]...)
	}
	d := &dateLine{sec: sec}
	now.UTC().AppendFormat(d.b[:0], http.TimeFormat)
	s.dates.Store(d)
	return append(b, d.b[:]...)
}

// A connection's states, as Shutdown sees them.
const (
	stateNew    int32 = iota // accepted, no request yet
	stateActive              // a request is being read or served
	stateIdle                // waiting for the next request
	stateClosed              // closed by Shutdown or Close
)

// conn is one connection the front serves. While it waits for a
// request it holds this struct, its goroutine (with a small stack, once
// the wait outlasts shedAfter) and nothing else: its buffers come from
// pools while a request is read and answered (idle.go).
type conn struct {
	srv    *Server
	rwc    net.Conn
	ctx    context.Context
	remote string
	born   int64 // UnixNano
	state  atomic.Int32

	// raw reads the connection's socket itself, for the wait for a
	// request's first bytes, so that the buffer is taken only once they
	// are there; nil when the connection does not offer it (idle.go).
	raw   syscall.RawConn
	rawFn func(fd uintptr) bool // c.rawRead, made once

	buf  []byte // read buffer, pooled; buf[r:w] is read and not yet used; nil while none is held
	r, w int
	wb   *writeBuffers // the pooled write buffers; nil while none is held
	out  []byte        // write buffer
	keys []field       // writeSorted's scratch space

	deadline time.Time // the read deadline set, zero if none
	// waitEnd is when the wait for a request's first bytes ends (zero:
	// never).
	waitEnd time.Time
	// headDeadline is when the head being read must be in (its first
	// byte's time plus read_header_timeout); zero: none, or not reading
	// a head.
	headDeadline time.Time
	wdl          time.Time // the write deadline set, zero if none
	served       int       // requests served
	parkID       int32     // its id while parked (park_linux.go); 0: not parked
	inSet        bool      // its socket is in the parker's epoll set (park_linux.go)
	dueIdx       int       // its place in the parker's heap of waits that end

	// The request state kept from one request to the next, and dropped
	// when a wait outlasts shedAfter: the response (one per
	// connection), the request head being served, the watch.
	resp *response
	head *head
	wt   *watcher

	// The watch (WatchClient): a read in the background while the
	// handler waits.
	cancel   context.CancelFunc // the current request's context
	watchErr error              // the client went away: the watch's read failed so

	early    bool // the read deadline set is shedAfter's, not waitEnd
	moved    bool // the wait goes on in a new goroutine (shed)
	hijacked bool // taken over by a handler (Hijack)
	watching bool // WatchClient was called for the current request
	// finished reports that the client has half-closed (EOF) while
	// requests it sent were still pending: it has finished sending, not
	// gone. Its pipelined requests are answered, and an EOF is no
	// departure for the rest of the connection.
	finished bool
}

// watcher is the watch's machinery, made at a connection's first watch.
type watcher struct {
	timer    *time.Timer // runs watchRead
	done     chan struct{}
	stopping atomic.Bool
	n        int // bytes watchRead read past c.w
}

func (s *Server) newConn(rw net.Conn) *conn {
	c := &conn{srv: s, rwc: rw, born: time.Now().UnixNano()}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.conns[c] = struct{}{}
	return c
}

func (c *conn) forget() {
	c.srv.mu.Lock()
	delete(c.srv.conns, c)
	c.srv.mu.Unlock()
}

// serve serves c's requests until it closes or is handed over. A wait
// for the next request that outlasts shedAfter goes on in a new
// goroutine, started here once this one has let go of c, so that the
// stack the handlers grew is given back (idle.go).
func (c *conn) serve() {
	if c.run() == readMoved {
		go c.serve()
	}
}

// What readHead, and run, end with.
const (
	readOK     = iota // a head is in the buffer
	readDone          // the connection is done (closed, failed, out of time)
	readMoved         // the wait goes on in a new goroutine, for serve to start
	readParked        // the wait goes on with no goroutine: c is the parker's
)

// run is serve's work, until c is done (readDone), or its wait goes on
// elsewhere (readMoved, readParked: c must not be touched then).
func (c *conn) run() (res int) {
	handed := false
	defer func() {
		if res == readMoved || res == readParked {
			return
		}
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.logf("http: panic serving %v: %v\n%s", c.remote, v, buf)
			}
			if !c.hijacked && c.resp != nil && c.resp.committed {
				// As net/http: what was committed to the connection's
				// buffer goes out before it closes (an answer cut
				// short, not one made up); a head not yet committed
				// does not.
				c.flush()
			}
		}
		if !handed && !c.hijacked {
			c.rwc.Close()
			c.setState(http.StateClosed)
		}
		c.forget()
		// What it read was copied out for whoever has it now.
		c.releaseRead()
		c.releaseWrite()
	}()
	if c.ctx == nil {
		// Here, not in the accept loop: a PROXY protocol connection
		// reads its header to know its addresses.
		c.remote = c.rwc.RemoteAddr().String()
		ctx := context.WithValue(c.srv.base, http.LocalAddrContextKey, c.rwc.LocalAddr())
		if cc := c.srv.fallback.ConnContext; cc != nil {
			if ctx = cc(ctx, c.rwc); ctx == nil {
				panic("ConnContext returned nil")
			}
		}
		c.ctx = ctx
		c.rawInit()
	}
	maxHead := c.srv.fallback.MaxHeaderBytes
	if maxHead <= 0 {
		maxHead = http.DefaultMaxHeaderBytes
	}
	for {
		end, res := c.readHead()
		if res != readOK {
			return res
		}
		if c.head == nil {
			c.head = new(head)
		}
		h := c.head
		if end < 0 || end-c.r > maxHead || !parseHead(c.buf[c.r:end], h) {
			handed = c.handOff()
			return readDone
		}
		c.r = end
		c.setState(http.StateActive)
		if !c.serveRequest(h) || !c.srv.keepAlives() {
			return readDone
		}
		c.setState(http.StateIdle)
		if c.r == c.w {
			// Before the read that waits for the next request, let the
			// other connections' goroutines run: under load the next
			// request has often come by then, and the read finds it,
			// rather than failing (EAGAIN), parking and being woken
			// through the poller: 2.2 system calls a request instead
			// of 3.2 under wrk's 64 connections (nginx: 2.1). With
			// nothing else to run, this returns at once.
			runtime.Gosched()
		}
	}
}

// readHead returns the end of the next head in c.buf (past its blank
// line), reading until it has one: the first bytes within the idle
// timeout (read_header_timeout for a connection's first request), the
// rest of the head within read_header_timeout of its first byte, as
// net/http reads a head. -1 when the head is larger than the buffer: it
// is net/http's then, within the same deadline. Its second result is
// readOK with a head, else what run ends with: readDone when the
// connection is done (closed, failed, or out of time), readMoved or
// readParked when a wait outlasts shedAfter (shed).
func (c *conn) readHead() (int, int) {
	rht := c.srv.fallback.ReadHeaderTimeout
	if c.r == c.w {
		c.r, c.w = 0, 0
		st := stateIdle
		if c.served == 0 {
			st = stateNew
		}
		long := c.moved
		if long {
			// A wait that outlasted shedAfter, going on in this new
			// goroutine until its own end.
			c.moved = false
		} else {
			// Nothing pending: the buffer goes back until the next
			// request's first bytes are there.
			c.releaseRead()
			c.startWait(st)
			c.state.Store(st)
			if st == stateIdle && !c.srv.keepAlives() {
				return 0, readDone
			}
		}
		n, err := c.readFirst(long)
		if n == 0 {
			if res := c.shed(err, st); res != readDone {
				return 0, res
			}
		}
		if !c.state.CompareAndSwap(st, stateActive) {
			return 0, readDone // closed by Shutdown
		}
		if c.w = n; n == 0 {
			return 0, readDone
		}
		c.headDeadline = c.waitEnd // the first request's: from accept
		if c.served > 0 {
			c.headDeadline = time.Time{}
		}
	}
	for {
		if i := headEnd(c.buf[c.r:c.w]); i >= 0 {
			c.headDeadline = time.Time{}
			return c.r + i, readOK
		}
		if c.w == len(c.buf) {
			if c.r == 0 {
				return -1, readOK
			}
			c.w = copy(c.buf, c.buf[c.r:c.w])
			c.r = 0
		}
		if c.headDeadline.IsZero() && rht > 0 {
			c.headDeadline = time.Now().Add(rht)
		}
		if !c.headDeadline.Equal(c.deadline) {
			c.rwc.SetReadDeadline(c.headDeadline)
			c.deadline = c.headDeadline
		}
		n, _ := c.rwc.Read(c.buf[c.w:])
		if c.w += n; n == 0 {
			// Gone, or out of time, part of a head read: closed, as
			// net/http closes it; first answered 400 where net/http
			// answers that, a line cut short that does not parse.
			if badPartialLine(c.buf[c.r:c.w]) {
				c.rwc.SetWriteDeadline(time.Now().Add(time.Second))
				c.write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"))
			}
			return 0, readDone
		}
	}
}

// headEnd returns the end of the first head in b, past its blank line,
// or -1 if b holds none. As net/http's line reader, it ends a line at
// LF, with or without a CR before it: a head whose lines end in a bare
// LF ends at its blank line too (parseHead refuses it, net/http serves
// it), rather than wait for a "\r\n\r\n" that never comes.
func headEnd(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		if i < len(b) && b[i] == '\n' {
			return i + 1
		}
		if i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n' {
			return i + 2
		}
	}
}

// badPartialLine reports whether net/http answers 400 to a head cut
// short as b is (b holds no blank line). It reads b as net/http's server
// reads a request, with http.ReadRequest, the read after b failing: its
// line reader hands back a last line without its end (or with the CR of
// a cut CRLF) as a whole line, and a line that does not parse, or one
// before it, is a bad request; a head cut where all it read parses
// fails at the read instead, which net/http does not answer.
func badPartialLine(b []byte) bool {
	_, err := http.ReadRequest(bufio.NewReader(io.MultiReader(bytes.NewReader(b), failedRead{})))
	return err != nil && !errors.Is(err, errReadFailed)
}

// failedRead is a read that fails, as the connection's did.
type failedRead struct{}

var errReadFailed = errors.New("read failed")

func (failedRead) Read([]byte) (int, error) { return 0, errReadFailed }

// setReadDeadline gives the next read d from now, moving the deadline
// only when it is off by more than an eighth of d (a connection that
// sends request after request pays for a timer update once in a while,
// not for each request): the wait allowed is between 7/8 of d and d.
func (c *conn) setReadDeadline(d time.Duration) {
	c.setReadDeadlineAt(time.Now(), d)
}

// setReadDeadlineAt is setReadDeadline with the time now.
func (c *conn) setReadDeadlineAt(now time.Time, d time.Duration) {
	if d <= 0 {
		if !c.deadline.IsZero() {
			c.rwc.SetReadDeadline(time.Time{})
			c.deadline = time.Time{}
		}
		return
	}
	want := now.Add(d)
	if c.deadline.After(want) || c.deadline.Before(want.Add(-d/8)) {
		c.rwc.SetReadDeadline(want)
		c.deadline = want
	}
}

// setWriteDeadline sets the write deadline t, unless the one set is
// earlier than t by less than an eighth of the time left until t: a
// handler that gives each response send_timeout from now (the proxy's
// recorder does) then moves the connection's deadline once in a while,
// not once a request, and the time a write is given stays between 7/8
// of what was asked and all of it.
func (c *conn) setWriteDeadline(t time.Time) error {
	if !t.IsZero() && !c.wdl.IsZero() && !c.wdl.After(t) {
		if left := time.Until(t); left > 0 && t.Sub(c.wdl) < left/8 {
			return nil
		}
	}
	c.wdl = t
	return c.rwc.SetWriteDeadline(t)
}

// handOff gives c, with what it read and did not use, to net/http.
func (c *conn) handOff() bool {
	c.setReadDeadline(0)
	if !c.wdl.IsZero() {
		c.rwc.SetWriteDeadline(time.Time{})
	}
	hc := &handedConn{Conn: c.rwc, buf: bytes.Clone(c.buf[c.r:c.w]), headDeadline: c.headDeadline}
	c.forget()
	if cw, ok := c.rwc.(closeWriter); ok {
		// A tunnel (an upgrade) half-closes through it.
		return c.srv.handoff.give(&handedCloseWriteConn{handedConn: hc, cw: cw})
	}
	return c.srv.handoff.give(hc)
}

// serveRequest serves the request of h and reports whether the
// connection may serve another.
func (c *conn) serveRequest(h *head) bool {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	c.cancel = cancel
	req := (&http.Request{
		Method: h.method, URL: h.url, RequestURI: h.target,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h.header, Body: http.NoBody, Host: h.host,
		RemoteAddr: c.remote, Close: h.close,
	}).WithContext(ctx)
	c.takeWrite()
	// The response and its header map are the connection's, as the
	// request's header: used again for its next request (until a wait
	// outlasts shedAfter).
	if c.resp == nil {
		c.resp = &response{header: make(http.Header)}
	}
	w := c.resp
	hdr, trailers := w.header, w.trailers[:0]
	clear(hdr)
	*w = response{c: c, req: req, header: hdr, trailers: trailers, clen: -1, announced: -1, head: h.method == http.MethodHead, pending: c.wb.pending[:0]}
	c.served++
	func() {
		defer func() {
			if c.watching {
				c.stopWatch()
			}
		}()
		c.srv.handler().ServeHTTP(w, req)
	}()
	c.cancel = nil
	if c.hijacked {
		c.setState(http.StateHijacked)
		return false
	}
	keep := w.finish()
	// The answer is out: the buffers go back, and nothing of the request
	// is kept but what parseHead and the next response use again.
	w.req, w.pending = nil, nil
	c.releaseWrite()
	if c.watchErr != nil {
		keep = false // the client went away meanwhile
	}
	return keep
}

// watch arms the watch of WatchClient, once per request: the background
// read starts d from now, unless the request is over by then. Not once
// the connection is hijacked: it is the handler's then, and a read in
// the background would take what the client sends it.
func (c *conn) watch(d time.Duration) {
	if c.watching || c.hijacked {
		return
	}
	c.watching = true
	if c.r > 0 {
		// Room for what the client sends meanwhile: the request's head
		// (copied out by parseHead) is done with, a pipelined one
		// moves to the front. A full buffer would leave nothing to
		// watch with.
		c.w = copy(c.buf, c.buf[c.r:c.w])
		c.r = 0
	}
	if c.wt == nil {
		c.wt = &watcher{done: make(chan struct{}, 1)}
		c.wt.timer = time.AfterFunc(d, c.watchRead)
		return
	}
	c.wt.timer.Reset(d)
}

// watchRead, run by the watch's timer, reads in the background into the
// buffer's free room, until the client goes away (an error, or EOF with
// nothing pending: the request's context is canceled) or the watch
// stops. What it reads is the next request's (pipelined), kept for it; it
// goes on reading after it, so that a client that sends a byte and leaves
// with a reset is noticed too (and a request queued for it never
// forwarded), until the buffer is full (a client that has pipelined 8 KiB
// is not watched further). An EOF while a whole pipelined head is
// pending is a half-close (shutdown(SHUT_WR): `printf … | nc -N`), a
// client that has finished sending, not one gone: the pending requests
// are answered in order, as net/http's server and nginx answer them, and
// the connection then ends at the EOF its next read meets. An EOF after
// part of a head only (a byte, then close) is a client gone, as is any
// other error (a reset). stopWatch ends the read by putting the
// read deadline in the past; the deadline is cleared here, before the
// first read, and no read starts once stopWatch has begun, so that none
// can clear stopWatch's deadline and block.
func (c *conn) watchRead() {
	wt := c.wt
	defer func() { wt.done <- struct{}{} }()
	c.rwc.SetReadDeadline(time.Time{})
	for !wt.stopping.Load() {
		free := c.buf[c.w+wt.n:]
		if len(free) == 0 {
			return
		}
		n, err := c.rwc.Read(free)
		wt.n += n
		if err != nil {
			if wt.stopping.Load() {
				return
			}
			if err == io.EOF && (c.finished || holdsHead(c.buf[c.r:c.w+wt.n])) {
				c.finished = true
				return
			}
			c.watchErr = err
			c.cancel()
			return
		}
	}
}

// holdsHead reports whether b, bytes a client pipelined, holds the end
// of a request head: a request it has sent whole, to be answered even
// after it half-closes.
func holdsHead(b []byte) bool {
	return bytes.Contains(b, []byte("\n\r\n")) || bytes.Contains(b, []byte("\n\n"))
}

// stopWatch ends the watch when the handler returns: the timer stopped
// if it has not fired, else the background read ended and what it read
// kept.
func (c *conn) stopWatch() {
	c.watching = false
	wt := c.wt
	if wt.timer.Stop() {
		return // never started
	}
	wt.stopping.Store(true)
	c.rwc.SetReadDeadline(aLongTimeAgo)
	<-wt.done
	wt.stopping.Store(false)
	c.deadline = aLongTimeAgo // reset at the next wait
	c.w += wt.n
	wt.n = 0
}

// aLongTimeAgo is a deadline in the past: it fails a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// flush writes what c.out holds.
func (c *conn) flush() error {
	if len(c.out) == 0 {
		return nil
	}
	err := c.write(c.out)
	c.out = c.out[:0]
	return err
}

func (c *conn) write(p []byte) error {
	_, err := c.rwc.Write(p)
	return err
}

// handoffListener is the listener net/http's server serves: it yields
// the connections the front hands over.
type handoffListener struct {
	addr net.Addr
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// give hands c to net/http's server; false if it is closed (c is closed
// then).
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		c.Close()
		return false
	}
}

// handedConn is a connection handed to net/http: its first reads return
// what the front had read of it. A head larger than the front's buffer
// is handed over part-read: until its end has been read, no read
// deadline net/http sets goes past the one the front gave the head, so
// that a slow head gets read_header_timeout once, not twice.
type handedConn struct {
	net.Conn
	buf          []byte
	headDeadline time.Time // zero: no head being read
	tail         [3]byte   // the last bytes read, to find the blank line across reads
	nt           int
}

func (c *handedConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		c.sawHead(p[:n])
		return n, nil
	}
	n, err := c.Conn.Read(p)
	c.sawHead(p[:n])
	return n, err
}

// sawHead ends the head's deadline once p, with what was read before,
// holds the head's blank line.
func (c *handedConn) sawHead(p []byte) {
	if c.headDeadline.IsZero() || len(p) == 0 {
		return
	}
	b := append(c.tail[:c.nt:c.nt], p...)
	if holdsHead(b) {
		c.headDeadline = time.Time{}
		return
	}
	c.nt = copy(c.tail[:], b[max(0, len(b)-3):])
}

// SetReadDeadline sets t, or the head's deadline if that is earlier.
func (c *handedConn) SetReadDeadline(t time.Time) error {
	if hd := c.headDeadline; !hd.IsZero() && (t.IsZero() || t.After(hd)) {
		t = hd
	}
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets the read deadline as SetReadDeadline does, and the
// write deadline t.
func (c *handedConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// unhanded returns the connection as accepted, if c is one the front
// handed over.
func unhanded(c net.Conn) net.Conn {
	switch hc := c.(type) {
	case *handedConn:
		return hc.Conn
	case *handedCloseWriteConn:
		return hc.Conn
	}
	return c
}

// setState reports c's new state to the server's ConnState hook.
func (c *conn) setState(st http.ConnState) {
	if f := c.srv.connState; f != nil {
		f(c.rwc, st)
	}
}

// closeWriter is a connection that can half-close.
type closeWriter interface{ CloseWrite() error }

// handedCloseWriteConn is a handedConn whose connection can half-close:
// ReverseProxy's tunnels need that to pass a half-close on.
type handedCloseWriteConn struct {
	*handedConn
	cw closeWriter
}

func (c *handedCloseWriteConn) CloseWrite() error { return c.cw.CloseWrite() }

// NetConn returns the connection as accepted.
func (c *handedConn) NetConn() net.Conn { return c.Conn }
