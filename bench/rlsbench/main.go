// Command rlsbench sends a stream of descriptors to an Envoy rate limit
// service (envoy.service.ratelimit.v3.RateLimitService, any server: the
// reference envoyproxy/ratelimit or limitproxy's [rls]) over gRPC without
// TLS, and reports the decisions per second, the latency (p50, p99, max)
// and the sequence of OK/OVER_LIMIT codes, one line per call.
//
//	rlsbench -addr 127.0.0.1:8081 -stream calls.txt [-n 10000] [-c 8] [-seq out.txt]
//	rlsbench -addr 127.0.0.1:8081 -stream calls.txt -rate 20000 [-for 2s] [-conns 4] [-pid PID]
//
// With -rate, an open loop instead (rlsload.OpenLoop): calls at that
// rate for -for, latency from each call's instant, and with -pid the
// server's CPU time per call beside this process's.
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

	"github.com/limitproxy/limitproxy/bench/internal/proc"
	"github.com/limitproxy/limitproxy/bench/internal/rlsload"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "the RLS server's gRPC `ADDRESS` (loopback only)")
	streamFile := flag.String("stream", "", "the descriptor stream `FILE` (one call per line: DOMAIN KEY=VALUE,... [KEY=VALUE,...])")
	n := flag.Int("n", 0, "calls to send, cycling through the stream (default: the stream once)")
	c := flag.Int("c", 1, "calls in flight at once (1: in the stream's order)")
	timeout := flag.Duration("timeout", 5*time.Second, "per call")
	seqFile := flag.String("seq", "", "write the sequence of codes to `FILE`, one line per call")
	rate := flag.Float64("rate", 0, "an open loop at `RATE` calls a second instead")
	openFor := flag.Duration("for", 2*time.Second, "the open loop's length")
	conns := flag.Int("conns", 4, "the open loop's connections")
	pid := flag.Int("pid", 0, "the server's `PID`: its CPU time per call in the open loop")
	flag.Parse()
	if *rate > 0 {
		if err := openLoop(*addr, *streamFile, *rate, *openFor, *conns, *pid, *timeout); err != nil {
			fmt.Fprintln(os.Stderr, "rlsbench:", err)
			os.Exit(1)
		}
		return
	}
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
	stream, err := rlsload.ReadStream(streamFile)
	if err != nil {
		return err
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

// openLoop runs rlsload.OpenLoop and prints its summary.
func openLoop(addr, streamFile string, rate float64, dur time.Duration, n, pid int, timeout time.Duration) error {
	if err := loopback(addr); err != nil {
		return err
	}
	stream, err := rlsload.ReadStream(streamFile)
	if err != nil {
		return err
	}
	framed, err := rlsload.FrameStream(stream)
	if err != nil {
		return err
	}
	var conns []*rlsload.Conn
	for range max(n, 1) {
		c, err := rlsload.Dial(addr)
		if err != nil {
			return err
		}
		defer c.Close()
		conns = append(conns, c)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	gen0, _ := proc.CPUTime(os.Getpid())
	var srv0, srv1 time.Duration
	if pid > 0 {
		srv0, _ = proc.CPUTime(pid)
	}
	r := rlsload.OpenLoop(ctx, conns, framed, rlsload.OpenOptions{Rate: rate, Dur: dur, Timeout: timeout})
	gen1, _ := proc.CPUTime(os.Getpid())
	if pid > 0 {
		srv1, _ = proc.CPUTime(pid)
	}
	per := func(d time.Duration) time.Duration { return d / time.Duration(max(r.Calls, 1)) }
	fmt.Printf("target=%s rate=%.0f calls=%d errors=%d descriptors=%d elapsed=%s decisions_per_sec=%.0f p50=%s p90=%s p99=%s max=%s late_p99=%s cpu_per_call_generator=%s cpu_per_call_server=%s\n",
		addr, rate, r.Calls, r.Errors, r.Descriptors, r.Elapsed.Round(time.Millisecond), r.DecisionsPerSec,
		r.P50.Round(time.Microsecond), r.P90.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Max.Round(time.Microsecond), r.Late.Round(time.Microsecond), per(gen1-gen0), per(srv1-srv0))
	if r.FirstError != "" {
		return fmt.Errorf("%d calls failed, the first: %s", r.Errors, r.FirstError)
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
