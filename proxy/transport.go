package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"
)

// syncTransport is the http.RoundTripper under each upstream's
// ReverseProxy for the common case — HTTP/1.1 to an http:// target, no
// request body — done by the handler's own goroutine: it writes the
// request on a kept-alive connection, reads the response head, and hands
// the connection back when the response body has been read to its end.
// http.Transport runs two goroutines per connection and hands every
// request and response between them and the caller; for a proxy in front
// of one or a few hosts, that hand-off was a large share of the CPU a
// forwarded request cost (in a CPU profile, scheduler and Transport code
// were about a quarter). Everything else — https, h2c, requests with a
// body, upgrades, CONNECT, and an Expect (which limitproxy's Rewrite
// never leaves on a request) — goes to fallback, the http.Transport it
// was built beside.
//
// Framing is net/http's own: the request head exactly as Request.Write
// writes it (writeHead), the response read by http.ReadResponse: chunked
// and Content-Length bodies, close-delimited ones, HEAD, 204 and 304 are
// read exactly as http.Transport reads them; 1xx informational responses
// before the final one are skipped (101 is never asked for here, and one
// that comes anyway is returned with its connection closed, as
// http.Transport returns it). A
// kept-alive connection the upstream closed meanwhile fails its first
// read: an idempotent request is then sent again, once, on a new
// connection. Idle connections are kept per host up to maxIdlePerHost and
// closed when found idle longer than idleTimeout. Safe for concurrent use.
type syncTransport struct {
	fallback       *http.Transport
	dial           func(ctx context.Context, network, addr string) (net.Conn, error)
	headerTimeout  time.Duration // response head within; 0: none
	idleTimeout    time.Duration
	maxIdlePerHost int

	mu    sync.Mutex
	idle  map[string][]*syncConn // host:port → most recently used last
	sweep *time.Timer            // closes connections idle too long; nil when none wait

	addrs sync.Map // URL.Host → host:port (addrOf)
}

// syncConn is one kept-alive connection to a target.
type syncConn struct {
	conn   net.Conn
	lr     *limitedConn // under br: bounds what a response head may read
	br     *bufio.Reader
	bw     *bufio.Writer
	idleAt time.Time
	keys   []string // writeHead's scratch space

	// For quiet, made once per connection: a RawConn and the function
	// it runs (building them per request cost two allocations).
	raw    syscall.RawConn // nil: not a socket, no peek
	peek   func(fd uintptr) bool
	peeked bool // set by peek: nothing has arrived

	// abort fails the connection's pending and future I/O at once (when
	// the request's context ends, or the header timeout passes); made
	// once per connection, for the same reason.
	abort func()
	// headerTimer runs abort when a response head is late; nil until the
	// first request with a header timeout.
	headerTimer *time.Timer
}

// armHeaderTimer starts pc's header timer: abort runs in d unless the
// timer is disarmed first.
func (pc *syncConn) armHeaderTimer(d time.Duration) {
	if pc.headerTimer == nil {
		pc.headerTimer = time.AfterFunc(d, pc.abort)
		return
	}
	pc.headerTimer.Reset(d)
}

// disarmHeaderTimer stops pc's header timer and reports whether it had
// not fired: false means the connection's deadline is (or is about to
// be) in the past. True when there is no timer.
func (pc *syncConn) disarmHeaderTimer() bool {
	return pc.headerTimer == nil || pc.headerTimer.Stop()
}

func newSyncTransport(fallback *http.Transport, headerTimeout time.Duration) *syncTransport {
	return &syncTransport{
		fallback: fallback, dial: fallback.DialContext, headerTimeout: headerTimeout,
		idleTimeout: fallback.IdleConnTimeout, maxIdlePerHost: fallback.MaxIdleConnsPerHost,
		idle: map[string][]*syncConn{},
	}
}

// RoundTrip implements http.RoundTripper.
func (t *syncTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.handles(req) {
		return t.fallback.RoundTrip(req)
	}
	addr := t.addrOf(req.URL)
	for attempt := 0; ; attempt++ {
		pc, reused, err := t.get(req.Context(), addr)
		if err != nil {
			return nil, err
		}
		resp, err := t.exchange(pc, req, addr)
		if err == nil {
			return resp, nil
		}
		pc.conn.Close()
		// A kept-alive connection the upstream had closed: nothing of the
		// response was read, so an idempotent request may go again, once.
		if reused && attempt == 0 && errors.Is(err, errStaleConn) && idempotent(req) && req.Context().Err() == nil {
			continue
		}
		return nil, err
	}
}

// handles reports whether req is one syncTransport sends itself.
func (t *syncTransport) handles(req *http.Request) bool {
	return req.URL.Scheme == "http" && req.Method != http.MethodConnect &&
		(req.Body == nil || req.Body == http.NoBody) && req.ContentLength == 0 &&
		len(req.TransferEncoding) == 0 && req.Trailer == nil &&
		req.Header["Upgrade"] == nil && req.Header["Expect"] == nil && req.Header["Te"] == nil
}

// maxHeaderBytes bounds what is read of a response's head, 1xx responses
// before it included: http.Transport's default MaxResponseHeaderBytes.
const maxHeaderBytes = 10 << 20

// errStaleConn marks a failure to read the first byte of a response on
// a connection: the upstream closed it before (or instead of) answering.
var errStaleConn = errors.New("connection closed before the response")

// exchange writes req on pc and reads the response head. The response
// body, when it has one, hands pc back to t (under addr) at its end.
func (t *syncTransport) exchange(pc *syncConn, req *http.Request, addr string) (*http.Response, error) {
	ctx := req.Context()
	// A client that goes away ends a blocked write or read at once, until
	// the response body has been read (the connection is then closed,
	// never reused); the header timeout bounds the head. Both put the
	// connection's deadline in the past, so that what was blocked fails
	// and nothing after it can succeed: the connection is not used again.
	// The timeout is the connection's own timer, re-armed for each
	// request and stopped once the head is in, rather than a deadline set
	// and cleared on the socket (two each time, for reads and writes).
	if t.headerTimeout > 0 {
		pc.armHeaderTimer(t.headerTimeout)
	}
	stop := context.AfterFunc(ctx, pc.abort)
	var err error
	if pc.keys, err = writeHead(pc.bw, req, pc.keys); err == nil {
		err = pc.bw.Flush()
	}
	if err != nil {
		stop()
		pc.disarmHeaderTimer()
		return nil, ctxErr(ctx, err)
	}
	var (
		resp   *http.Response
		simple *syncResponse // read by readSimpleResponse: resp is its
		direct int64         // its Content-Length
	)
	pc.lr.left = maxHeaderBytes
	for {
		if _, err := pc.br.Peek(1); err != nil {
			stop()
			pc.disarmHeaderTimer()
			if ctx.Err() == nil && (err == io.EOF || errors.Is(err, net.ErrClosed) || isReset(err)) {
				return nil, errStaleConn
			}
			return nil, ctxErr(ctx, err)
		}
		if r, n, ok := readSimpleResponse(pc.br, req); ok {
			simple, resp, direct = r, &r.resp, n
			resp.Body = http.NoBody // until its own below
			break
		}
		r, err := http.ReadResponse(pc.br, req)
		if err != nil {
			stop()
			pc.disarmHeaderTimer()
			if pc.lr.left <= 0 {
				err = fmt.Errorf("response head over %d bytes", maxHeaderBytes)
			}
			return nil, ctxErr(ctx, err)
		}
		if r.StatusCode < 100 || r.StatusCode > 199 || r.StatusCode == http.StatusSwitchingProtocols {
			resp = r
			break
		}
		// 1xx before the final response: skipped, as http.Transport
		// does for all but 101 when nobody traces them (their heads
		// count towards maxHeaderBytes).
		io.Copy(io.Discard, r.Body)
	}
	if !pc.disarmHeaderTimer() {
		// The head came, but the timer fired (or is firing): the
		// connection's deadline is in the past, its body unreadable.
		stop()
		resp.Body.Close()
		return nil, fmt.Errorf("response head after %v: %w", t.headerTimeout, os.ErrDeadlineExceeded)
	}
	pc.lr.left = math.MaxInt64 // no bound on bodies
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// Never asked for (upgrades go to fallback), yet returned as
		// http.Transport returns it, for ReverseProxy to refuse (502: a
		// switch to a protocol nobody requested). The connection, switched
		// to who knows what, is closed.
		stop()
		resp.Body.Close()
		pc.conn.Close()
		resp.Body = http.NoBody
		return resp, nil
	}
	reusable := !resp.Close && !req.Close
	if resp.Body == http.NoBody && direct <= 0 {
		// No body (HEAD, 204, 304, Content-Length 0): the connection is
		// free now, unless the context ended meanwhile (its deadline
		// would then fail the next request).
		if stop() && reusable {
			t.put(addr, pc)
		} else {
			pc.conn.Close()
		}
		return resp, nil
	}
	// While the body is read, the watch goes on (http.Transport does the
	// same), so that an upstream that stalls mid-body does not hold the
	// handler and the connection once the client has gone.
	var b *syncBody
	if simple != nil {
		b = &simple.body
		*b = syncBody{left: direct}
	} else {
		b = &syncBody{rc: resp.Body}
	}
	b.t, b.pc, b.addr, b.reusable, b.stop = t, pc, addr, reusable, stop
	resp.Body = b
	return resp, nil
}

// syncBody is a response body that returns its connection at EOF.
type syncBody struct {
	rc       io.ReadCloser // nil: the next left bytes of pc.br are the body
	left     int64
	t        *syncTransport
	pc       *syncConn
	addr     string
	reusable bool
	done     bool
	stop     func() bool // stops watching the request's context

	// mem is the body that takes this one's place when the response
	// buffer reads a small answer whole (respbuf.go): part of this
	// allocation rather than one more. A syncBody is never reused.
	mem memBody
}

func (b *syncBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	var (
		n   int
		err error
	)
	if b.rc != nil {
		n, err = b.rc.Read(p)
	} else {
		n, err = b.readDirect(p)
	}
	if err == io.EOF {
		b.release(true)
	} else if err != nil {
		b.release(false)
	}
	return n, err
}

// Close returns the connection if the body was read to its end, and
// closes it otherwise (what is left unread would be the next response).
func (b *syncBody) Close() error {
	if !b.done {
		b.release(false)
	}
	return nil
}

// readDirect reads the body of a head readSimpleResponse read, as
// net/http reads a Content-Length body: the last bytes come with io.EOF,
// and a body cut short is io.ErrUnexpectedEOF.
func (b *syncBody) readDirect(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.pc.br.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *syncBody) release(atEOF bool) {
	b.done = true
	if b.rc != nil {
		b.rc.Close()
	}
	// If the context ended meanwhile, the connection's read deadline may
	// lie in the past: it is not reused.
	if b.stop() && atEOF && b.reusable {
		b.t.put(b.addr, b.pc)
		return
	}
	b.pc.conn.Close()
}

// get returns an idle connection to addr, or a new one.
func (t *syncTransport) get(ctx context.Context, addr string) (pc *syncConn, reused bool, err error) {
	now := time.Now()
	t.mu.Lock()
	for conns := t.idle[addr]; len(conns) > 0; conns = t.idle[addr] {
		pc = conns[len(conns)-1]
		t.idle[addr] = conns[:len(conns)-1]
		if t.idleTimeout > 0 && now.Sub(pc.idleAt) >= t.idleTimeout {
			pc.conn.Close()
			continue
		}
		t.mu.Unlock()
		if pc.quiet() {
			return pc, true, nil
		}
		// Closed by the upstream, or bytes it sent unasked (a body after
		// a HEAD response, say): never reused, as http.Transport's
		// reading goroutine would find.
		pc.conn.Close()
		t.mu.Lock()
	}
	t.mu.Unlock()
	c, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	return newSyncConn(c), false, nil
}

// limitedConn fails reads once left bytes have been read, as
// http.Transport bounds a response head.
type limitedConn struct {
	net.Conn
	left int64
}

func (c *limitedConn) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, fmt.Errorf("read limit of %d bytes exhausted", maxHeaderBytes)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.Conn.Read(p)
	c.left -= int64(n)
	return n, err
}

// quiet reports whether nothing has arrived on pc while it was idle —
// neither bytes nor the upstream's close — with one non-blocking peek.
func (pc *syncConn) quiet() bool {
	if pc.br.Buffered() > 0 {
		return false
	}
	if pc.raw == nil {
		return true
	}
	pc.peeked = false
	err := pc.raw.Read(pc.peek)
	return err == nil && pc.peeked
}

// newSyncConn wraps c, a new connection.
func newSyncConn(c net.Conn) *syncConn {
	lr := &limitedConn{Conn: c, left: math.MaxInt64}
	pc := &syncConn{conn: c, lr: lr, br: bufio.NewReaderSize(lr, 4096), bw: bufio.NewWriterSize(c, 4096)}
	pc.abort = func() { c.SetDeadline(aLongTimeAgo) }
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			pc.raw = raw
			pc.peek = func(fd uintptr) bool {
				var b [1]byte
				n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
				pc.peeked = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
				return true
			}
		}
	}
	return pc
}

// put makes pc idle for addr, or closes it if addr has enough idle
// connections. Idle ones past idleTimeout are closed on the way.
func (t *syncTransport) put(addr string, pc *syncConn) {
	pc.idleAt = time.Now()
	t.mu.Lock()
	conns := t.idle[addr]
	// The oldest come first: close those that have idled too long.
	for len(conns) > 0 && t.idleTimeout > 0 && pc.idleAt.Sub(conns[0].idleAt) >= t.idleTimeout {
		conns[0].conn.Close()
		conns = conns[1:]
	}
	if len(conns) >= t.maxIdlePerHost {
		t.idle[addr] = conns
		t.mu.Unlock()
		pc.conn.Close()
		return
	}
	t.idle[addr] = append(conns, pc)
	if t.sweep == nil && t.idleTimeout > 0 {
		t.sweep = time.AfterFunc(t.idleTimeout, t.sweepIdle)
	}
	t.mu.Unlock()
}

// sweepIdle closes the connections idle for idleTimeout or longer, as
// http.Transport does, so that a quiet upstream's connections are not
// kept open (or half closed by it) until the next request; one timer for
// the whole transport, re-armed while connections wait.
func (t *syncTransport) sweepIdle() {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep = nil
	next := time.Duration(-1)
	for addr, conns := range t.idle {
		for len(conns) > 0 && now.Sub(conns[0].idleAt) >= t.idleTimeout {
			conns[0].conn.Close()
			conns = conns[1:]
		}
		if len(conns) == 0 {
			delete(t.idle, addr)
			continue
		}
		t.idle[addr] = conns
		if d := t.idleTimeout - now.Sub(conns[0].idleAt); next < 0 || d < next {
			next = d
		}
	}
	if next >= 0 {
		t.sweep = time.AfterFunc(next, t.sweepIdle)
	}
}

// CloseIdleConnections closes every idle connection, of both transports.
func (t *syncTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*syncConn{}
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	for _, conns := range idle {
		for _, pc := range conns {
			pc.conn.Close()
		}
	}
	t.fallback.CloseIdleConnections()
}

// addrOf is u's host:port, port 80 when absent, remembered per u.Host
// (the targets': a handful).
func (t *syncTransport) addrOf(u *url.URL) string {
	if a, ok := t.addrs.Load(u.Host); ok {
		return a.(string)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
	}
	a := net.JoinHostPort(host, port)
	t.addrs.Store(u.Host, a)
	return a
}

// idempotent reports whether req may be sent twice, its method being
// idempotent (RFC 9110),
// as http.Transport decides when it retries.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// ctxErr returns the context's error when it is why err happened.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// isReset reports whether err is the peer resetting the connection.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// aLongTimeAgo is a deadline in the past, which fails pending I/O at once.
var aLongTimeAgo = time.Unix(1, 0)
