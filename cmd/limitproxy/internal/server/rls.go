package server

import (
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/rls"
)

// rlsListener is [rls]'s listener and the gRPC server serving it.
type rlsListener struct {
	ln  net.Listener
	srv *grpc.Server
}

// listenRLS, with [rls] listen, opens Envoy's rate limit service
// (docs/envoy.md) on its own listener, bounded to max_connections like
// the proxy's, and serves it until the process closes: then calls in
// flight get shutdown_timeout to finish.
func (p *process) listenRLS() error {
	c := p.cfg.RLS
	if c.Listen == "" {
		return nil
	}
	srv, err := rls.New(rls.Options{Handler: p.handler, Config: c, Logger: p.log.Named("rls")})
	if err != nil {
		return err
	}
	tcp, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("rls: listen %s: %w", c.Listen, err)
	}
	if c.ClientCAFile == "" && !loopback(c.Listen) {
		p.log.Warn("the rate limit service listens beyond loopback without client certificates: anyone who reaches it can spend any key's quota, or get any key banned; set rls.client_ca_file or keep it where only Envoy reaches",
			zap.String("listen", c.Listen))
	}
	ln := newLimitListener(tcp, p.maxConnections(), false, p.log.Named("rls"))
	p.rls = &rlsListener{ln: ln, srv: srv}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := rls.Serve(srv, ln); err != nil {
			p.log.Error("rls: serve", zap.Error(err))
		}
	}()
	p.onClose(func() {
		stopped := make(chan struct{})
		go func() { srv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(p.cfg.Server.ShutdownTimeout):
			srv.Stop()
			<-stopped
		}
		<-done
	})
	return nil
}
