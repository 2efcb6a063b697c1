package server

import (
	"errors"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// fdReserve is how many file descriptors DefaultMaxConnections leaves for
// everything but client and upstream connections: the listeners, Redis,
// the config and certificate files, the answers of refuseAnswers.
const fdReserve = 256

// refuseAnswers bounds the refused connections kept open at once while
// they wait for their request (a newer one pushes the oldest out), and
// apart, those kept after their 503 to read what their client sent (past
// it, one is closed right after its answer); each for at most
// refuseTimeout.
const refuseAnswers = 64

// refuseTimeout bounds each of the two waits of a refused connection:
// for the client's request to begin before its 503 is written, and after
// it, to read what the client had sent (closing with unread data resets
// the connection, and the client could lose the answer).
const refuseTimeout = 250 * time.Millisecond

// maxAcceptBackoff is the longest pause after an accept error, as
// net/http's.
const maxAcceptBackoff = time.Second

// DefaultMaxConnections returns the bound on client connections used when
// [server] max_connections is 0, for a process allowed nofile open files:
// (nofile − 256) / 2, as a forwarded request holds a descriptor to its
// client and one to its upstream; for nofile ≤ 512, nofile / 4; for 0
// (unknown), as for 1<<20. At least 1.
func DefaultMaxConnections(nofile uint64) int {
	if nofile == 0 {
		nofile = 1 << 20 // unknown: as a generous system's
	}
	n := nofile / 4
	if nofile > 2*fdReserve {
		n = (nofile - fdReserve) / 2
	}
	return int(max(1, min(n, 1<<30)))
}

// fileLimit returns the process's soft limit on open files (Go raises it
// to the hard limit at start), or 0 if it cannot be read.
func fileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return rl.Cur
}

// limitListener is the proxy's listener with a bound on the client
// connections open at once, and accept errors handled without spinning or
// flooding the log. A connection past the bound is refused: on plain
// HTTP, answered 503 with Retry-After and closed; under TLS (answer set
// to false), closed. Safe for concurrent use.
type limitListener struct {
	net.Listener
	max    int64
	answer bool // write a 503 to a refused connection
	log    *zap.Logger
	now    func() time.Time

	open      atomic.Int64
	answering atomic.Int64 // refused connections answered, being drained

	// silent are the refused connections waiting for their request to
	// begin, oldest first, at most refuseAnswers: a newer one pushes out
	// the oldest, so that a flood of connections that send nothing cannot
	// keep a client that does from its answer.
	waitMu    sync.Mutex
	silent    []net.Conn
	refused   atomic.Int64 // since start, for tests and logs
	done      chan struct{}
	closeOnce sync.Once

	mu         sync.Mutex
	logged     map[string]time.Time // log line → when last written
	suppressed map[string]int       // log line → occurrences not written since
}

func newLimitListener(ln net.Listener, max int, answer bool, log *zap.Logger) *limitListener {
	return &limitListener{Listener: ln, max: int64(max), answer: answer, log: log, now: time.Now,
		done: make(chan struct{}), logged: map[string]time.Time{}, suppressed: map[string]int{}}
}

// Accept returns the next connection within the bound. It refuses those
// past it itself, and retries after errors that say the process or the
// system is out of descriptors or memory, pausing 5 ms, then twice as long
// each time up to 1 s, logging at most once a second; it returns any other
// error, and net.ErrClosed once Close is called.
func (l *limitListener) Accept() (net.Conn, error) {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !resourceError(err) {
				return nil, err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), maxAcceptBackoff)
			l.throttled("accept failed; pausing the listener", zap.Error(err), zap.Duration("pause", backoff))
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
				return nil, net.ErrClosed
			}
			continue
		}
		backoff = 0
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refuse(c)
			continue
		}
		return &limitConn{Conn: c, l: l}, nil
	}
}

// Close closes the listener and ends a pause of Accept.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// resourceError reports whether err, from Accept, says the process or the
// system ran out of descriptors, buffers or memory: a condition that
// passes, and that retrying at once would only repeat.
func resourceError(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// refuse answers and closes a connection past the bound: on plain HTTP,
// 503 and Retry-After; under TLS, no answer (a handshake to say no would
// cost more than the connection).
func (l *limitListener) refuse(c net.Conn) {
	l.refused.Add(1)
	l.throttled("connection limit reached; refusing new connections", zap.Int64("max_connections", l.max))
	if !l.answer {
		c.Close()
		return
	}
	l.waitMu.Lock()
	if len(l.silent) >= refuseAnswers {
		l.silent[0].Close() // its goroutine's read fails, and it leaves
		l.silent = l.silent[1:]
	}
	l.silent = append(l.silent, c)
	l.waitMu.Unlock()
	go func() {
		defer c.Close()
		var buf [4096]byte
		// Answer the client's request, not the bare connection: an HTTP
		// client that has connected but not yet written takes an answer
		// that comes before its request for an unsolicited one, and drops
		// it (Go's Transport does). So wait for the request's first bytes,
		// or refuseTimeout, whichever comes first, then answer.
		c.SetDeadline(time.Now().Add(refuseTimeout))
		_, err := c.Read(buf[:])
		if !l.unsilence(c) || (err != nil && !errors.Is(err, os.ErrDeadlineExceeded)) {
			return // pushed out by a newer one, or the client left
		}
		// A new connection's send buffer is empty: the write does not wait.
		c.SetDeadline(time.Now().Add(refuseTimeout))
		if _, err := c.Write(refusal); err != nil {
			return
		}
		if l.answering.Add(1) > refuseAnswers {
			l.answering.Add(-1)
			return
		}
		defer l.answering.Add(-1)
		// Half-close, then read what the client sent until it closes or
		// the deadline: a close with unread data would reset the
		// connection, and the client could lose the answer.
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		for {
			if _, err := c.Read(buf[:]); err != nil {
				return
			}
		}
	}()
}

// unsilence takes c off the refused connections waiting for their
// request; false if a newer one had pushed it out.
func (l *limitListener) unsilence(c net.Conn) bool {
	l.waitMu.Lock()
	defer l.waitMu.Unlock()
	for i, w := range l.silent {
		if w == c {
			l.silent = append(l.silent[:i], l.silent[i+1:]...)
			return true
		}
	}
	return false
}

// refusal is the answer to a connection past max_connections.
var refusal = []byte("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\nContent-Length: " + strconv.Itoa(len(refusalBody)) + "\r\n\r\n" + refusalBody)

const refusalBody = "the proxy is at its connection limit; retry\n"

// throttled logs msg at most once a second, with the number of times it
// was not logged since.
func (l *limitListener) throttled(msg string, fields ...zap.Field) {
	now := l.now()
	l.mu.Lock()
	if last, ok := l.logged[msg]; ok && now.Sub(last) < time.Second {
		l.suppressed[msg]++
		l.mu.Unlock()
		return
	}
	n := l.suppressed[msg]
	l.logged[msg], l.suppressed[msg] = now, 0
	l.mu.Unlock()
	l.log.Error(msg, append(fields, zap.Int("suppressed", n))...)
}

// limitConn is a connection counted against the bound until closed.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

// Close closes the connection and gives its place back, once.
func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// SyscallConn returns the socket, for the HTTP/1.1 front's wait for a
// request (internal/h1 reads it itself, and parks an idle connection in
// an epoll set): a limitConn reads nothing ahead of its own.
func (c *limitConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// CloseWrite half-closes the connection, for the WebSocket tunnel.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
