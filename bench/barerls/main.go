// Command barerls is the floor of Envoy's rate limit service: a bare
// grpc-go server whose ShouldRateLimit answers every call OK with one
// status per descriptor and does nothing else: no matching, no key, no
// limiter, no log, no metrics. With -tuned (the default) it has the
// transport options limitproxy's [rls] server has
// (cmd/limitproxy/internal/rls.New, with [rls]'s default bounds: kept
// stream workers, a 1 KiB read buffer, static flow-control windows,
// readers that yield before each read); with -tuned=false, grpc-go's
// defaults. What limitproxy's [rls] spends above the tuned server is its
// own; what the server spends is gRPC's, HTTP/2's, protobuf's and the
// kernel's.
//
//	barerls [-listen 127.0.0.1:8081] [-tuned=false]
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"runtime"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

type service struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// ShouldRateLimit answers OK, one OK status per descriptor.
func (service) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: st}, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve on")
	tuned := flag.Bool("tuned", true, "limitproxy [rls]'s transport options (false: grpc-go's defaults)")
	flag.Parse()
	var ln net.Listener
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	var opts []grpc.ServerOption
	if *tuned {
		// rls.New's, with [rls]'s default max_message_bytes (64 KiB).
		opts = []grpc.ServerOption{
			grpc.MaxRecvMsgSize(64 << 10),
			grpc.NumStreamWorkers(uint32(max(16*runtime.GOMAXPROCS(0), 64))),
			grpc.ReadBufferSize(1 << 10),
			grpc.StaticStreamWindowSize(64<<10 + 5),
			grpc.StaticConnWindowSize(1 << 20),
		}
		ln = yieldListener{ln}
	}
	s := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(s, service{})
	log.Fatal(s.Serve(ln))
}

// yieldListener accepts yieldConns.
type yieldListener struct{ net.Listener }

func (l yieldListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return yieldConn{c}, nil
}

// yieldConn's reads first yield the processor, as rls's do.
type yieldConn struct{ net.Conn }

func (c yieldConn) Read(p []byte) (int, error) {
	runtime.Gosched()
	return c.Conn.Read(p)
}
