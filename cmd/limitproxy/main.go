// Command limitproxy is a reverse proxy that enforces rate limits in front
// of HTTP upstreams. This is its command line (docs/cli.md); the server
// itself is cmd/limitproxy/internal/server.
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
	"syscall"
	"time"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/server"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// version is set at build time with -ldflags "-X main.version=…"; without
// it, the module's version from the build info (go install …@v1.2.3).
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// usageError is a command-line mistake: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// exitCode prints err (one line per error) and maps it to docs/cli.md's exit
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
  limitproxy check -config PATH [-connect]
                                   validate a configuration and exit; with -connect,
                                   also connect to its store as serving would
  limitproxy health -config PATH   ask the admin listener of that configuration whether it serves (exit 0 if so)
  limitproxy replay -config PATH [-against PATH] [flags] LOG...
                                   replay access logs against a configuration (docs/replay.md)
  limitproxy demo                  run the example configuration against a local echo upstream
  limitproxy version               print version, Go version and commit`

// run is the whole program; main only maps its error to an exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "check":
			fs := flag.NewFlagSet("check", flag.ContinueOnError)
			connect := fs.Bool("connect", false, "connect to the configured store")
			path, err := parseConfigFlag(fs, args[1:])
			if err != nil {
				return err
			}
			return check(ctx, path, *connect, stdout)
		case "health":
			path, err := configFlag("health", args[1:], stderr)
			if err != nil {
				return err
			}
			return health(ctx, path, stdout)
		case "replay":
			return replayCmd(ctx, args[1:], stdout, stderr)
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
	cfg, err := config.LoadWith(path, server.LoadOptions())
	if err != nil {
		return err
	}
	srv, err := server.New(cfg, server.Options{Path: path, Stderr: stderr, Version: versionNumber()})
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}

// configFlag parses "-config PATH", which is required.
func configFlag(name string, args []string, stderr io.Writer) (string, error) {
	return parseConfigFlag(flag.NewFlagSet(name, flag.ContinueOnError), args)
}

// parseConfigFlag parses args with fs's flags and "-config PATH", which
// is required.
func parseConfigFlag(fs *flag.FlagSet, args []string) (string, error) {
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
// error as PATH:LINE:COL: message; with connect, it also connects to the
// configured store (server.CheckStore). It returns as soon as ctx is done
// (SIGINT, SIGTERM), whatever the file is doing.
func check(ctx context.Context, path string, connect bool, stdout io.Writer) error {
	type loaded struct {
		cfg *config.Config
		err error
	}
	done := make(chan loaded, 1)
	go func() {
		cfg, err := config.LoadWith(path, server.LoadOptions())
		done <- loaded{cfg, err}
	}()
	var cfg *config.Config
	select {
	case l := <-done:
		if l.err != nil {
			return l.err
		}
		cfg = l.cfg
	case <-ctx.Done():
		return fmt.Errorf("%s: check interrupted", path)
	}
	if _, err := policy.Compile(cfg, memstore.New(memstore.Options{MaxKeys: 1}), time.Now()); err != nil {
		return err
	}
	if connect {
		if err := server.CheckStore(ctx, cfg.Store); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		fmt.Fprintf(stdout, "%s: store: ok: %s answers\n", path, cfg.Store.Backend)
	}
	limits := 0
	for _, p := range cfg.Policies {
		limits += len(p.Limits)
	}
	fmt.Fprintf(stdout, "%s: ok: %d policies, %d limits, %d upstreams, listen %s\n", path, len(cfg.Policies), limits, len(cfg.Upstreams), cfg.Server.Listen)
	return nil
}

// versionNumber is the version stamped at build time, else the module's
// version in the build info ("v1.2.3" from go install …@v1.2.3), else
// "dev".
func versionNumber() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
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
	return fmt.Sprintf("limitproxy %s (%s, commit %s)", versionNumber(), runtime.Version(), commit)
}

// health asks the admin listener of the configuration at path whether the
// process serves (GET /healthz), for container health checks: an image
// built from scratch has no curl. It exits 0 when the answer is 200.
func health(ctx context.Context, path string, stdout io.Writer) error {
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	if cfg.Admin.Listen == "" {
		return fmt.Errorf("%s: admin.listen is off; health asks the admin listener's /healthz", path)
	}
	host, port, err := net.SplitHostPort(cfg.Admin.Listen)
	if err != nil {
		return fmt.Errorf("admin.listen %q: %w", cfg.Admin.Listen, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1" // listening on every address: ask this machine
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+net.JoinHostPort(host, port)+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: /healthz answered %s", resp.Status)
	}
	fmt.Fprintln(stdout, "ok")
	return nil
}
