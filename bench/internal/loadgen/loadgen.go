// Package loadgen is the open-loop load generator of bench/openloop and
// bench/capacity: GET requests to one HTTP server at a fixed rate,
// whatever the answers, each written at its intended instant on a pool of
// keep-alive connections that grows as needed, its latency counted from
// that instant (no coordinated omission), and, given a timeout, given up
// at a deadline. A run returns every request's outcome, for the caller to
// summarise.
package loadgen

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitproxy/limitproxy/bench/internal/proc"
)

// drainFor bounds, in a run without a timeout, the wait for a connection
// when the pool is full and the wait for the last answers.
const drainFor = 10 * time.Second

// Instant returns the intended send time of request i (from 0) of a
// schedule at rate per second, as an offset from the schedule's start:
// evenly spaced, computed from i rather than accumulated, so that the
// schedule does not drift.
func Instant(i int, rate float64) time.Duration {
	return time.Duration(math.Round(float64(i) * float64(time.Second) / rate))
}

// Count returns how many instants of a schedule at rate fall before d:
// the index of the first one at or after d.
func Count(d time.Duration, rate float64) int {
	n := max(int(d.Seconds()*rate)-1, 0)
	for Instant(n, rate) < d {
		n++
	}
	return n
}

// Outcome is what became of one request of a run.
type Outcome struct {
	Lag      time.Duration // from its intended instant to its being written
	End      time.Duration // when its answer had been read, or it failed, from the run's start
	Status   int           // the answer's status; 0 if there was none
	TimedOut bool          // no answer by its deadline (its intended instant plus the timeout)
}

// Load is one open-loop run against one HTTP server: GET Path with the
// given User-Agent at a fixed rate, for Warm and then Dur, whatever the
// answers.
type Load struct {
	Addr            string
	Path, UserAgent string
	Rate            float64
	Warm, Dur       time.Duration
	// Timeout, if positive, gives up each request that long after its
	// intended instant (its deadline): its connection is closed and it
	// counts as timed out. Zero: requests wait for their answers, and
	// the run for the last ones at most 10 s.
	Timeout  time.Duration
	MaxConns int // the pool's limit; at least 1
	// OnStart, if not nil, is called with the schedule's start before its
	// first instant.
	OnStart func(start time.Time)
	// OnMeasure, if not nil, is called at the first measured request's
	// instant (the first after Warm), before it is written, on the
	// dispatcher's thread; an error ends the run.
	OnMeasure func() error
	// OnDrained, if not nil, is called when every request has been
	// answered or has failed (or the wait for them is over), before the
	// connections are closed; an error ends the run.
	OnDrained func() error
}

// Result is a run's outcomes, one per request of the schedule in order,
// and what the generator saw of its own pool.
type Result struct {
	Out       []Outcome
	First     int       // the first measured request; those before it warm up
	Start     time.Time // the schedule's start: request i's intended instant is Start+Instant(i)
	PeakConns int       // connections open at once, at most
	PoolFull  int       // requests that waited for a connection, all MaxConns being busy
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
	Load
	req      []byte
	start    time.Time
	out      []Outcome
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

// Run sends the schedule and returns every request's outcome: each is
// written at its instant on an idle connection of the pool, on a new one
// when none is idle (up to MaxConns), and only when all MaxConns are busy
// does it wait. Its latency is counted from its intended instant whatever
// held it back (no coordinated omission), and, with a Timeout, it is
// given up (its connection closed) at its deadline, the instant plus the
// Timeout. The dispatcher runs on a thread of its own that sleeps in the
// kernel to each instant (proc.Pacer), while the readers take the answers
// on another P: the generator needs GOMAXPROCS ≥ 2.
func (l Load) Run() (Result, error) {
	if l.MaxConns < 1 || l.Rate <= 0 || l.Dur <= 0 || l.Timeout < 0 {
		return Result{}, errors.New("load: needs a rate, a duration and at least one connection")
	}
	first := Count(l.Warm, l.Rate)
	n := Count(l.Warm+l.Dur, l.Rate)
	r := &runner{Load: l, out: make([]Outcome, n), idle: make(chan *conn, l.MaxConns),
		req: fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\n\r\n", l.Path, l.Addr, l.UserAgent)}
	defer r.shutdown()
	// A few connections to start with, opened before the first instant.
	r.start = time.Now().Add(5 * time.Millisecond)
	for range min(4, l.MaxConns) {
		c, err := r.dial(jobNone, r.deadline(r.start))
		if err != nil {
			return Result{}, err
		}
		r.idle <- c
	}
	if l.OnStart != nil {
		l.OnStart(r.start)
	}
	if err := r.dispatch(first); err != nil {
		return Result{}, err
	}
	// With a timeout, every request is over by its deadline; a little
	// more for the readers to notice theirs.
	wait := drainFor
	if l.Timeout > 0 {
		wait = l.Timeout + time.Second
	}
	for deadline := time.Now().Add(wait); r.finished.Load() < int64(n) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if l.OnDrained != nil {
		if err := l.OnDrained(); err != nil {
			return Result{}, err
		}
	}
	r.shutdown()
	return Result{Out: r.out, First: first, Start: r.start, PeakConns: int(r.peak.Load()), PoolFull: r.poolFull}, nil
}

// deadline is that of a request intended at at: at plus the Timeout, or
// none (zero) without one.
func (r *runner) deadline(at time.Time) time.Time {
	if r.Timeout <= 0 {
		return time.Time{}
	}
	return at.Add(r.Timeout)
}

// dispatch writes every request at its instant, with its deadline if any
// on its connection, calling OnMeasure at the first measured one's.
func (r *runner) dispatch(first int) error {
	p := proc.NewPacer()
	defer p.Stop()
	for i := range r.out {
		at := r.start.Add(Instant(i, r.Rate))
		p.SleepUntil(at)
		if i == first && r.OnMeasure != nil {
			if err := r.OnMeasure(); err != nil {
				return err
			}
		}
		deadline := r.deadline(at)
		c := r.take(i, deadline)
		r.out[i].Lag = time.Since(at)
		if c == nil {
			r.out[i].End = time.Since(r.start)
			r.out[i].TimedOut = !deadline.IsZero() && !time.Now().Before(deadline)
			r.finished.Add(1) // failed: no connection
			continue
		}
		if !deadline.IsZero() {
			// The reader, blocked in a read meanwhile, is woken at the
			// deadline if no answer has come.
			c.nc.SetDeadline(deadline)
		}
		if _, err := c.nc.Write(r.req); err != nil {
			c.close() // its reader counts the request failed
		}
	}
	return nil
}

// take returns a connection with request i assigned to it: an idle one,
// a new one, or (the pool full) the first to become idle; nil if none
// could be had by deadline (without one, within 10 s).
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
		if r.open.Load() < int64(r.MaxConns) {
			c, err := r.dial(int64(i), deadline)
			if err != nil {
				return nil
			}
			return c
		}
		r.poolFull++
		wait := drainFor
		if !deadline.IsZero() {
			wait = time.Until(deadline)
		}
		t := time.NewTimer(wait)
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

// dialBy opens a connection to addr by deadline, if not zero.
func dialBy(addr string, deadline time.Time) (net.Conn, error) {
	if deadline.IsZero() {
		return net.Dial("tcp", addr)
	}
	return net.DialTimeout("tcp", addr, time.Until(deadline))
}

// dial opens a connection by deadline (if not zero) with job (a request's
// index, or jobNone for an idle one the caller puts in r.idle) and starts
// its reader.
func (r *runner) dial(job int64, deadline time.Time) (*conn, error) {
	nc, err := dialBy(r.Addr, deadline)
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
// the server closes the connection after an answer (nginx does after
// keepalive_requests), it opens another in its place. A request
// unanswered at its deadline ends the connection (HTTP/1.1 has no other
// way to give up a request) and this reader.
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
			r.out[i].End, r.out[i].Status = end, resp.StatusCode
			r.finished.Add(1)
			if resp.Close && !r.replace(c) {
				c.job.Store(jobDead)
				c.close()
				r.open.Add(-1)
				return
			}
			if r.Timeout > 0 {
				// No deadline while idle; the dispatcher sets the next
				// request's after taking c from r.idle.
				c.nc.SetDeadline(time.Time{})
			}
			c.job.Store(jobNone)
			r.idle <- c
			continue
		}
		// Timed out, closed, broken or answering nothing asked: this
		// reader stops, failing the request in flight if there is one.
		// An idle c is in r.idle, whose taker counts it out (assign).
		c.close()
		if i := c.job.Swap(jobDead); i >= 0 {
			r.out[i].End = end
			r.out[i].TimedOut = errors.Is(err, os.ErrDeadlineExceeded)
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
	var nc net.Conn
	var err error
	if r.Timeout > 0 {
		nc, err = net.DialTimeout("tcp", r.Addr, r.Timeout)
	} else {
		nc, err = net.Dial("tcp", r.Addr)
	}
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
