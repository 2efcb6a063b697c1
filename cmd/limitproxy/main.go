// Command limitproxy is a reverse proxy that enforces rate limits in front
// of HTTP upstreams. See README.md and SPEC §1 for its command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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

	"limitproxy/limiter/memstore"
	"limitproxy/policy"
	"limitproxy/proxy"
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
			return check(path, stdout)
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
	return serve(ctx, cfg, stderr, nil)
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
// error as PATH:LINE:COL: message.
func check(path string, stdout io.Writer) error {
	cfg, err := policy.Load(path)
	if err != nil {
		return err
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

// newLogger builds the zap logger [log] asks for, writing to stderr.
func newLogger(c policy.Log, stderr io.Writer) *zap.Logger {
	level, _ := zapcore.ParseLevel(c.Level)
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

// serve runs the proxy for cfg until ctx is done, then drains. If ready is
// not nil it receives the listener's address once the proxy accepts
// connections (tests use it).
func serve(ctx context.Context, cfg *policy.Config, stderr io.Writer, ready chan<- net.Addr) error {
	log := newLogger(cfg.Log, stderr)
	defer log.Sync()

	store := memstore.New(memstore.Options{MaxKeys: cfg.Store.MaxKeys})
	now := proxy.MonotonicClock()
	set, err := cfg.Compile(store, now())
	if err != nil {
		return err
	}
	handler := proxy.New(set, proxy.Options{Logger: log, AccessLog: cfg.Log.Access, Now: now})

	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Server.Listen, err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		MaxHeaderBytes:    cfg.Server.MaxHeaderBytes,
		ErrorLog:          zap.NewStdLog(log.Named("http").WithOptions(zap.IncreaseLevel(zap.WarnLevel))),
	}

	var wg sync.WaitGroup
	janitor, stopJanitor := context.WithCancel(context.Background())
	wg.Go(func() { store.Run(janitor) })
	defer func() {
		stopJanitor()
		wg.Wait()
	}()

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("limitproxy started", zap.String("listen", ln.Addr().String()), zap.String("config", cfg.File),
		zap.Int("policies", len(cfg.Policies)), zap.String("version", version))
	if ready != nil {
		ready <- ln.Addr()
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// Stop accepting; let requests in flight, queued ones included, finish
	// within shutdown_timeout.
	log.Info("shutting down", zap.Duration("drain_budget", cfg.Server.ShutdownTimeout))
	drain, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(drain); err != nil {
		srv.Close()
		log.Warn("drain budget exhausted; remaining connections closed", zap.Error(err))
	}
	<-served
	log.Info("stopped")
	return nil
}
