package rlsload

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitproxy/limitproxy/bench/internal/loadgen"
	"github.com/limitproxy/limitproxy/bench/internal/proc"
	"github.com/limitproxy/limitproxy/bench/internal/stats"
)

// shouldRateLimit is the method's full name, as the generated client
// calls it.
const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// OpenOptions of one open-loop run.
type OpenOptions struct {
	Rate    float64       // calls per second, evenly spaced
	Dur     time.Duration // the schedule's length
	Timeout time.Duration // per call, from its intended instant
}

// OpenResult of one open-loop run. Latency counts from each call's
// intended instant, not from when it was sent: a late send (the generator
// or the server behind) is latency (no coordinated omission).
type OpenResult struct {
	Calls, Errors   int
	Descriptors     int // descriptors decided (of calls without error)
	P50, P90, P99   time.Duration
	Max             time.Duration
	Elapsed         time.Duration // from the first instant to the last answer
	DecisionsPerSec float64       // descriptors decided per second of Elapsed
	// Late is the 99th percentile of a call's lag behind its instant when
	// written: the generator's own delay (the dispatcher's wake-up), part
	// of the latency.
	Late       time.Duration
	FirstError string
}

// Framed is a stream of calls framed once (Frame), for OpenLoop to send
// again and again without encoding them.
type Framed [][]byte

// FrameStream frames stream's calls for OpenLoop.
func FrameStream(stream []*rlsv3.RateLimitRequest) (Framed, error) {
	f := make(Framed, len(stream))
	for i, req := range stream {
		b, err := Frame(req)
		if err != nil {
			return nil, err
		}
		f[i] = b
	}
	return f, nil
}

// answer is what is read of a RateLimitResponse.
type answer struct {
	code     rlsv3.RateLimitResponse_Code
	statuses int
}

// rawCodec reads answers.
type rawCodec struct{}

var errNoStatus = errors.New("an answer without descriptor statuses")

// errTimeout is a call's error when no answer came by its deadline.
var errTimeout = errors.New("no answer by the deadline")

// OpenLoop sends calls of stream (cycling through it) on conns (in turn:
// the calls spread over the connections) at o.Rate per second for o.Dur,
// each written at its intended instant whatever the answers to the ones
// before, and waits for the last answer or its timeout. The dispatcher
// sleeps on a thread of its own (proc.Pacer) and writes every call due
// when it wakes, one write per connection; the connections' readers time
// the answers. No goroutine per call, no message encoded or decoded: the
// generator costs a small part of what the server does per call.
func OpenLoop(ctx context.Context, conns []*Conn, stream Framed, o OpenOptions) OpenResult {
	n := loadgen.Count(o.Dur, o.Rate)
	lat := make([]time.Duration, n)
	late := make([]time.Duration, n)
	var (
		res      OpenResult
		answers  tally
		answered atomic.Int64
		allDone  = make(chan struct{})
	)
	start := time.Now().Add(10 * time.Millisecond)
	sent := n
	end := func(i, statuses int, _ bool, err error) {
		lat[i] = time.Since(start.Add(loadgen.Instant(i, o.Rate)))
		answers.add(statuses, err)
		if int(answered.Add(1)) == n {
			close(allDone)
		}
	}
	// The dispatcher's thread holds its P while it sleeps in the kernel
	// (a system call, not a park): with one P, the connections' readers
	// would wait for the runtime to take it back (up to 10 ms for the
	// network poller), and the answers with them. A second P, even on
	// one core, keeps them running.
	if prev := runtime.GOMAXPROCS(0); prev < 2 {
		runtime.GOMAXPROCS(2)
		defer runtime.GOMAXPROCS(prev)
	}
	pacer := proc.NewPacer()
	for i := 0; i < n; {
		pacer.SleepUntil(start.Add(loadgen.Instant(i, o.Rate)))
		if ctx.Err() != nil {
			sent = i
			break
		}
		// Every call due by now, then one write per connection.
		now := time.Since(start)
		for ; i < n && loadgen.Instant(i, o.Rate) <= now; i++ {
			late[i] = now - loadgen.Instant(i, o.Rate)
			conns[i%len(conns)].Send(stream[i%len(stream)], i, end)
		}
		for _, c := range conns {
			c.Flush()
		}
	}
	pacer.Stop()
	if sent < n {
		// Cancelled: the calls not sent count as answered.
		if int(answered.Add(int64(n-sent))) == n {
			close(allDone)
		}
	}
	deadline := start.Add(loadgen.Instant(max(sent-1, 0), o.Rate) + o.Timeout)
	t := time.NewTimer(time.Until(deadline))
	select {
	case <-allDone:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	for _, c := range conns {
		c.Abandon(errTimeout)
	}
	<-allDone
	res.Elapsed = time.Since(start)
	res.Calls, res.Errors, res.Descriptors = sent, int(answers.errs.Load()), int(answers.descs.Load())
	res.FirstError = answers.firstError()
	lat, late = lat[:sent], late[:sent]
	if sent > 0 {
		slices.Sort(lat)
		slices.Sort(late)
		res.P50, res.P90, res.P99, res.Max = stats.Percentile(lat, 0.5), stats.Percentile(lat, 0.9), stats.Percentile(lat, 0.99), lat[sent-1]
		res.Late = stats.Percentile(late, 0.99)
		res.DecisionsPerSec = float64(res.Descriptors) / res.Elapsed.Seconds()
	}
	return res
}

// tally counts a run's answers: the descriptors decided by those without
// error, the errors, and the first error's text. Safe for concurrent use.
type tally struct {
	descs, errs atomic.Int64
	mu          sync.Mutex
	first       string // guarded by mu
}

// add counts one answer: statuses descriptors decided, or the error err.
func (t *tally) add(statuses int, err error) {
	if err != nil {
		t.errs.Add(1)
		t.noteFirst(err)
		return
	}
	t.descs.Add(int64(statuses))
}

// noteFirst keeps err as the first error if none came before it.
func (t *tally) noteFirst(err error) {
	t.mu.Lock()
	if t.first == "" {
		t.first = err.Error()
	}
	t.mu.Unlock()
}

// firstError returns the first error's text, "" if none.
func (t *tally) firstError() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.first
}

// ClosedLoop sends calls of stream (cycling through it) on conns, conc
// in flight at once (spread over the connections), each sent when one
// before is answered, until calls have been answered: the throughput
// the server sustains, with the latency of each call from its sending.
// Like OpenLoop, it frames the calls once and reads only the answers'
// codes; Result.Sequence is left empty (Run keeps the order of codes).
func ClosedLoop(ctx context.Context, conns []*Conn, stream Framed, calls, conc int, timeout time.Duration) Result {
	conc = max(min(conc, calls), 1)
	lat := make([]time.Duration, calls)
	sentAt := make([]time.Time, calls)
	var (
		res      Result
		answers  tally
		next     atomic.Int64
		answered atomic.Int64
		overs    atomic.Int64
		allDone  = make(chan struct{})
	)
	var end func(i, statuses int, over bool, err error)
	send := func(first bool) {
		i := int(next.Add(1) - 1)
		if i >= calls {
			return
		}
		if ctx.Err() != nil {
			end(i, 0, false, ctx.Err())
			return
		}
		c := conns[i%len(conns)]
		sentAt[i] = time.Now()
		c.Send(stream[i%len(stream)], i, end)
		if first {
			c.Flush()
		} else {
			// On the reader, which must not wait for the socket.
			c.FlushSoon()
		}
	}
	end = func(i, statuses int, over bool, err error) {
		if !sentAt[i].IsZero() {
			lat[i] = time.Since(sentAt[i])
		}
		if over {
			overs.Add(1)
		}
		answers.add(statuses, err)
		if int(answered.Add(1)) == calls {
			close(allDone)
			return
		}
		send(false)
	}
	start := time.Now()
	for range conc {
		send(true)
	}
	t := time.NewTimer(timeout + time.Duration(calls)*timeout/time.Duration(conc))
	select {
	case <-allDone:
	case <-t.C:
		// Stuck: stop sending, fail what is in flight, count what was
		// never sent as failed.
		if claimed := int(next.Swap(int64(calls))); claimed < calls {
			answers.errs.Add(int64(calls - claimed))
			if int(answered.Add(int64(calls-claimed))) == calls {
				close(allDone)
			}
		}
		for _, c := range conns {
			c.Abandon(errTimeout)
		}
		select {
		case <-allDone:
		case <-time.After(timeout):
		}
		answers.noteFirst(errTimeout)
	}
	t.Stop()
	res.Elapsed = time.Since(start)
	res.FirstError = answers.firstError()
	res.Calls, res.Errors, res.Descriptors = calls, int(answers.errs.Load()), int(answers.descs.Load())
	res.OverLimit = int(overs.Load())
	res.OK = calls - res.Errors - res.OverLimit
	slices.Sort(lat)
	res.P50, res.P99, res.Max = stats.Percentile(lat, 0.5), stats.Percentile(lat, 0.99), lat[calls-1]
	res.DecisionsPerSec = float64(res.Descriptors) / res.Elapsed.Seconds()
	res.CallsPerSec = float64(res.Calls) / res.Elapsed.Seconds()
	return res
}
