package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/rls"
)

// A face is one listener of the process and the server that serves it.
// The step that opens a listener registers its face (addFace) in
// process.faces, in the order the steps run:
//
//	name          opened by          data  what it serves
//	proxy         listenProxy        yes   the proxy (net/http or internal/h1; HTTPS under [server.tls])
//	redirect      startTLS           no    [server.tls] http_listen: redirects to HTTPS, ACME's HTTP challenges
//	admin         listenAdmin        no    [admin] listen: the admin API, metrics, dashboard
//	forward_auth  listenForwardAuth  yes   [forward_auth] listen: the handler's forward-auth endpoint
//	rls           listenRLS          yes   [rls] listen: Envoy's rate limit service (gRPC)
//
// Every face is then handled alike: runServer starts each one's accept
// loop (serve) once every step has run, an accept loop that fails stops
// the process as a stop signal would (with that error), Addrs lists
// the faces, and drain stops them in two rounds: the data faces, those
// that decide requests, together, then the others (drain says how).
//
// What a reload changes is the same for every face: the one
// proxy.Handler's policy set, which the proxy, forward auth and the RLS
// all decide with, swapped at once. No face keeps a policy set of its
// own. Beside it, each face reads at start what its listener was built
// from, which a reload does not change (reload lists it under
// requires_restart: restartOnly): the proxy its [server] listener keys
// (proxy_protocol_from follows reloads), the redirect [server.tls],
// the admin API [admin], forward auth its listen address ([forward_auth]
// trusted_senders, deny_status and max_wait are the handler's, and
// reload), the RLS every key of [rls] (its bounds and TLS).
//
// A new face (Envoy's quota service, say) is a step that opens its
// listener, builds a faceServer for it and calls addFace.
//
// Concurrency: the steps build and register every face on runServer's
// goroutine before any accept loop starts, and no face changes after;
// its accept loop, drain's goroutines and the process's close then use
// it concurrently, through faceServer's methods.
type face struct {
	name string       // as above: errors and logs name the face by it
	ln   net.Listener // srv serves it; closed when the process closes
	srv  faceServer
	// data marks a face that decides requests with the handler: drained
	// first, and the handler's queues closed if it overruns the budget.
	data bool
}

// faceServer is what serves a face. net/http's server, the HTTP/1.1
// front (internal/h1) and grpcServer are faceServers; each method is safe
// to call concurrently with the others, and Shutdown and Close more than
// once.
type faceServer interface {
	// Serve accepts connections on ln and serves them until Shutdown or
	// Close, returning then (whatever it returns), or until accepting
	// fails, returning why.
	Serve(ln net.Listener) error
	// Shutdown stops accepting and waits until the exchanges in flight
	// have ended, or ctx is done, whose error it then returns (the
	// exchanges go on).
	Shutdown(ctx context.Context) error
	// Close closes the listener and every connection at once.
	Close() error
}

// addFace registers the face name serving ln with srv; the process's
// close closes both (srv has nothing to close if it was stopped).
func (p *process) addFace(name string, ln net.Listener, srv faceServer, data bool) {
	f := &face{name: name, ln: ln, srv: srv, data: data}
	p.faces = append(p.faces, f)
	p.onClose(func() {
		f.srv.Close()
		f.ln.Close()
	})
}

// errServeEnded is a face's error when its accept loop returned nil
// without being stopped.
var errServeEnded = errors.New("stopped serving")

// serve runs f's accept loop. Its error, whatever ended it, names f.
func (f *face) serve() error {
	err := f.srv.Serve(f.ln)
	if err == nil {
		err = errServeEnded
	}
	return fmt.Errorf("%s: %w", f.name, err)
}

// addrs returns where the process listens.
func (p *process) addrs() Addrs {
	var a Addrs
	for _, f := range p.faces {
		addr := f.ln.Addr()
		switch f.name {
		case "proxy":
			a.Proxy = addr
		case "redirect":
			a.Redirect = addr
		case "admin":
			a.Admin = addr
		case "forward_auth":
			a.ForwardAuth = addr
		case "rls":
			a.RLS = addr
		case "rlqs":
			a.RLQS = addr
		}
	}
	return a
}

// drain stops every face within [server] shutdown_timeout, in two
// rounds. It runs on runServer's goroutine once serve has returned, with
// every face's accept loop running or returned.
//
//  1. The data faces (proxy, forward auth, RLS), together: each stops
//     accepting and lets the exchanges in flight, queued ones included,
//     finish. If the budget runs out first, the handler's queues are
//     closed: requests still queued are answered 503 and Retry-After
//     (forward auth likewise; RLS calls UNAVAILABLE), and the faces
//     still draining get a second more for those answers to go out.
//     Then every data face is closed, with whatever connections remain,
//     and the handler's idle upstream connections.
//  2. The others (admin, redirect), which served through round 1 so that
//     metrics can be scraped while requests finish: shut down within what
//     remains of the budget (none, if round 1 used it up), then closed.
func (p *process) drain() {
	p.log.Info("shutting down", zap.Duration("drain_budget", p.cfg.Server.ShutdownTimeout))
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Server.ShutdownTimeout)
	defer cancel()
	var data, others []*face
	for _, f := range p.faces {
		if f.data {
			data = append(data, f)
		} else {
			others = append(others, f)
		}
	}
	if late, err := shutdown(ctx, data); err != nil {
		p.handler.CloseQueues()
		answer, cancel := context.WithTimeout(context.Background(), time.Second)
		shutdown(answer, late)
		cancel()
		names := make([]string, len(late))
		for i, f := range late {
			names[i] = f.name
		}
		p.log.Warn("drain budget exhausted; queued requests answered 503, remaining connections closed", zap.Strings("faces", names), zap.Error(err))
	}
	closeFaces(data)
	p.handler.CloseIdleConnections()
	p.handler.Close()
	shutdown(ctx, others)
	closeFaces(others)
	p.log.Info("stopped")
}

// shutdown shuts every face of fs down at once, within ctx, and returns
// once each has returned: the faces ctx stopped first, and ctx's error
// if there are any.
func shutdown(ctx context.Context, fs []*face) (late []*face, err error) {
	errs := make([]error, len(fs))
	var wg sync.WaitGroup
	for i, f := range fs {
		wg.Go(func() { errs[i] = f.srv.Shutdown(ctx) })
	}
	wg.Wait()
	for i, f := range fs {
		if errs[i] != nil {
			late, err = append(late, f), errs[i]
		}
	}
	return late, err
}

// closeFaces closes each face of fs.
func closeFaces(fs []*face) {
	for _, f := range fs {
		f.srv.Close()
	}
}

// tlsServer is net/http's server serving HTTPS: its certificates come
// from its TLSConfig, set before Serve.
type tlsServer struct{ *http.Server }

// Serve serves HTTPS on ln.
func (s tlsServer) Serve(ln net.Listener) error { return s.ServeTLS(ln, "", "") }

// grpcServer is a gRPC server as a faceServer: its Shutdown is
// GracefulStop (GOAWAY to each connection, calls in flight finish), its
// Close Stop. Build it with newGRPCServer.
type grpcServer struct {
	srv     *grpc.Server
	once    sync.Once     // starts GracefulStop, or marks that Close came first
	stopped chan struct{} // closed once GracefulStop has returned, or by Close if it came first
}

func newGRPCServer(srv *grpc.Server) *grpcServer {
	return &grpcServer{srv: srv, stopped: make(chan struct{})}
}

// Serve serves ln until GracefulStop or Stop, returning nil then.
func (g *grpcServer) Serve(ln net.Listener) error { return rls.Serve(g.srv, ln) }

// Shutdown starts GracefulStop (once) and waits for it or ctx.
func (g *grpcServer) Shutdown(ctx context.Context) error {
	g.once.Do(func() {
		go func() {
			g.srv.GracefulStop()
			close(g.stopped)
		}()
	})
	select {
	case <-g.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the server at once, and returns once a GracefulStop under
// way has returned too (Stop ends it: the calls it waits for are
// canceled).
func (g *grpcServer) Close() error {
	g.srv.Stop()
	g.once.Do(func() { close(g.stopped) })
	<-g.stopped
	return nil
}
