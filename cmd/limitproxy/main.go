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
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	// Go's zone database, about 450 KB, built in: a calendar window's
	// time_zone loads in the container image, which has no
	// /usr/share/zoneinfo (scratch). A system database, where there is
	// one, is read first.
	_ "time/tzdata"

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

// run is the whole program; main only maps its error to an exit status.
// args[0] names a command of the table (commands.go); anything else is
// the top level, which serves.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := &commands[0]
	if len(args) > 0 {
		for i := range commands[1:] {
			if commands[i+1].name == args[0] {
				c, args = &commands[i+1], args[1:]
				break
			}
		}
	}
	fs := flag.NewFlagSet(c.title(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	exec := c.flags(fs, stdout, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.help(stdout, fs)
			return nil
		}
		return usageError{c.title() + ": " + err.Error() + "\n" + c.usage()}
	}
	err := exec(ctx, fs.Args())
	if errors.Is(err, flag.ErrHelp) { // a command that parses again (replay)
		c.help(stdout, fs)
		return nil
	}
	return err
}

// serve is the top level: load the file and serve it until ctx is done.
func serve(ctx context.Context, path string, stderr io.Writer) error {
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

// check validates a file as `nginx -t` does: a one-line summary, or every
// error as PATH:LINE:COL: message. Beyond the file it opens and parses what
// a start would (server.Preflight: certificates, variables, the overrides
// file, temp_dir, listen addresses; with bind, it listens on them), and
// with connect connects to the configured store (server.CheckStore), and
// reports every problem of these at once. It returns as soon as ctx is
// done (SIGINT, SIGTERM), whatever the file is doing.
func check(ctx context.Context, path string, connect, bind bool, stdout io.Writer) error {
	type loaded struct {
		cfg *config.Config
		err error
	}
	done := make(chan loaded, 1)
	go func() {
		o := server.LoadOptions()
		o.Partial = true
		cfg, err := config.LoadWith(path, o)
		done <- loaded{cfg, err}
	}()
	var cfg *config.Config
	select {
	case l := <-done:
		if l.err != nil {
			var fileErrs config.Errors
			if l.cfg == nil || !errors.As(l.err, &fileErrs) {
				return l.err
			}
			// The file decoded but does not validate: what the rest of
			// it would open is checked too, so that one run lists
			// every problem.
			return withPreflight(fileErrs, server.Preflight(l.cfg, server.PreflightOptions{Bind: bind}))
		}
		cfg = l.cfg
	case <-ctx.Done():
		return fmt.Errorf("%s: check interrupted", path)
	}
	if _, err := policy.Compile(cfg, memstore.New(memstore.Options{MaxKeys: 1}), time.Now()); err != nil {
		return err
	}
	var errs []error
	if err := server.Preflight(cfg, server.PreflightOptions{Bind: bind}); err != nil {
		errs = append(errs, err)
	}
	if connect {
		if err := server.CheckStore(ctx, cfg.Store); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
		} else {
			fmt.Fprintf(stdout, "%s: store: ok: %s answers\n", path, cfg.Store.Backend)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if note := server.UnmatchedNote(cfg); note != "" {
		fmt.Fprintf(stdout, "%s: note: %s\n", path, note)
	}
	limits := 0
	for _, p := range cfg.Policies {
		limits += len(p.Limits)
	}
	fmt.Fprintf(stdout, "%s: ok: %s, %s, %s, listen %s\n", path, count(len(cfg.Policies), "policy", "policies"),
		count(limits, "limit", "limits"), count(len(cfg.Upstreams), "upstream", "upstreams"), cfg.Server.Listen)
	return nil
}

// count writes n and the noun, singular for 1.
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// withPreflight adds to a file's errors the problems Preflight found in
// what the file would open, leaving out those of a key that already has an
// error of the file (or a key above or below it: a value that failed to
// validate was checked as its zero value), and sorts them in file order.
func withPreflight(fileErrs config.Errors, pre error) error {
	var preErrs config.Errors
	if !errors.As(pre, &preErrs) {
		return fileErrs
	}
	related := func(a, b string) bool {
		return a == b || strings.HasPrefix(a, b+".") || strings.HasPrefix(b, a+".")
	}
	all := slices.Clone(fileErrs)
	for _, p := range preErrs {
		if !slices.ContainsFunc(fileErrs, func(f *config.Error) bool { return related(p.Key, f.Key) }) {
			all = append(all, p)
		}
	}
	server.SortInFileOrder(all)
	return all
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
	base, err := adminBase(cfg.Admin.Listen)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/healthz", nil)
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
