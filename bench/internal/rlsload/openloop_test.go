package rlsload

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// slowRLS answers OK to every descriptor after delay.
type slowRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	delay time.Duration
}

func (s slowRLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	time.Sleep(s.delay)
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.Descriptors {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return resp, nil
}

func serve(t *testing.T, delay time.Duration) rlsv3.RateLimitServiceClient {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, slowRLS{delay: delay})
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// TestOpenLoopSendsOnSchedule: every call of the schedule is sent and
// answered, whatever the server's pace, and a server that takes 50 ms a
// call does not slow the sending down (an open loop), so the latency is
// at least that.
func TestOpenLoopSendsOnSchedule(t *testing.T) {
	stream, err := ParseStream(strings.NewReader("d k=a\nd k=b,j=c\n"))
	if err != nil {
		t.Fatal(err)
	}
	client := serve(t, 50*time.Millisecond)
	start := time.Now()
	r := OpenLoop(context.Background(), []rlsv3.RateLimitServiceClient{client, client}, stream, OpenOptions{Rate: 1000, Dur: 300 * time.Millisecond, Timeout: 5 * time.Second})
	took := time.Since(start)
	if r.Calls != 300 || r.Errors != 0 || r.Descriptors != 300 {
		t.Fatalf("calls %d, errors %d (%s), descriptors %d: want 300, 0, 300", r.Calls, r.Errors, r.FirstError, r.Descriptors)
	}
	if r.P50 < 50*time.Millisecond {
		t.Errorf("p50 %s: below the server's 50 ms a call", r.P50)
	}
	// Closed, one at a time, 300 calls would take 15 s; sent on schedule,
	// 0.3 s plus the last one's 50 ms (generous margin for a busy machine).
	if took > 5*time.Second {
		t.Errorf("the run took %s: calls waited for answers", took)
	}
}
