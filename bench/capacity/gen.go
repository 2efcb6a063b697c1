package main

// The open-loop generator is bench/openloop's (gen.go there), adapted:
// every request has a deadline, its intended instant plus the client
// timeout, after which its connection is closed and it counts as timed
// out; the pool is sized for every request of a timeout's worth being in
// flight at once; and the outcomes are returned whole, for the caller to
// summarise over a window or second by second.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// instant returns the intended send time of request i (from 0) of a
// schedule at rate per second, as an offset from the schedule's start:
// evenly spaced, computed from i rather than accumulated, so that the
// schedule does not drift.
func instant(i int, rate float64) time.Duration {
	return time.Duration(math.Round(float64(i) * float64(time.Second) / rate))
}

// count returns how many instants of a schedule at rate fall before d:
// the index of the first one at or after d.
func count(d time.Duration, rate float64) int {
	n := max(int(d.Seconds()*rate)-1, 0)
	for instant(n, rate) < d {
		n++
	}
	return n
}

// outcome is what became of one request of a run.
type outcome struct {
	lag      time.Duration // from its intended instant to its being written
	end      time.Duration // when its answer had been read, or it failed, from the run's start
	status   int           // the answer's status; 0 if there was none
	timedOut bool          // no answer by its deadline (its intended instant plus the timeout)
}

// load is one open-loop run against one HTTP server: GET /work at a
// fixed rate, for warm and then dur, whatever the answers, each request
// given up timeout after its intended instant.
type load struct {
	addr      string
	rate      float64
	warm, dur time.Duration
	timeout   time.Duration
	maxConns  int                   // the pool's limit; at least 1
	onStart   func(start time.Time) // called with the schedule's start before its first instant; nil: none
}

// result is a run's outcomes, one per request of the schedule in order,
// and what the generator saw of its own pool.
type result struct {
	out       []outcome
	first     int       // the first measured request; those before it warm up
	start     time.Time // the schedule's start: request i's intended instant is start+instant(i)
	peakConns int       // connections open at once, at most
	poolFull  int       // requests that waited for a connection, all maxConns being busy
}

// Values of conn.job besides a request's index.
const (
	jobNone = -1 // idle
	jobDead = -2 // its reader has stopped
)

// conn is one keep-alive connection of the pool: at most one request in
// flight, written by the dispatcher, its answer read by the conn's own
// reader goroutine.
type conn struct {
	mu  sync.Mutex // guards nc against the reader replacing it while it is closed
	nc  net.Conn
	br  *bufio.Reader
	job atomic.Int64 // the request in flight, jobNone or jobDead
}

func (c *conn) close() {
	c.mu.Lock()
	c.nc.Close()
	c.mu.Unlock()
}

// runner is the state of one run.
type runner struct {
	load
	req      []byte
	start    time.Time
	out      []outcome
	idle     chan *conn // connections with nothing in flight, oldest first
	open     atomic.Int64
	peak     atomic.Int64
	poolFull int          // written by the dispatcher only
	finished atomic.Int64 // requests answered or failed
	closing  atomic.Bool
	mu       sync.Mutex
	conns    []*conn
	readers  sync.WaitGroup
}

// run sends the schedule and returns every request's outcome: each is
// written at its instant on an idle connection of the pool, on a new one
// when none is idle (up to maxConns), and only when all maxConns are busy
// does it wait. Its latency is counted from its intended instant whatever
// held it back (no coordinated omission), and it is given up (its
// connection closed) at its deadline, the instant plus the timeout. The
// dispatcher runs on a thread of its own that sleeps in the kernel to
// each instant (pacer), while the readers take the answers on another P:
// the generator needs GOMAXPROCS ≥ 2.
func (l load) run() (result, error) {
	if l.maxConns < 1 || l.rate <= 0 || l.dur <= 0 || l.timeout <= 0 {
		return result{}, errors.New("load: needs a rate, a duration, a timeout and at least one connection")
	}
	first := count(l.warm, l.rate)
	n := count(l.warm+l.dur, l.rate)
	r := &runner{load: l, out: make([]outcome, n), idle: make(chan *conn, l.maxConns),
		req: fmt.Appendf(nil, "GET /work HTTP/1.1\r\nHost: %s\r\nUser-Agent: capacity\r\n\r\n", l.addr)}
	defer r.shutdown()
	// A few connections to start with, opened before the first instant.
	r.start = time.Now().Add(5 * time.Millisecond)
	for range min(4, l.maxConns) {
		c, err := r.dial(jobNone, r.start.Add(l.timeout))
		if err != nil {
			return result{}, err
		}
		r.idle <- c
	}
	if l.onStart != nil {
		l.onStart(r.start)
	}
	r.dispatch()
	// Every request is over by its deadline; a little more for the
	// readers to notice theirs.
	for deadline := time.Now().Add(l.timeout + time.Second); r.finished.Load() < int64(n) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	r.shutdown()
	return result{out: r.out, first: first, start: r.start, peakConns: int(r.peak.Load()), poolFull: r.poolFull}, nil
}

// dispatch writes every request at its instant, with its deadline on
// its connection.
func (r *runner) dispatch() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p := newPacer()
	defer p.stop()
	for i := range r.out {
		at := r.start.Add(instant(i, r.rate))
		p.sleepUntil(at)
		deadline := at.Add(r.timeout)
		c := r.take(i, deadline)
		r.out[i].lag = time.Since(at)
		if c == nil {
			r.out[i].end = time.Since(r.start)
			r.out[i].timedOut = !time.Now().Before(deadline)
			r.finished.Add(1) // failed: no connection
			continue
		}
		// The reader, blocked in a read meanwhile, is woken at the
		// deadline if no answer has come.
		c.nc.SetDeadline(deadline)
		if _, err := c.nc.Write(r.req); err != nil {
			c.close() // its reader counts the request failed
		}
	}
}

// take returns a connection with request i assigned to it: an idle one,
// a new one, or (the pool full) the first to become idle; nil if none
// could be had by deadline.
func (r *runner) take(i int, deadline time.Time) *conn {
	for {
		select {
		case c := <-r.idle:
			if r.assign(c, i) {
				return c
			}
			continue
		default:
		}
		if r.open.Load() < int64(r.maxConns) {
			c, err := r.dial(int64(i), deadline)
			if err != nil {
				return nil
			}
			return c
		}
		r.poolFull++
		t := time.NewTimer(time.Until(deadline))
		select {
		case c := <-r.idle:
			t.Stop()
			if r.assign(c, i) {
				return c
			}
		case <-t.C:
			return nil
		}
	}
}

// assign gives request i to c, taken from the idle connections, unless
// c's reader stopped while it waited there: then c is discarded, and
// counted out of the open connections here. (So the idle channel never
// holds more than the open connections, at most its capacity.)
func (r *runner) assign(c *conn, i int) bool {
	if c.job.CompareAndSwap(jobNone, int64(i)) {
		return true
	}
	r.open.Add(-1)
	return false
}

// dial opens a connection by deadline with job (a request's index, or
// jobNone for an idle one the caller puts in r.idle) and starts its
// reader.
func (r *runner) dial(job int64, deadline time.Time) (*conn, error) {
	nc, err := net.DialTimeout("tcp", r.addr, time.Until(deadline))
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc, br: bufio.NewReader(nc)}
	c.job.Store(job)
	r.mu.Lock()
	r.conns = append(r.conns, c)
	r.mu.Unlock()
	r.peak.Store(max(r.peak.Load(), r.open.Add(1)))
	r.readers.Add(1)
	go r.read(c)
	return c, nil
}

// read reads c's answers, one per request written, and records each. When
// the server closes the connection after an answer, it opens another in
// its place. A request unanswered at its deadline ends the connection
// (HTTP/1.1 has no other way to give up a request) and this reader.
func (r *runner) read(c *conn) {
	defer r.readers.Done()
	for {
		resp, err := http.ReadResponse(c.br, nil)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		end := time.Since(r.start)
		if i := c.job.Load(); err == nil && i >= 0 {
			r.out[i].end, r.out[i].status = end, resp.StatusCode
			r.finished.Add(1)
			if resp.Close && !r.replace(c) {
				c.job.Store(jobDead)
				c.close()
				r.open.Add(-1)
				return
			}
			// No deadline while idle; the dispatcher sets the next
			// request's after taking c from r.idle.
			c.nc.SetDeadline(time.Time{})
			c.job.Store(jobNone)
			r.idle <- c
			continue
		}
		// Timed out, closed, broken or answering nothing asked: this
		// reader stops, failing the request in flight if there is one.
		// An idle c is in r.idle, whose taker counts it out (assign).
		c.close()
		if i := c.job.Swap(jobDead); i >= 0 {
			r.out[i].end = end
			r.out[i].timedOut = errors.Is(err, os.ErrDeadlineExceeded)
			r.finished.Add(1)
			r.open.Add(-1)
		}
		return
	}
}

// replace gives c a new connection in place of the one the server closed.
func (r *runner) replace(c *conn) bool {
	if r.closing.Load() {
		return false
	}
	nc, err := net.DialTimeout("tcp", r.addr, r.timeout)
	if err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.closing.Load() { // shutdown has closed, or is about to close, c
		nc.Close()
		return false
	}
	c.nc.Close()
	c.nc = nc
	c.br.Reset(nc)
	return true
}

// shutdown closes every connection and waits for the readers; it may be
// called more than once.
func (r *runner) shutdown() {
	r.closing.Store(true)
	r.mu.Lock()
	for _, c := range r.conns {
		c.close()
	}
	r.mu.Unlock()
	r.readers.Wait()
}
