package server

import (
	"context"
	"fmt"
	"net"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/rlqs"
	"github.com/limitproxy/limitproxy/limiter/leases"
)

// listenRLQS, with [rlqs] listen, opens Envoy's rate limit quota service
// (docs/envoy.md) on its own listener, bounded to max_connections like
// the proxy's, and its face: a data face, drained with the proxy's (its
// streams ended first: they never end by themselves). Its leases come
// from the global tier over Redis, or, with the memory store, from one
// over it made for the service.
func (p *process) listenRLQS() error {
	c := p.cfg.RLQS
	if c.Listen == "" {
		return nil
	}
	ls := p.stores.leases
	if ls == nil {
		ls = leases.New(p.stores.memory, leases.Options{})
	}
	svc, err := rlqs.NewService(rlqs.Options{Handler: p.handler, Leases: ls, Config: c, Logger: p.log.Named("rlqs"), Now: p.now})
	if err != nil {
		return err
	}
	srv, err := rlqs.New(svc)
	if err != nil {
		return err
	}
	tcp, err := net.Listen("tcp", c.Listen)
	if err != nil {
		srv.Stop()
		return fmt.Errorf("rlqs: listen %s: %w", c.Listen, err)
	}
	if c.ClientCAFile == "" && !loopback(c.Listen) {
		p.log.Warn("the rate limit quota service listens beyond loopback without client certificates: anyone who reaches it can spend any key's quota; set rlqs.client_ca_file or keep it where only Envoy reaches",
			zap.String("listen", c.Listen))
	}
	p.rlqs.Store(svc)
	ln := newLimitListener(tcp, p.maxConnections("rlqs", costTLS), false, p.log.Named("rlqs"))
	p.addFace("rlqs", ln, &rlqsServer{grpcServer: newGRPCServer(srv), svc: svc}, true)
	return nil
}

// rlqsServer is the RLQS gRPC server as a faceServer: its Shutdown ends
// the streams, then stops gracefully.
type rlqsServer struct {
	*grpcServer
	svc *rlqs.Service
}

func (r *rlqsServer) Shutdown(ctx context.Context) error {
	r.svc.Drain()
	return r.grpcServer.Shutdown(ctx)
}
