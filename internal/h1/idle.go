package h1

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

// What a connection holds while it waits for its next request, or its
// first (issue 40): a client may keep a connection open and idle for as
// long as idle_timeout allows (read_header_timeout before its first), and a proxy holds many more of those than it
// serves requests at once, so the front holds as little for them as it
// can:
//
//   - no buffer: the read buffer is taken from a pool once a request's
//     first bytes are there, and given back when the connection has
//     read all it was sent; the write buffers are taken for an answer
//     and given back once it is out. On a connection that offers its
//     socket (syscall.Conn: a TCP connection, the proxy's counted one)
//     the wait reads the socket itself, so that the buffer is taken
//     only when the read finds bytes (no read more per request); on
//     another (behind the PROXY protocol, say) the wait reads into a
//     pooled buffer until it has lasted shedAfter, and then into a few
//     bytes of its own.
//   - a small stack: a wait that lasts shedAfter goes on in a new
//     goroutine, whose stack is the runtime's smallest (2 KiB, as the
//     goroutines parked so have small frames), and the goroutine that
//     served the earlier requests, whose stack their handlers grew (to
//     8 KiB and more) and the garbage collector would shrink only by
//     halves, ends. A goroutine started before shedAfter costs 2–6 µs
//     of CPU with the stack the next request grows again, so a
//     connection that sends requests more often than that keeps its
//     goroutine.
//   - none of its last request: that wait drops the response, the
//     request head and their header maps, which the connection kept
//     from one request to the next, and it allocates them again (a few
//     hundred bytes) at its next request.
//
// What is left (measured by TestIdleConnectionMemory): the conn, its
// net.Conn and context, the goroutine and its 2 KiB stack; under
// 4 KiB.

// shedAfter is how long a wait for a request lasts before its goroutine
// is replaced or parked and the request state dropped: a Server's shed,
// which New sets from it (the tests' -h1.shed flag changes it, to run
// every test with every wait shed at once).
var shedAfter = time.Second

// writeBuffers are an answer's buffers: its head with a small body,
// and what a handler writes before the head is committed.
type writeBuffers struct {
	out     [outBuffer]byte
	pending [bufferBeforeChunking]byte
}

var (
	readPool  = sync.Pool{New: func() any { return new([readBuffer]byte) }}
	writePool = sync.Pool{New: func() any { return new(writeBuffers) }}
)

// takeRead gives c a read buffer, if it holds none.
func (c *conn) takeRead() {
	if c.buf == nil {
		c.buf = readPool.Get().(*[readBuffer]byte)[:]
	}
}

// releaseRead gives c's read buffer back; it must hold nothing unread.
func (c *conn) releaseRead() {
	if c.buf != nil {
		readPool.Put((*[readBuffer]byte)(c.buf))
		c.buf = nil
	}
}

// takeWrite gives c its write buffers for an answer, if it holds none.
func (c *conn) takeWrite() {
	if c.wb == nil {
		c.wb = writePool.Get().(*writeBuffers)
		c.out = c.wb.out[:0]
	}
}

// releaseWrite gives c's write buffers back, once the answer is out
// (or will never be).
func (c *conn) releaseWrite() {
	if c.wb != nil {
		writePool.Put(c.wb)
		c.wb, c.out = nil, nil
	}
}

// rawInit sets c.raw when c's connection offers its socket. A
// connection that offers it must not hold bytes read ahead of its own
// (net.TCPConn does not; a wrapper that buffers must not offer it).
func (c *conn) rawInit() {
	sc, ok := c.rwc.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	c.raw = rc
	c.rawFn = c.rawRead
}

// startWait sets the deadline of the wait for the first bytes of a
// request, st's: read_header_timeout from now for a connection's first
// (stateNew), idle_timeout (read_timeout when zero) for a later one
// (stateIdle). A wait that may outlast shedAfter gets shedAfter's
// deadline first (moved as setReadDeadline moves it), and then its own
// (shed).
func (c *conn) startWait(st int32) {
	var timeout time.Duration
	if st == stateNew {
		// A connection that sends nothing for a while (a client that
		// opens its connections ahead, or one that only holds them)
		// sheds and parks as an idle one does, until its
		// read_header_timeout.
		timeout = c.srv.fallback.ReadHeaderTimeout
	} else if timeout = c.srv.fallback.IdleTimeout; timeout == 0 {
		timeout = c.srv.fallback.ReadTimeout
	}
	now := time.Now()
	if timeout > 0 && timeout <= c.srv.shed {
		c.setReadDeadlineAt(now, timeout)
		c.waitEnd, c.early = c.deadline, false
		return
	}
	c.waitEnd = time.Time{}
	if timeout > 0 {
		c.waitEnd = now.Add(timeout)
	}
	c.setReadDeadlineAt(now, c.srv.shed)
	c.early = true
}

// readFirst reads the first bytes of a request, into a buffer taken
// once they are there (on a socket read here) or for the read; long
// says that the wait has outlasted shedAfter.
func (c *conn) readFirst(long bool) (int, error) {
	if c.raw != nil {
		c.w = 0
		if err := c.raw.Read(c.rawFn); err != nil {
			return 0, err
		}
		if c.w == 0 {
			return 0, io.EOF // or the read failed
		}
		return c.w, nil
	}
	if long {
		// The rest of a long wait (shed): a few bytes of its own, the
		// rest of the head read into the buffer after them.
		var first [16]byte
		n, err := c.rwc.Read(first[:])
		if n > 0 {
			c.takeRead()
			copy(c.buf, first[:n])
		}
		return n, err
	}
	c.takeRead()
	n, err := c.rwc.Read(c.buf)
	if n == 0 {
		c.releaseRead()
	}
	return n, err
}

// rawRead is readFirst's read of the socket fd, which RawConn.Read calls
// until it reports true, waiting for the socket to be readable after
// each false: it takes the buffer, reads, and gives the buffer back
// unless the read found bytes, which it counts in c.w (0: EOF, or the
// read failed).
func (c *conn) rawRead(fd uintptr) bool {
	c.takeRead()
	for {
		n, err := syscall.Read(int(fd), c.buf)
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			c.releaseRead()
			return false
		}
		if n > 0 {
			c.w = n
			return true
		}
		c.releaseRead()
		return true
	}
}

// shed decides what becomes of the wait st, whose read returned nothing
// and err: when err is shedAfter's deadline and the wait's own end has
// not come, it sets that end as the deadline, drops the request state,
// and parks c (readParked) or has serve go on with the wait in a new
// goroutine (readMoved); else the wait is over (readDone).
func (c *conn) shed(err error, st int32) int {
	if !c.early || !errors.Is(err, os.ErrDeadlineExceeded) || c.state.Load() != st {
		return readDone
	}
	c.early = false
	if !c.waitEnd.IsZero() && !time.Now().Before(c.waitEnd) {
		return readDone // its own end as well
	}
	c.rwc.SetReadDeadline(c.waitEnd)
	c.deadline = c.waitEnd
	c.resp, c.head, c.keys, c.wt = nil, nil, nil, nil
	c.moved = true
	if c.srv.park(c) {
		return readParked
	}
	return readMoved
}
