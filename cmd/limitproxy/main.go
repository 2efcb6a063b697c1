// Command limitproxy is a reverse proxy that enforces rate limits in front
// of HTTP upstreams. See README.md and SPEC §1 for its command line.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/limitproxy/limitproxy/internal/limiter/memstore"
	"github.com/limitproxy/limitproxy/internal/policy"
	"github.com/limitproxy/limitproxy/internal/proxy"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// usageError is a command-line mistake: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// exitCode prints err (one line per error) and maps it to SPEC §1's exit
// statuses: 0 clean stop, 1 configuration or start-up error, 2 usage.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, err)
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

const usage = `usage:
  limitproxy -config PATH          serve until SIGINT/SIGTERM
  limitproxy check -config PATH    validate a configuration and exit
  limitproxy demo                  run the example configuration against a local echo upstream
  limitproxy version               print version, Go version and commit`

// run is the whole program; main only maps its error to an exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "check":
			path, err := configFlag("check", args[1:], stderr)
			if err != nil {
				return err
			}
			return check(ctx, path, stdout)
		case "demo":
			if len(args) > 1 {
				return usageError{"demo takes no arguments\n" + usage}
			}
			return demo(ctx, stdout, stderr)
		case "version":
			fmt.Fprintln(stdout, versionString())
			return nil
		case "help", "-h", "-help", "--help":
			fmt.Fprintln(stdout, usage)
			return nil
		}
	}
	path, err := configFlag("limitproxy", args, stderr)
	if err != nil {
		return err
	}
	cfg, err := policy.Load(path)
	if err != nil {
		return err
	}
	return serve(ctx, path, cfg, stderr, nil)
}

// configFlag parses "-config PATH", which is required.
func configFlag(name string, args []string, stderr io.Writer) (string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("config", "", "configuration file")
	if err := fs.Parse(args); err != nil {
		return "", usageError{err.Error() + "\n" + usage}
	}
	if fs.NArg() > 0 {
		return "", usageError{fmt.Sprintf("unexpected argument %q\n%s", fs.Arg(0), usage)}
	}
	if *path == "" {
		return "", usageError{"-config PATH is required\n" + usage}
	}
	return *path, nil
}

// check validates a file as `nginx -t` does: a one-line summary, or every
// error as PATH:LINE:COL: message. It returns as soon as ctx is done
// (SIGINT, SIGTERM), whatever the file is doing.
func check(ctx context.Context, path string, stdout io.Writer) error {
	type loaded struct {
		cfg *policy.Config
		err error
	}
	done := make(chan loaded, 1)
	go func() {
		cfg, err := policy.Load(path)
		done <- loaded{cfg, err}
	}()
	var cfg *policy.Config
	select {
	case l := <-done:
		if l.err != nil {
			return l.err
		}
		cfg = l.cfg
	case <-ctx.Done():
		return fmt.Errorf("%s: check interrupted", path)
	}
	if _, err := cfg.Compile(memstore.New(memstore.Options{MaxKeys: 1}), time.Now()); err != nil {
		return err
	}
	limits := 0
	for _, p := range cfg.Policies {
		limits += len(p.Limits)
	}
	fmt.Fprintf(stdout, "%s: ok: %d policies, %d limits, %d upstreams, listen %s\n", path, len(cfg.Policies), limits, len(cfg.Upstreams), cfg.Server.Listen)
	return nil
}

func versionString() string {
	commit := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
	}
	return fmt.Sprintf("limitproxy %s (%s, commit %s)", version, runtime.Version(), commit)
}

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
func levelOf(s string) zapcore.Level {
	l, err := zapcore.ParseLevel(s)
	if err != nil {
		return zapcore.InfoLevel
	}
	return l
}

// newLogger builds the zap logger [log] asks for, writing to stderr, at a
// level a reload can change.
func newLogger(c policy.Log, level zap.AtomicLevel, stderr io.Writer) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder
	if c.Format == "console" {
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	} else {
		encoder = zapcore.NewJSONEncoder(enc)
	}
	return zap.New(zapcore.NewCore(encoder, zapcore.Lock(zapcore.AddSync(stderr)), level))
}

// listening is what serve sends on its ready channel: where it listens.
// Admin is nil when the admin listener is off.
type listening struct {
	Proxy, Admin net.Addr
}

// serve runs the proxy for cfg, read from path ("" for the embedded
// example, which cannot be reloaded), until ctx is done, then drains. It
// owns every goroutine it starts (servers, config watcher, SIGHUP handler,
// store janitor) and waits for each before it returns. If ready is not nil
// it receives the listeners' addresses once they accept connections.
func serve(ctx context.Context, path string, cfg *policy.Config, stderr io.Writer, ready chan<- listening) error {
	level := zap.NewAtomicLevelAt(levelOf(cfg.Log.Level))
	log := newLogger(cfg.Log, level, stderr)
	defer log.Sync()

	now := proxy.MonotonicClock()
	st, err := newStores(cfg.Store, log, now)
	if err != nil {
		return err
	}
	defer st.close()
	set, err := cfg.Compile(st.decide, now())
	if err != nil {
		return err
	}
	var reload *reloader
	m := newMetrics(st, func() *reloadStatus { return reload.Status() }, cfg.Store.Backend)
	handler := proxy.New(set, proxy.Options{Logger: log, AccessLog: cfg.Log.Access, Now: now, Metrics: m.proxy})
	reload = newReloader(path, cfg, st, handler, level, log, now)

	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Server.Listen, err)
	}
	defer ln.Close()
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		MaxHeaderBytes:    cfg.Server.MaxHeaderBytes,
		ErrorLog:          mustStdLog(log.Named("http")),
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
		case "files":
			certs, err := loadCertFiles(t.CertFile, t.KeyFile, log)
			if err != nil {
				return err
			}
			srv.TLSConfig = &tls.Config{GetCertificate: certs.get, MinVersion: tls.VersionTLS12}
		case "acme":
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
		admin = &http.Server{Handler: adminHandler(reload, st.ready, m, token), ReadHeaderTimeout: 5 * time.Second}
	}

	// Background work, stopped after the servers have drained.
	var wg sync.WaitGroup
	workers, stopWorkers := context.WithCancel(context.Background())
	defer func() {
		stopWorkers()
		wg.Wait()
	}()
	wg.Go(func() { st.memory.Run(workers) })
	if path != "" {
		// Watching starts here, before serve reports it is ready, so that
		// no change made after that is missed.
		w, err := policy.NewWatcher(path, 0, log, func() { reload.reload("file") })
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
	addrs := listening{Proxy: ln.Addr()}
	if adminLn != nil {
		addrs.Admin = adminLn.Addr()
	}
	log.Info("limitproxy started", zap.String("listen", ln.Addr().String()), zap.String("config", cfg.File),
		zap.Int("policies", len(cfg.Policies)), zap.String("version", version))
	if failed == nil {
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
	if admin != nil {
		admin.Close()
	}
	if redirect != nil {
		redirect.Close()
	}
	log.Info("stopped")
	return failed
}
