package rlsload

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// slowRLS answers OK to every descriptor after delay.
type slowRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	delay time.Duration
}

func (s slowRLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.Domain == "error" {
		return nil, status.Error(codes.InvalidArgument, "domain error")
	}
	time.Sleep(s.delay)
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.Descriptors {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return resp, nil
}

// serve starts a slowRLS answering after delay, with the server's
// options, and returns a connection of Dial to it.
func serve(t testing.TB, delay time.Duration, opts ...grpc.ServerOption) *Conn {
	t.Helper()
	return dial(t, listen(t, slowRLS{delay: delay}, opts...))
}

// listen starts impl, with the server's options, on a loopback port
// until the test ends, and returns its address.
func listen(t testing.TB, impl rlsv3.RateLimitServiceServer, opts ...grpc.ServerOption) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(srv, impl)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return l.Addr().String()
}

// dial returns a connection of Dial to addr, closed when the test ends.
func dial(t testing.TB, addr string) *Conn {
	t.Helper()
	conn, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// frame parses the descriptor stream text (ParseStream) and frames it.
func frame(t testing.TB, text string) Framed {
	t.Helper()
	stream, err := ParseStream(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	framed, err := FrameStream(stream)
	if err != nil {
		t.Fatal(err)
	}
	return framed
}

// TestOpenLoopSendsOnSchedule: every call of the schedule is sent and
// answered, whatever the server's pace, and a server that takes 50 ms a
// call does not slow the sending down (an open loop), so the latency is
// at least that. The answers' statuses are counted from the raw answer
// (calls of one and of two descriptors).
func TestOpenLoopSendsOnSchedule(t *testing.T) {
	framed := frame(t, "d k=a\nd k=b,j=c k=d\n")
	conn := serve(t, 50*time.Millisecond)
	start := time.Now()
	r := OpenLoop(context.Background(), []*Conn{conn, conn}, framed, OpenOptions{Rate: 1000, Dur: 300 * time.Millisecond, Timeout: 5 * time.Second})
	took := time.Since(start)
	if r.Calls != 300 || r.Errors != 0 || r.Descriptors != 450 {
		t.Fatalf("calls %d, errors %d (%s), descriptors %d: want 300, 0, 450", r.Calls, r.Errors, r.FirstError, r.Descriptors)
	}
	if r.P50 < 50*time.Millisecond {
		t.Errorf("p50 %s: below the server's 50 ms a call", r.P50)
	}
	// Closed, one at a time, 300 calls would take 15 s; sent on schedule,
	// 0.3 s plus the last one's 50 ms (generous margin for a busy machine).
	if took > 5*time.Second {
		t.Errorf("the run took %s: calls waited for answers", took)
	}
	if n := conn.InFlight(); n != 0 {
		t.Errorf("%d calls still in flight after the run", n)
	}
}

// TestOpenLoopCountsTheServersQueue: a server that takes one call at a
// time (MaxConcurrentStreams 1), 20 ms each, answers 50 calls a second of
// the 500 due: the calls wait in its queue, and that wait is latency
// (from each call's instant, not from when the server took it): the last
// of 40 calls due within 80 ms is answered about 0.7 s after its instant.
func TestOpenLoopCountsTheServersQueue(t *testing.T) {
	framed := frame(t, "d k=a\n")
	conn := serve(t, 20*time.Millisecond, grpc.MaxConcurrentStreams(1))
	r := OpenLoop(context.Background(), []*Conn{conn}, framed, OpenOptions{Rate: 500, Dur: 80 * time.Millisecond, Timeout: 5 * time.Second})
	if r.Calls != 40 || r.Errors != 0 || r.Descriptors != 40 {
		t.Fatalf("calls %d, errors %d (%s), descriptors %d: want 40, 0, 40", r.Calls, r.Errors, r.FirstError, r.Descriptors)
	}
	if r.Max < 500*time.Millisecond {
		t.Errorf("max %s: the wait in the server's queue is not counted (40 calls of 20 ms one at a time, due within 80 ms)", r.Max)
	}
}

// TestOpenLoopTimesOut: calls the server has not answered by their
// deadline fail, and the run ends then.
func TestOpenLoopTimesOut(t *testing.T) {
	framed := frame(t, "d k=a\n")
	conn := serve(t, 2*time.Second)
	start := time.Now()
	r := OpenLoop(context.Background(), []*Conn{conn}, framed, OpenOptions{Rate: 100, Dur: 100 * time.Millisecond, Timeout: 300 * time.Millisecond})
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("the run took %s: want its calls' deadline, 0.4 s", took)
	}
	if r.Calls != 10 || r.Errors != 10 || r.Descriptors != 0 {
		t.Fatalf("calls %d, errors %d, descriptors %d: want 10, 10, 0", r.Calls, r.Errors, r.Descriptors)
	}
	if !strings.Contains(r.FirstError, errTimeout.Error()) {
		t.Errorf("first error %q: want %q", r.FirstError, errTimeout)
	}
}

// TestConnErrors: a call the server refuses ends with its gRPC status.
func TestConnErrors(t *testing.T) {
	conn := serve(t, 0)
	framed, err := FrameStream([]*rlsv3.RateLimitRequest{{Domain: "error"}})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	conn.Send(framed[0], 7, func(tag, statuses int, _ bool, err error) {
		if tag != 7 {
			err = fmt.Errorf("tag %d, want 7", tag)
		}
		got <- err
	})
	conn.Flush()
	if err := <-got; err == nil || !strings.Contains(err.Error(), "InvalidArgument") {
		t.Errorf("err %v: want InvalidArgument", err)
	}
}

// BenchmarkOpenLoop is an open loop at 20,000 calls a second for 1 s
// against a server in this process that answers at once: what a call
// costs the generator (and that server), and its allocations.
//
//	go test -run '^$' -bench OpenLoop -benchmem ./internal/rlsload
func BenchmarkOpenLoop(b *testing.B) {
	framed := frame(b, "d k=a\nd k=b\n")
	conn := serve(b, 0)
	b.ReportAllocs()
	for b.Loop() {
		r := OpenLoop(context.Background(), []*Conn{conn}, framed, OpenOptions{Rate: 20000, Dur: time.Second, Timeout: 5 * time.Second})
		if r.Errors > 0 {
			b.Fatal(r.FirstError)
		}
	}
}

// TestClosedLoop: every call is answered, never more than conc in
// flight (the server sees at most 3 at once), OVER_LIMIT answers
// counted.
func TestClosedLoop(t *testing.T) {
	framed := frame(t, "d k=a\nover k=b\n")
	var cur, peak atomic.Int64
	addr := listen(t, countingRLS{cur: &cur, peak: &peak})
	conns := []*Conn{dial(t, addr), dial(t, addr)}
	r := ClosedLoop(context.Background(), conns, framed, 200, 3, 5*time.Second)
	if r.Calls != 200 || r.Errors != 0 || r.Descriptors != 200 || r.OverLimit != 100 || r.OK != 100 {
		t.Fatalf("%s", r.Summary("test"))
	}
	if p := peak.Load(); p > 3 {
		t.Errorf("%d calls in flight at once: want at most 3", p)
	}
}

// countingRLS answers OVER_LIMIT to domain "over", OK to others, after
// 1 ms, counting the calls in flight.
type countingRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	cur, peak *atomic.Int64
}

func (s countingRLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	n := s.cur.Add(1)
	defer s.cur.Add(-1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	time.Sleep(time.Millisecond)
	code := rlsv3.RateLimitResponse_OK
	if req.Domain == "over" {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return &rlsv3.RateLimitResponse{OverallCode: code, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: code}}}, nil
}
