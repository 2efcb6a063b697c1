package h1

import (
	"container/heap"
	"os"
	"sync"
	"syscall"
	"time"
)

// parker holds the connections parked by a server (idle.go): waiting,
// past shedAfter, for their next request with no goroutine of their
// own. Their sockets are in an epoll set of the parker's, which the
// runtime's poller watches for it as it watches a socket, so that one
// goroutine (run) waits for all of them; a timer wakes the one whose
// wait ends first. A connection is woken, once, by the first of: bytes
// (or its client's close) to read, the end of its wait, and Shutdown or
// Close; a new goroutine then goes on with it (serve), and reads or
// fails at once. The zero value is ready; its goroutine starts at the
// first park and ends at stop. Safe for concurrent use.
type parker struct {
	mu     sync.Mutex
	ep     int // the epoll set; -1 once stopped
	file   *os.File
	conns  map[int32]*conn // by the id their epoll event carries
	next   int32
	due    dueHeap // those whose wait ends, soonest first
	timer  *time.Timer
	at     time.Time // when timer fires; zero: not armed
	done   chan struct{}
	closed bool
}

// parks says that connections park here (on Linux).
const parks = true

// parked returns how many connections are parked.
func (s *Server) parked() int {
	s.parker.mu.Lock()
	defer s.parker.mu.Unlock()
	return len(s.parker.conns)
}

// park puts c in the epoll set, to be woken as parker says, and reports
// whether it did; c's goroutine must not touch c after a true, which
// another goroutine may already be serving.
func (s *Server) park(c *conn) bool {
	p := &s.parker
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || c.raw == nil || !p.startLocked() {
		return false
	}
	id := p.next
	for {
		if id++; id <= 0 {
			id = 1
		}
		if _, ok := p.conns[id]; !ok {
			break
		}
	}
	var err error
	if cerr := c.raw.Control(func(fd uintptr) {
		// Level-triggered, once: bytes that came before the park wake
		// it at once. The socket stays in the set once woken (the event
		// disarmed it), and a later park arms it again: one system call
		// a park. A socket leaves the set when it is closed, which every
		// wake but by an event leads to.
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: id}
		op, other := syscall.EPOLL_CTL_ADD, syscall.EPOLL_CTL_MOD
		if c.inSet {
			op, other = other, op
		}
		if err = syscall.EpollCtl(p.ep, op, int(fd), &ev); err == syscall.EEXIST || err == syscall.ENOENT {
			err = syscall.EpollCtl(p.ep, other, int(fd), &ev)
		}
	}); cerr != nil || err != nil {
		return false
	}
	c.inSet = true
	p.next = id
	c.parkID = id
	p.conns[id] = c
	c.dueIdx = -1
	if !c.waitEnd.IsZero() {
		heap.Push(&p.due, c)
		p.armLocked()
	}
	return true
}

// startLocked makes the epoll set and starts the goroutine that waits
// on it, the first time; false if it cannot (the caller then keeps its
// goroutine). Requires p.mu held.
func (p *parker) startLocked() bool {
	if p.file != nil {
		return true
	}
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return false
	}
	if err := syscall.SetNonblock(ep, true); err != nil {
		syscall.Close(ep)
		return false
	}
	f := os.NewFile(uintptr(ep), "h1-parked")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return false
	}
	p.ep, p.file = ep, f
	p.conns = map[int32]*conn{}
	p.done = make(chan struct{})
	go p.run(rc)
	return true
}

// run waits for parked connections' events until the set is closed
// (stop), and wakes each connection an event names.
func (p *parker) run(rc syscall.RawConn) {
	defer close(p.done)
	var events [128]syscall.EpollEvent
	var woken []*conn
	for {
		err := rc.Read(func(fd uintptr) bool {
			n, err := syscall.EpollWait(int(fd), events[:], 0)
			if err == syscall.EINTR {
				return false
			}
			if n <= 0 {
				return false // nothing yet: wait for the set to be readable
			}
			p.mu.Lock()
			for _, ev := range events[:n] {
				if c := p.conns[ev.Fd]; c != nil {
					p.removeLocked(c)
					woken = append(woken, c)
				}
			}
			p.mu.Unlock()
			return true
		})
		for i, c := range woken {
			p.resume(c)
			woken[i] = nil
		}
		woken = woken[:0]
		if err != nil {
			return // stopped
		}
	}
}

// expire, run by the timer, wakes the connections whose wait has ended.
func (p *parker) expire() {
	var woken []*conn
	p.mu.Lock()
	p.at = time.Time{}
	now := time.Now()
	for len(p.due) > 0 && !p.due[0].waitEnd.After(now) {
		c := p.due[0]
		p.removeLocked(c)
		woken = append(woken, c)
	}
	p.armLocked()
	p.mu.Unlock()
	for _, c := range woken {
		p.resume(c)
	}
}

// wake wakes c if it is parked (Shutdown or Close closed it).
func (s *Server) wake(c *conn) {
	p := &s.parker
	p.mu.Lock()
	parked := p.conns != nil && p.conns[c.parkID] == c
	if parked {
		p.removeLocked(c)
	}
	p.mu.Unlock()
	if parked {
		p.resume(c)
	}
}

// resume serves c, no longer parked (removeLocked), in a new
// goroutine, whose read of c's first bytes finds them, or its end of
// file, deadline or closing, at once.
func (p *parker) resume(c *conn) {
	go c.serve()
}

// removeLocked forgets c, parked. Its socket stays in the set: woken by
// an event, disarmed; else it is being closed. An event of a socket no
// longer parked names no connection, and run ignores it. Requires p.mu
// held.
func (p *parker) removeLocked(c *conn) {
	delete(p.conns, c.parkID)
	c.parkID = 0
	if c.dueIdx >= 0 {
		heap.Remove(&p.due, c.dueIdx)
	}
}

// armLocked sets the timer for the soonest end of a wait. Requires p.mu
// held.
func (p *parker) armLocked() {
	if len(p.due) == 0 {
		return
	}
	next := p.due[0].waitEnd
	if !p.at.IsZero() && !p.at.After(next) {
		return
	}
	p.at = next
	d := time.Until(next)
	if p.timer == nil {
		p.timer = time.AfterFunc(d, p.expire)
		return
	}
	p.timer.Reset(d)
}

// stopParker closes the parker's set and ends its goroutine (Close, or
// Shutdown once no connection is left), having woken any connection
// still parked; a park after it fails, and the connection keeps its
// goroutine.
func (s *Server) stopParker() {
	p := &s.parker
	p.mu.Lock()
	p.closed = true
	var woken []*conn
	for _, c := range p.conns {
		woken = append(woken, c)
	}
	for _, c := range woken {
		p.removeLocked(c)
	}
	f, done := p.file, p.done
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	for _, c := range woken {
		p.resume(c)
	}
	if f != nil {
		f.Close()
		<-done
	}
}

// dueHeap orders parked connections by the end of their wait.
type dueHeap []*conn

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].waitEnd.Before(h[j].waitEnd) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].dueIdx, h[j].dueIdx = i, j
}

func (h *dueHeap) Push(x any) {
	c := x.(*conn)
	c.dueIdx = len(*h)
	*h = append(*h, c)
}

func (h *dueHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	c.dueIdx = -1
	*h = old[:len(old)-1]
	return c
}
