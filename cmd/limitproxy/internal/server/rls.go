package server

import (
	"fmt"
	"net"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/rls"
)

// listenRLS, with [rls] listen, opens Envoy's rate limit service
// (docs/envoy.md) on its own listener, bounded to max_connections like
// the proxy's, and its face: a data face, drained with the proxy's.
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
		srv.Stop() // its stream workers
		return fmt.Errorf("rls: listen %s: %w", c.Listen, err)
	}
	if c.ClientCAFile == "" && !loopback(c.Listen) {
		p.log.Warn("the rate limit service listens beyond loopback without client certificates: anyone who reaches it can spend any key's quota, or get any key banned; set rls.client_ca_file or keep it where only Envoy reaches",
			zap.String("listen", c.Listen))
	}
	ln := newLimitListener(tcp, p.maxConnections("rls", costTLS), false, p.log.Named("rls"))
	p.addFace("rls", ln, newGRPCServer(srv), true)
	return nil
}
