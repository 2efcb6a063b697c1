package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// lateAfter is how far behind its intended instant a request may be
// written before it counts as sent late (its latency counts the delay
// either way).
const lateAfter = time.Millisecond

// drainFor bounds the wait for the last answers of a run.
const drainFor = 10 * time.Second

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
	lag    time.Duration // from its intended instant to its being written
	end    time.Duration // when its answer had been read, from the run's start
	status int           // the answer's status; 0 if there was none
}

// measurement sums up the measured part of one run.
type measurement struct {
	requests  int             // requests scheduled in the measured window
	latencies []time.Duration // of those answered 200, from the intended instant to the answer's end, sorted
	failed    int             // not answered, or not 200
	lags      []time.Duration // how far behind its instant each was written, sorted
	late      int             // written more than lateAfter behind its instant
	achieved  float64         // answers 200 per second, from the first one's end to the last one's
	cpu       cpuTimes        // of the processes measured, over the window and the drain
	cpuSpan   time.Duration   // the time between the two readings of cpu
	peakConns int             // connections open at once, at most
	poolFull  int             // requests that waited for a connection, all maxConns being busy
	others    float64         // the share of the machine's CPU time other work took meanwhile (set by the caller)
	steal     float64         // the share the hypervisor took (set by the caller)
}

// summarise computes the measurement of the requests first.. of out, the
// outcomes of a schedule at rate (the requests before first warm up).
func summarise(out []outcome, first int, rate float64) measurement {
	m := measurement{requests: len(out) - first}
	firstEnd, lastEnd := time.Duration(math.MaxInt64), time.Duration(0)
	for i := first; i < len(out); i++ {
		o := out[i]
		at := instant(i, rate)
		if o.status != http.StatusOK {
			m.failed++
		} else {
			m.latencies = append(m.latencies, o.end-at)
			firstEnd, lastEnd = min(firstEnd, o.end), max(lastEnd, o.end)
		}
		if o.lag > lateAfter {
			m.late++
		}
		m.lags = append(m.lags, o.lag)
	}
	slices.Sort(m.latencies)
	slices.Sort(m.lags)
	if n := len(m.latencies); n > 1 && lastEnd > firstEnd {
		m.achieved = float64(n-1) / (lastEnd - firstEnd).Seconds()
	}
	return m
}

// load is one open-loop run against one HTTP server: GET /bench at a
// fixed rate, for warm and then dur, whatever the answers.
type load struct {
	addr      string
	rate      float64
	warm, dur time.Duration
	maxConns  int                      // the pool's limit; at least 1
	cpu       func() (cpuTimes, error) // the measured processes' CPU time; nil for none
}

// cpuTimes are the CPU times of the proxy and of the upstream.
type cpuTimes struct{ proxy, upstream time.Duration }

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

// run sends the schedule and returns the measured part: every request is
// written at its instant on an idle connection of the pool, on a new one
// when none is idle (up to maxConns), and only when all maxConns are busy
// does it wait. Its latency is counted from its intended instant whatever
// held it back (no coordinated omission). The dispatcher runs on a thread
// of its own that sleeps in the kernel to each instant (pacer), while the
// readers take the answers on another P: the generator needs GOMAXPROCS ≥ 2.
func (l load) run() (measurement, error) {
	if l.maxConns < 1 || l.rate <= 0 || l.dur <= 0 {
		return measurement{}, errors.New("load: needs a rate, a duration and at least one connection")
	}
	first := count(l.warm, l.rate)
	n := count(l.warm+l.dur, l.rate)
	r := &runner{load: l, out: make([]outcome, n), idle: make(chan *conn, l.maxConns),
		req: fmt.Appendf(nil, "GET /bench HTTP/1.1\r\nHost: %s\r\nUser-Agent: openloop\r\n\r\n", l.addr)}
	defer r.shutdown()
	// A few connections to start with, opened before the first instant.
	r.start = time.Now().Add(5 * time.Millisecond)
	for range min(4, l.maxConns) {
		c, err := r.dial(jobNone)
		if err != nil {
			return measurement{}, err
		}
		r.idle <- c
	}
	cpu0, t0, err := r.dispatch(first)
	if err != nil {
		return measurement{}, err
	}
	for deadline := time.Now().Add(drainFor); r.finished.Load() < int64(n) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	var cpu1 cpuTimes
	if l.cpu != nil {
		if cpu1, err = l.cpu(); err != nil {
			return measurement{}, err
		}
	}
	span := time.Since(t0)
	r.shutdown()
	m := summarise(r.out, first, l.rate)
	m.cpu = cpuTimes{cpu1.proxy - cpu0.proxy, cpu1.upstream - cpu0.upstream}
	m.cpuSpan = span
	m.peakConns = int(r.peak.Load())
	m.poolFull = r.poolFull
	return m, nil
}

// dispatch writes every request at its instant and returns the measured
// processes' CPU times at the first measured one, and when it read them.
func (r *runner) dispatch(first int) (cpuTimes, time.Time, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p := newPacer()
	defer p.stop()
	var cpu0 cpuTimes
	var t0 time.Time
	for i := range r.out {
		at := r.start.Add(instant(i, r.rate))
		p.sleepUntil(at)
		if i == first && r.cpu != nil {
			var err error
			if cpu0, err = r.cpu(); err != nil {
				return cpuTimes{}, t0, err
			}
			t0 = time.Now()
		}
		c := r.take(i)
		if c == nil {
			r.out[i].lag = time.Since(at)
			r.finished.Add(1) // failed: no connection
			continue
		}
		r.out[i].lag = time.Since(at)
		if _, err := c.nc.Write(r.req); err != nil {
			c.close() // its reader counts the request failed
		}
	}
	return cpu0, t0, nil
}

// take returns a connection with request i assigned to it: an idle one,
// a new one, or (the pool full) the first to become idle; nil if none
// could be had.
func (r *runner) take(i int) *conn {
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
			c, err := r.dial(int64(i))
			if err != nil {
				return nil
			}
			return c
		}
		r.poolFull++
		t := time.NewTimer(drainFor)
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

// dial opens a connection with job (a request's index, or jobNone for an
// idle one the caller puts in r.idle) and starts its reader.
func (r *runner) dial(job int64) (*conn, error) {
	nc, err := net.Dial("tcp", r.addr)
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
// keepalive_requests), it opens another in its place.
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
			c.job.Store(jobNone)
			r.idle <- c
			continue
		}
		// Closed, broken or answering nothing asked: this reader stops,
		// failing the request in flight if there is one. An idle c is in
		// r.idle, whose taker counts it out (assign).
		c.close()
		if c.job.Swap(jobDead) >= 0 {
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
	nc, err := net.Dial("tcp", r.addr)
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
