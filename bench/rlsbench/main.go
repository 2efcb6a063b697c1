// Command rlsbench sends a stream of descriptors to an Envoy rate limit
// service (envoy.service.ratelimit.v3.RateLimitService, any server: the
// reference envoyproxy/ratelimit or limitproxy's [rls]) over gRPC without
// TLS, and reports the decisions per second, the latency (p50, p99, max)
// and the sequence of OK/OVER_LIMIT codes, one line per call.
//
//	rlsbench -addr 127.0.0.1:8081 -stream calls.txt [-n 10000] [-c 8] [-seq out.txt]
//
// With -c 1 (the default) calls go one after another in the stream's
// order, so that two servers given the same stream can be compared line
// by line (bench/rls.sh does). The summary is one line of key=value on
// stdout. Only loopback addresses are accepted.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/limitproxy/limitproxy/bench/internal/rlsload"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "the RLS server's gRPC `ADDRESS` (loopback only)")
	streamFile := flag.String("stream", "", "the descriptor stream `FILE` (one call per line: DOMAIN KEY=VALUE,... [KEY=VALUE,...])")
	n := flag.Int("n", 0, "calls to send, cycling through the stream (default: the stream once)")
	c := flag.Int("c", 1, "calls in flight at once (1: in the stream's order)")
	timeout := flag.Duration("timeout", 5*time.Second, "per call")
	seqFile := flag.String("seq", "", "write the sequence of codes to `FILE`, one line per call")
	flag.Parse()
	if err := mainErr(*addr, *streamFile, *n, *c, *timeout, *seqFile); err != nil {
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
		os.Exit(1)
	}
}

func mainErr(addr, streamFile string, n, c int, timeout time.Duration, seqFile string) error {
	if err := loopback(addr); err != nil {
		return err
	}
	if streamFile == "" {
		return fmt.Errorf("-stream is required")
	}
	f, err := os.Open(streamFile)
	if err != nil {
		return err
	}
	stream, err := rlsload.ParseStream(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", streamFile, err)
	}
	if n <= 0 {
		n = len(stream)
	}
	conn, err := dial(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res := rlsload.Run(ctx, rlsv3.NewRateLimitServiceClient(conn), stream, rlsload.Options{Calls: n, Concurrency: c, Timeout: timeout})
	fmt.Println(res.Summary(addr))
	if seqFile != "" {
		if err := os.WriteFile(seqFile, []byte(strings.Join(res.Sequence, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	if res.Errors == res.Calls {
		return fmt.Errorf("every call failed: %s", res.FirstError)
	}
	return nil
}

// dial opens a gRPC connection without TLS.
func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// loopback refuses an address that is not on 127.0.0.0/8 or ::1.
func loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%s: only loopback addresses", addr)
	}
	return nil
}
