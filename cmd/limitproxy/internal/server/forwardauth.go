package server

import (
	"fmt"
	"net"
	"net/http"
)

// listenForwardAuth, with [forward_auth] listen, opens the forward-auth
// listener and its face: the proxy handler's forward-auth decision
// endpoint (docs/forward-auth.md), with the proxy listener's header
// timeout, size bound and connection bound (max_connections, counted
// apart: a flood of connections to one listener cannot starve the
// other).
func (p *process) listenForwardAuth() error {
	fa, s := p.cfg.ForwardAuth, p.cfg.Server
	if fa.Listen == "" {
		return nil
	}
	tcp, err := net.Listen("tcp", fa.Listen)
	if err != nil {
		return fmt.Errorf("forward_auth: listen %s: %w", fa.Listen, err)
	}
	ln := newLimitListener(tcp, p.maxConnections("forward_auth", costNetHTTP), true, p.log.Named("forward_auth"))
	p.addFace("forward_auth", ln, &http.Server{
		Handler:           p.handler.ForwardAuth(),
		ReadHeaderTimeout: s.ReadHeaderTimeout,
		IdleTimeout:       s.IdleTimeout,
		MaxHeaderBytes:    s.MaxHeaderBytes,
		ErrorLog:          mustStdLog(p.log.Named("forward_auth")),
	}, true)
	return nil
}
