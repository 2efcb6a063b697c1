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
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/rlqs"
	"github.com/limitproxy/limitproxy/internal/h1"
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

// Addrs is where a running Server listens: a face's address is nil when
// it is off.
type Addrs struct {
	Proxy       net.Addr
	Redirect    net.Addr // [server.tls] http_listen
	Admin       net.Addr // [admin] listen
	ForwardAuth net.Addr // [forward_auth] listen
	RLS         net.Addr // [rls] listen
	RLQS        net.Addr // [rlqs] listen
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
// addresses once they accept connections. Each step acquires what it
// needs and registers its release with p.onClose; p.close releases it
// all, in reverse, once every goroutine started here has ended. Tests
// may pass hooks, which change p before the first step.
func runServer(ctx context.Context, path string, cfg *config.Config, stderr io.Writer, ready chan<- Addrs, version string, hooks ...func(*process)) error {
	p := openLogs(cfg, path, version, stderr)
	defer p.close()
	for _, h := range hooks { // tests' changes, none in a real run
		h(p)
	}
	for _, step := range []func() error{p.preflight, p.openStore, p.buildHandler, p.listenProxy, p.startTLS, p.listenAdmin, p.listenForwardAuth, p.listenRLS, p.listenRLQS} {
		if err := step(); err != nil {
			return err
		}
	}
	// Background work, stopped after the servers have drained.
	var wg sync.WaitGroup
	workers, stopWorkers := context.WithCancel(context.Background())
	p.onClose(func() {
		stopWorkers()
		wg.Wait()
	})
	for _, work := range p.workers() {
		wg.Go(func() { work(workers) })
	}
	// Every face's accept loop (face.go), each returning once drain
	// has stopped its face, or at once if it fails.
	served := make(chan error, len(p.faces)) // each sends once, never blocked
	for _, f := range p.faces {
		wg.Go(func() { served <- f.serve() })
	}
	failed := p.serve(ctx, served, ready)
	p.drain()
	return failed
}

// process is one run of a Server: what runServer's steps build, in the
// order they build it, and the releases they registered. runServer's
// goroutine sets every field before it starts the goroutines that read
// them, and none is set after.
type process struct {
	cfg     *config.Config // as started: what the listeners, store and logs are built from
	path    string
	version string
	closers []func() // run by close, last first

	level     zap.AtomicLevel
	log       *zap.Logger
	logFiles  []*logFile // [log] file and access_file, reopened on SIGUSR1
	access    *accessWriter
	accessLog *zap.Logger
	now       func() time.Time

	stores  *stores
	metrics *metrics
	// rlqs is Envoy's rate limit quota service, nil until listenRLQS
	// opens it (the metrics read it at each scrape).
	rlqs    atomic.Pointer[rlqs.Service]
	handler *proxy.Handler
	reload  *reloader

	// faces are the listeners and their servers, each registered by the
	// step that opened it (face.go).
	faces []*face

	ln  net.Listener // the proxy's, as srv serves it
	srv *http.Server
	// front serves plain HTTP/1.1 in front of srv; nil under TLS or with
	// [server] http1 = "net/http".
	front *h1.Server
	// With [server.tls] mode = "acme": the ACME manager.
	managed *acme
	// The admin server's timeouts: defaultAdminTimeouts.
	adminTimeouts adminTimeouts
	// memoryLimit finds the process's memory limit for maxConnections;
	// nil: findMemoryLimit's, from GOMEMLIMIT and the memory cgroup
	// (tests set another).
	memoryLimit func() (memoryLimit, bool)
}

// onClose registers f to run when the process closes, before every f
// registered earlier.
func (p *process) onClose(f func()) { p.closers = append(p.closers, f) }

// close runs the registered releases, last first.
func (p *process) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// openLogs starts the process for cfg with its logs, written to stderr:
// the log at the level [log] asks for (a reload can change it), and the
// access log, which goes through a buffer written out in batches, never
// on the request's time (accesslog.go).
func openLogs(cfg *config.Config, path, version string, stderr io.Writer) *process {
	p := &process{cfg: cfg, path: path, version: version, level: zap.NewAtomicLevelAt(levelOf(cfg.Log.Level)), adminTimeouts: defaultAdminTimeouts}
	out := zapcore.Lock(zapcore.AddSync(stderr)) // one line at a time, whoever writes
	// A file that cannot be opened leaves its lines on stderr: preflight
	// then refuses the start, naming it at its key (Preflight opens the
	// files too).
	if f := p.openLogFile(cfg.Log.File); f != nil {
		out = f
	}
	accessOut := out
	if f := p.openLogFile(cfg.Log.AccessFile); f != nil {
		accessOut = f
	}
	p.log = newLogger(cfg.Log, p.level, out)
	p.onClose(func() { p.log.Sync() })
	p.access = newAccessWriter(accessOut)
	p.onClose(func() { p.access.Close() })
	p.accessLog = newLogger(cfg.Log, p.level, zapcore.AddSync(p.access)).Named("access")
	p.now = proxy.MonotonicClock()
	return p
}

// openLogFile opens the log file at path and has p close it last; nil for
// no path, or a file that cannot be opened.
func (p *process) openLogFile(path string) *logFile {
	if path == "" {
		return nil
	}
	f, err := openLogFile(path)
	if err != nil {
		return nil
	}
	p.logFiles = append(p.logFiles, f)
	p.onClose(func() { f.close() })
	return f
}

// preflight checks, before anything is opened, everything the other
// steps will open (Preflight, as `limitproxy check -bind` does: each
// listen address is listened on and closed), so that a start fails with
// every problem at once, each at its key, rather than one per try.
func (p *process) preflight() error { return Preflight(p.cfg, PreflightOptions{Bind: true}) }

// openStore opens the [store].
func (p *process) openStore() error {
	// temp_dir first: the store is the first thing a failed start would
	// have to undo.
	if err := proxy.CheckTempDir(p.cfg.Server.TempDir); err != nil {
		return err
	}
	st, err := newStores(p.cfg.Store, p.log, p.now)
	if err != nil {
		return err
	}
	p.onClose(st.close)
	p.stores = st
	return nil
}

// buildHandler compiles the policies and builds the proxy's handler, its
// metrics and the reloader that swaps its policies.
func (p *process) buildHandler() error {
	set, err := policy.Compile(p.cfg, p.stores.decide, p.now())
	if err != nil {
		return err
	}
	p.metrics = newMetrics(p.stores, func() *reloadStatus { return p.reload.Status() }, string(p.cfg.Store.Backend), p.access, p.version)
	p.metrics.reg.MustRegister(newRLQSCollector(p.rlqs.Load))
	hasher, err := keyHasher(p.cfg.Admin, p.log)
	if err != nil {
		return err
	}
	var accessJSON io.Writer // the access logger's JSON lines, which the handler encodes itself
	if p.cfg.Log.Format != config.FormatConsole {
		accessJSON = p.access
	}
	p.handler, err = proxy.Open(set, proxy.Options{Logger: p.log, AccessLog: p.cfg.Log.Access, AccessLogger: p.accessLog, AccessJSON: accessJSON, Now: p.now,
		Metrics: p.metrics.proxy, Bans: p.stores.bans, Overrides: p.stores.overrides, KeyHasher: hasher})
	if err != nil {
		return err
	}
	p.reload = newReloader(p.path, p.cfg, p.stores, p.handler, p.level, p.log, p.now)
	return nil
}

// keyHasher returns the key hash under [admin] key_hash_secret_env's
// secret, or, without one, under a secret drawn now (with a warning: the
// hashes the admin API, replay and the access log show then change at
// each restart).
func keyHasher(a config.Admin, log *zap.Logger) (*proxy.KeyHasher, error) {
	if a.KeyHashSecretEnv == "" {
		log.Warn("client key hashes use a secret drawn at start: they change at each restart and differ between instances; set admin.key_hash_secret_env to keep them")
		return proxy.NewKeyHasher(nil), nil
	}
	secret := os.Getenv(a.KeyHashSecretEnv)
	if len(secret) < proxy.MinKeyHashSecret {
		return nil, fmt.Errorf("admin.key_hash_secret_env: environment variable %s is unset or shorter than %d bytes", a.KeyHashSecretEnv, proxy.MinKeyHashSecret)
	}
	return proxy.NewKeyHasher([]byte(secret)), nil
}

// listenProxy opens the proxy's listener, bounded to max_connections,
// behind the PROXY protocol if asked, and its face: under TLS net/http's
// server serving HTTPS (startTLS gives it its certificates), which
// serves HTTP/2 and the handshake; else the HTTP/1.1 front in front of
// net/http's server, or with [server] http1 = "net/http" net/http's own.
func (p *process) listenProxy() error {
	s := p.cfg.Server
	tcp, err := net.Listen("tcp", s.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.Listen, err)
	}
	cost := uint64(costTLS)
	if s.TLS == nil {
		cost = costNetHTTP
		if s.HTTP1 == config.ImplLimitproxy {
			cost = costFront
		}
	}
	limited := newLimitListener(tcp, p.maxConnections("proxy", cost), s.TLS == nil, p.log.Named("listener"))
	p.ln = limited
	if s.ProxyProtocol {
		// Under TLS too: the PROXY header precedes the handshake. Who may
		// send one follows proxy_protocol_from as reloads change it.
		p.ln = proxyProtocolListener(limited, func() []netip.Prefix { return p.reload.Status().Config.Server.ProxyProtocolFrom }, s.ReadHeaderTimeout)
	}
	p.srv = &http.Server{
		Handler:           p.handler,
		ReadHeaderTimeout: s.ReadHeaderTimeout,
		IdleTimeout:       s.IdleTimeout,
		MaxHeaderBytes:    s.MaxHeaderBytes,
		ErrorLog:          mustStdLog(p.log.Named("http")),
	}
	if s.ProxyProtocol {
		p.srv.ConnContext = peerOnlyConn
	}
	if s.H2C && s.TLS == nil {
		// HTTP/2 with prior knowledge beside HTTP/1.1 (gRPC without TLS).
		// Never "Upgrade: h2c": that is filtered as every unlisted upgrade.
		var protocols http.Protocols
		protocols.SetHTTP1(true)
		protocols.SetUnencryptedHTTP2(true)
		p.srv.Protocols = &protocols
	}
	var srv faceServer = p.srv
	switch {
	case s.TLS != nil:
		srv = tlsServer{p.srv}
	case s.HTTP1 == config.ImplLimitproxy:
		p.front = h1.New(p.srv)
		srv = p.front
	}
	p.addFace("proxy", p.ln, srv, true)
	return nil
}

// maxConnections returns [server] max_connections, or if it is 0 the
// bound derived for the listener named listener, whose connections cost
// cost bytes each: the one the file-descriptor limit allows, or, where a
// memory limit is known (GOMEMLIMIT, the memory cgroup's) and allows
// fewer, that one (MemoryMaxConnections). It logs which.
func (p *process) maxConnections(listener string, cost uint64) int {
	if n := p.cfg.Server.MaxConnections; n != 0 {
		return n
	}
	nofile := fileLimit()
	n := DefaultMaxConnections(nofile)
	fields := []zap.Field{zap.String("listener", listener), zap.Uint64("nofile", nofile)}
	find := p.memoryLimit
	if find == nil {
		find = func() (memoryLimit, bool) { return findMemoryLimit("/", debug.SetMemoryLimit(-1)) }
	}
	if lim, ok := find(); ok {
		fields = append(fields, zap.Uint64("memory_limit", lim.bytes), zap.String("memory_limit_from", lim.source), zap.Uint64("per_connection", cost))
		if m := MemoryMaxConnections(lim.bytes, cost); m < n {
			p.log.Info("connection bound derived from the memory limit", append(fields, zap.Int("max_connections", m))...)
			return m
		}
	}
	p.log.Info("connection bound derived from the file-descriptor limit", append(fields, zap.Int("max_connections", n))...)
	return n
}

// startTLS, with [server.tls], gives the proxy's server its
// certificates: with mode = "files" the certificate is loaded now, so
// that a bad one stops the start with a clear error; with ACME, the
// certificates are obtained once the listeners answer (serve).
// http_listen gets the redirect face: a server that redirects to HTTPS
// and answers ACME's HTTP challenges.
func (p *process) startTLS() error {
	t := p.cfg.Server.TLS
	if t == nil {
		return nil
	}
	var redirect *http.Server
	httpPort := 0
	if t.HTTPListen != "" {
		ln, err := net.Listen("tcp", t.HTTPListen)
		if err != nil {
			return fmt.Errorf("server.tls.http_listen %s: %w", t.HTTPListen, err)
		}
		// Its handler is set below, before anything serves.
		redirect = &http.Server{ReadHeaderTimeout: p.cfg.Server.ReadHeaderTimeout}
		p.addFace("redirect", ln, redirect, false)
		httpPort = ln.Addr().(*net.TCPAddr).Port
	}
	_, port, _ := net.SplitHostPort(p.ln.Addr().String())
	var handler http.Handler = redirectToHTTPS(port)
	switch t.Mode {
	case config.TLSFiles:
		certs, err := loadCertFiles(t.CertFile, t.KeyFile, p.log)
		if err != nil {
			return err
		}
		p.srv.TLSConfig = &tls.Config{GetCertificate: certs.get, MinVersion: tls.VersionTLS12}
	case config.TLSACME:
		managed, err := newACME(t, p.ln.Addr().(*net.TCPAddr).Port, httpPort, p.log)
		if err != nil {
			return err
		}
		p.onClose(managed.stop)
		p.managed = managed
		p.srv.TLSConfig = managed.tlsConfig()
		handler = managed.challenge(handler)
	}
	if redirect != nil {
		redirect.Handler = handler
	}
	return nil
}

// listenAdmin, with [admin] listen, opens the admin listener and its
// face: the API (behind the token of token_env, if set) behind the
// guard (adminguard.go).
func (p *process) listenAdmin() error {
	a := p.cfg.Admin
	if a.Listen == "" {
		return nil
	}
	token, err := secretEnv(a.TokenEnv)
	if err != nil {
		return fmt.Errorf("admin.token_env: %w", err)
	}
	ln, err := net.Listen("tcp", a.Listen)
	if err != nil {
		return fmt.Errorf("admin: listen %s: %w", a.Listen, err)
	}
	if token == "" && !loopback(a.Listen) {
		p.log.Warn("admin API listens beyond loopback without a token: anyone who reaches it can reload the config and reset clients; set admin.token_env",
			zap.String("listen", a.Listen))
	}
	log := p.log.Named("admin")
	p.addFace("admin", ln, &http.Server{
		Handler:           newAdminGuard(a.Listen, a.AllowedHosts).wrap(adminHandler(p.reload, p.stores, p.metrics, token, log)),
		ReadHeaderTimeout: p.adminTimeouts.readHeader,
		ReadTimeout:       p.adminTimeouts.read,
		WriteTimeout:      p.adminTimeouts.write,
		IdleTimeout:       p.adminTimeouts.idle,
		ErrorLog:          mustStdLog(log),
	}, false)
	return nil
}

// workers returns the background work runServer runs until the servers
// have drained: the memory store's janitor, the upkeep of the penalty box
// and of the overrides, the config file's and the JWKS file's watchers,
// the dashboard's history and the SIGHUP handler.
func (p *process) workers() []func(ctx context.Context) {
	st := p.stores
	work := []func(context.Context){func(ctx context.Context) { st.memory.Run(ctx) }, st.runBans, st.runOverrides}
	if w := p.watchConfig(); w != nil {
		work = append(work, w)
	}
	if w := p.watchJWKS(); w != nil {
		work = append(work, w)
	}
	if w := p.watchReopen(); w != nil {
		work = append(work, w)
	}
	if p.cfg.Admin.Listen != "" {
		// Only for the dashboard, on the admin listener (history.go).
		work = append(work, func(ctx context.Context) { p.metrics.history.run(ctx, p.now) })
	}
	return append(work, p.watchSignals())
}

// watchConfig returns the work of watching the config file, which
// reloads it on each change, or nil without a file or if it cannot be
// watched (SIGHUP and the admin API still reload it). Watching starts
// here, before serve reports ready, so that no change made after that is
// missed.
func (p *process) watchConfig() func(ctx context.Context) {
	if p.path == "" {
		return nil
	}
	w, err := config.NewWatcher(p.path, 0, p.log, func() { p.reload.reload("file") })
	if err != nil {
		p.log.Error("cannot watch the config file; reload with SIGHUP or the admin API", zap.Error(err))
		return nil
	}
	return func(ctx context.Context) { w.Run(ctx) }
}

// watchSignals returns the work of reloading the config file on each
// SIGHUP until ctx is done; the signal is caught from now on.
func (p *process) watchSignals() func(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	p.onClose(func() { signal.Stop(hup) })
	return func(ctx context.Context) {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				p.reload.reload("sighup")
			}
		}
	}
}

// serve waits, the faces accepting, for ACME's certificates if any (the
// listeners answer the CA's challenges now), then says the proxy is ready
// and serves until ctx is done or a face's accept loop ends (served,
// which names the face). It returns what stopped it other than ctx.
func (p *process) serve(ctx context.Context, served <-chan error, ready chan<- Addrs) error {
	if p.managed != nil {
		if err := p.managed.obtain(ctx); err != nil {
			return err
		}
	}
	// Started: every listener accepts, certificates are in hand.
	warnEscapes(p.log, p.cfg)
	p.log.Info("limitproxy started", zap.String("listen", p.ln.Addr().String()), zap.String("config", p.cfg.File),
		zap.Int("policies", len(p.cfg.Policies)), zap.String("version", p.version))
	if ready != nil {
		ready <- p.addrs()
	}
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		return nil
	}
}
