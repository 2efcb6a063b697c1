// Package server runs limitproxy: the listeners (HTTP, HTTPS with ACME or
// certificate files, the admin API), the stores, live reload and the
// drain on stop, around the proxy's handler. cmd/limitproxy parses the
// command line and hands a configuration to New.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// mustStdLog adapts l to the *log.Logger http.Server wants, at warn level
// (its messages are about clients and connections, never routine).
func mustStdLog(l *zap.Logger) *stdlog.Logger {
	sl, err := zap.NewStdLogAt(l, zap.WarnLevel)
	if err != nil { // only for an invalid level, which WarnLevel is not
		return stdlog.New(io.Discard, "", 0)
	}
	return sl
}

// levelOf returns the zap level for a validated [log] level.
func levelOf(s config.LogLevel) zapcore.Level {
	l, err := zapcore.ParseLevel(string(s))
	if err != nil {
		return zapcore.InfoLevel
	}
	return l
}

// newLogger builds the zap logger [log] asks for, writing to out, at a
// level a reload can change.
func newLogger(c config.Log, level zap.AtomicLevel, out zapcore.WriteSyncer) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder
	if c.Format == config.FormatConsole {
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	} else {
		encoder = zapcore.NewJSONEncoder(enc)
	}
	return zap.New(zapcore.NewCore(encoder, out, level))
}

// Addrs is where a running Server listens. Admin is nil when the admin
// listener is off.
type Addrs struct {
	Proxy, Admin net.Addr
}

// Options configures a Server.
type Options struct {
	// Path is the file the configuration was read from: watched, and read
	// again on SIGHUP and POST /api/v1/reload. "" for a configuration that
	// has no file (the embedded example), which cannot be reloaded.
	Path string
	// Stderr receives the logs. nil means os.Stderr.
	Stderr io.Writer
	// Version is logged at start.
	Version string
}

// Server is limitproxy running one configuration: the proxy listener, the
// HTTPS redirect and ACME challenge listener, the admin listener with its
// metrics, live reload, and the drain on stop. Run it once.
type Server struct {
	cfg   *config.Config
	o     Options
	ready chan Addrs
}

// New returns a server for cfg, which Run starts.
func New(cfg *config.Config, o Options) (*Server, error) {
	if cfg == nil {
		return nil, errors.New("server: no configuration")
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	return &Server{cfg: cfg, o: o, ready: make(chan Addrs, 1)}, nil
}

// Ready receives the listeners' addresses once the server accepts
// connections (with ACME, once its certificates are obtained). It never
// receives if Run fails first.
func (s *Server) Ready() <-chan Addrs { return s.ready }

// Run serves until ctx is done, then stops accepting and lets requests in
// flight and in queues finish within shutdown_timeout; requests still
// queued then get 503. It returns nil after a clean stop, or the error that
// kept the server from starting or serving. Every goroutine it starts
// (servers, config watcher, SIGHUP handler, store janitor) has ended when
// it returns.
func (s *Server) Run(ctx context.Context) error {
	return runServer(ctx, s.o.Path, s.cfg, s.o.Stderr, s.ready, s.o.Version)
}

// LoadOptions are the checks a configuration file gets beyond its own:
// those of the store it selects. `check`, start-up and every reload use
// them.
func LoadOptions() config.Options {
	return config.Options{StoreChecks: map[config.Backend]func(limiter.Limit) error{config.BackendRedis: redisstore.Check}}
}

// runServer is Run: it runs the proxy for cfg, read from path, until ctx is
// done, then drains. If ready is not nil it receives the listeners'
// addresses once they accept connections.
func runServer(ctx context.Context, path string, cfg *config.Config, stderr io.Writer, ready chan<- Addrs, version string) error {
	level := zap.NewAtomicLevelAt(levelOf(cfg.Log.Level))
	out := zapcore.Lock(zapcore.AddSync(stderr)) // one line at a time, whoever writes
	log := newLogger(cfg.Log, level, out)
	defer log.Sync()
	// The access log goes through a buffer written out in batches, never
	// on the request's time (accesslog.go).
	access := newAccessWriter(out)
	defer access.Close()
	accessLog := newLogger(cfg.Log, level, zapcore.AddSync(access)).Named("access")

	now := proxy.MonotonicClock()
	st, err := newStores(cfg.Store, log, now)
	if err != nil {
		return err
	}
	defer st.close()
	set, err := policy.Compile(cfg, st.decide, now())
	if err != nil {
		return err
	}
	var reload *reloader
	m := newMetrics(st, func() *reloadStatus { return reload.Status() }, string(cfg.Store.Backend), access)
	handler := proxy.New(set, proxy.Options{Logger: log, AccessLog: cfg.Log.Access, AccessLogger: accessLog, Now: now, Metrics: m.proxy, Bans: st.bans, Overrides: st.overrides})
	reload = newReloader(path, cfg, st, handler, level, log, now)

	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Server.Listen, err)
	}
	maxConns := cfg.Server.MaxConnections
	if maxConns == 0 {
		nofile := fileLimit()
		maxConns = DefaultMaxConnections(nofile)
		log.Info("connection bound derived from the file-descriptor limit", zap.Uint64("nofile", nofile), zap.Int("max_connections", maxConns))
	}
	ln = newLimitListener(ln, maxConns, cfg.Server.TLS == nil, log.Named("listener"))
	defer ln.Close()
	if cfg.Server.ProxyProtocol {
		// Under TLS too: the PROXY header precedes the handshake. Who may
		// send one follows proxy_protocol_from as reloads change it.
		ln = proxyProtocolListener(ln, func() []netip.Prefix { return reload.Status().Config.Server.ProxyProtocolFrom }, cfg.Server.ReadHeaderTimeout)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		MaxHeaderBytes:    cfg.Server.MaxHeaderBytes,
		ErrorLog:          mustStdLog(log.Named("http")),
	}
	if cfg.Server.ProxyProtocol {
		srv.ConnContext = peerOnlyConn
	}
	if cfg.Server.H2C && cfg.Server.TLS == nil {
		// HTTP/2 with prior knowledge beside HTTP/1.1 (gRPC without TLS).
		// Never "Upgrade: h2c": that is filtered as every unlisted upgrade.
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv.Protocols = &p
	}
	// HTTPS ([server.tls] mode = "files"): the certificate is loaded now,
	// so that a bad one stops the start with a clear error.
	var redirect *http.Server
	var redirectLn net.Listener
	var managed *acme
	if t := cfg.Server.TLS; t != nil {
		if t.HTTPListen != "" {
			if redirectLn, err = net.Listen("tcp", t.HTTPListen); err != nil {
				return fmt.Errorf("server.tls.http_listen %s: %w", t.HTTPListen, err)
			}
			defer redirectLn.Close()
		}
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		var handler http.Handler = redirectToHTTPS(port)
		switch t.Mode {
		case config.TLSFiles:
			certs, err := loadCertFiles(t.CertFile, t.KeyFile, log)
			if err != nil {
				return err
			}
			srv.TLSConfig = &tls.Config{GetCertificate: certs.get, MinVersion: tls.VersionTLS12}
		case config.TLSACME:
			httpPort := 0
			if redirectLn != nil {
				httpPort = redirectLn.Addr().(*net.TCPAddr).Port
			}
			if managed, err = newACME(t, ln.Addr().(*net.TCPAddr).Port, httpPort, log); err != nil {
				return err
			}
			defer managed.stop()
			srv.TLSConfig = managed.tlsConfig()
			handler = managed.challenge(handler)
		}
		if redirectLn != nil {
			redirect = &http.Server{Handler: handler, ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout}
		}
	}
	var admin *http.Server
	var adminLn net.Listener
	if cfg.Admin.Listen != "" {
		token := ""
		if cfg.Admin.TokenEnv != "" {
			if token = os.Getenv(cfg.Admin.TokenEnv); token == "" {
				return fmt.Errorf("admin.token_env: environment variable %s is empty or unset", cfg.Admin.TokenEnv)
			}
		}
		if adminLn, err = net.Listen("tcp", cfg.Admin.Listen); err != nil {
			return fmt.Errorf("admin: listen %s: %w", cfg.Admin.Listen, err)
		}
		if token == "" && !loopback(cfg.Admin.Listen) {
			log.Warn("admin API listens beyond loopback without a token: anyone who reaches it can reload the config and reset clients; set admin.token_env",
				zap.String("listen", cfg.Admin.Listen))
		}
		defer adminLn.Close()
		api := adminHandler(reload, st, m, token)
		admin = &http.Server{
			Handler:           newAdminGuard(cfg.Admin.Listen, cfg.Admin.AllowedHosts).wrap(api),
			ReadHeaderTimeout: adminReadHeaderTimeout,
			ReadTimeout:       adminReadTimeout,
			WriteTimeout:      adminWriteTimeout,
			IdleTimeout:       adminIdleTimeout,
			ErrorLog:          mustStdLog(log.Named("admin")),
		}
	}

	// Background work, stopped after the servers have drained.
	var wg sync.WaitGroup
	workers, stopWorkers := context.WithCancel(context.Background())
	defer func() {
		stopWorkers()
		wg.Wait()
	}()
	wg.Go(func() { st.memory.Run(workers) })
	wg.Go(func() { st.runBans(workers) })
	wg.Go(func() { st.runOverrides(workers) })
	if path != "" {
		// Watching starts here, before serve reports it is ready, so that
		// no change made after that is missed.
		w, err := config.NewWatcher(path, 0, log, func() { reload.reload("file") })
		if err != nil {
			log.Error("cannot watch the config file; reload with SIGHUP or the admin API", zap.Error(err))
		} else {
			wg.Go(func() { w.Run(workers) })
		}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	wg.Go(func() {
		for {
			select {
			case <-workers.Done():
				return
			case <-hup:
				reload.reload("sighup")
			}
		}
	})

	served := make(chan error, 3)
	if srv.TLSConfig != nil {
		wg.Go(func() { served <- srv.ServeTLS(ln, "", "") })
	} else {
		wg.Go(func() { served <- srv.Serve(ln) })
	}
	if redirect != nil {
		wg.Go(func() { served <- redirect.Serve(redirectLn) })
	}
	if admin != nil {
		wg.Go(func() { served <- admin.Serve(adminLn) })
	}
	var failed error
	if managed != nil {
		// The listeners answer the CA's challenges now; get the
		// certificates before saying the proxy is ready.
		if err := managed.obtain(ctx); err != nil {
			failed = err
		}
	}
	addrs := Addrs{Proxy: ln.Addr()}
	if adminLn != nil {
		addrs.Admin = adminLn.Addr()
	}
	if failed == nil {
		// Started: every listener accepts, certificates are in hand.
		log.Info("limitproxy started", zap.String("listen", ln.Addr().String()), zap.String("config", cfg.File),
			zap.Int("policies", len(cfg.Policies)), zap.String("version", version))
		if ready != nil {
			ready <- addrs
		}
		select {
		case err := <-served:
			failed = fmt.Errorf("serve: %w", err)
		case <-ctx.Done():
		}
	}
	// Stop accepting; let requests in flight, queued ones included, finish
	// within shutdown_timeout.
	log.Info("shutting down", zap.Duration("drain_budget", cfg.Server.ShutdownTimeout))
	drain, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(drain); err != nil {
		// Requests still queued get 503 and Retry-After rather than a
		// closed connection; a moment for those answers to go out.
		handler.CloseQueues()
		answer, cancel := context.WithTimeout(context.Background(), time.Second)
		srv.Shutdown(answer)
		cancel()
		srv.Close()
		log.Warn("drain budget exhausted; queued requests answered 503, remaining connections closed", zap.Error(err))
	}
	handler.CloseIdleConnections()
	if admin != nil {
		admin.Close()
	}
	if redirect != nil {
		redirect.Close()
	}
	log.Info("stopped")
	return failed
}
