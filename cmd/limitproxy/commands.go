package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// command is one entry of the command table, from which the usage, each
// command's -h and the shell completions (completion.go) are made, so
// that they list every command and flag there is.
type command struct {
	name     string // "" for the top level, which serves
	synopsis string // what follows the name in the usage, flags included
	summary  string // one line
	// flags declares the command's flags on fs and returns what runs it
	// once they are parsed, with the arguments that follow them.
	flags func(fs *flag.FlagSet, stdout, stderr io.Writer) func(ctx context.Context, args []string) error
	// args are the words the command takes as arguments (completion offers
	// them); files, that it takes files.
	args  []string
	files bool
}

// commands is the command table; the top level comes first.
var commands []command

func init() {
	commands = []command{
		{name: "", synopsis: "[-config PATH]", summary: "serve until SIGINT/SIGTERM",
			flags: func(fs *flag.FlagSet, stdout, stderr io.Writer) func(context.Context, []string) error {
				path := configFlag(fs)
				v := fs.Bool("version", false, "print version, Go version and commit, and exit")
				return func(ctx context.Context, args []string) error {
					if err := noArgs("limitproxy", args); err != nil {
						return err
					}
					if *v {
						fmt.Fprintln(stdout, versionString())
						return nil
					}
					p, err := resolveConfig(*path)
					if err != nil {
						return err
					}
					return serve(ctx, p, stderr)
				}
			}},
		{name: "check", synopsis: "[-config PATH] [-connect] [-bind]",
			summary: "validate a configuration and what serving it would open (certificates, variables, files, addresses), and exit",
			flags: func(fs *flag.FlagSet, stdout, _ io.Writer) func(context.Context, []string) error {
				path := configFlag(fs)
				connect := fs.Bool("connect", false, "also connect to the configured store, as serving would")
				bind := fs.Bool("bind", false, "also listen on each listen address, and close it at once")
				return func(ctx context.Context, args []string) error {
					if err := noArgs("check", args); err != nil {
						return err
					}
					p, err := resolveConfig(*path)
					if err != nil {
						return err
					}
					return check(ctx, p, *connect, *bind, stdout)
				}
			}},
		{name: "reload", synopsis: "[-config PATH] [-timeout D]",
			summary: "ask the server running that configuration to read its file again, through its admin API; print the outcome, exit 1 if the file is refused",
			flags: func(fs *flag.FlagSet, stdout, _ io.Writer) func(context.Context, []string) error {
				path := configFlag(fs)
				timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the answer")
				return func(ctx context.Context, args []string) error {
					if err := noArgs("reload", args); err != nil {
						return err
					}
					p, err := resolveConfig(*path)
					if err != nil {
						return err
					}
					return reload(ctx, p, *timeout, stdout)
				}
			}},
		{name: "health", synopsis: "[-config PATH]",
			summary: "ask the admin listener of that configuration whether it serves (exit 0 if so)",
			flags: func(fs *flag.FlagSet, stdout, _ io.Writer) func(context.Context, []string) error {
				path := configFlag(fs)
				return func(ctx context.Context, args []string) error {
					if err := noArgs("health", args); err != nil {
						return err
					}
					p, err := resolveConfig(*path)
					if err != nil {
						return err
					}
					return health(ctx, p, stdout)
				}
			}},
		{name: "replay", synopsis: "[-config PATH] [-against PATH] [flags] LOG...",
			summary: "replay access logs against a configuration (docs/replay.md)", files: true,
			flags: func(fs *flag.FlagSet, stdout, stderr io.Writer) func(context.Context, []string) error {
				r := replayFlags(fs)
				return func(ctx context.Context, args []string) error {
					return replayCmd(ctx, fs, r, args, stdout, stderr)
				}
			}},
		importCommand(),
		{name: "demo", summary: "run the example configuration against a local echo upstream",
			flags: func(_ *flag.FlagSet, stdout, stderr io.Writer) func(context.Context, []string) error {
				return func(ctx context.Context, args []string) error {
					if err := noArgs("demo", args); err != nil {
						return err
					}
					return demo(ctx, stdout, stderr)
				}
			}},
		{name: "version", summary: "print version, Go version and commit (as -version)",
			flags: func(_ *flag.FlagSet, stdout, _ io.Writer) func(context.Context, []string) error {
				return func(_ context.Context, args []string) error {
					if err := noArgs("version", args); err != nil {
						return err
					}
					fmt.Fprintln(stdout, versionString())
					return nil
				}
			}},
		{name: "completion", synopsis: "bash|zsh|fish", summary: "print the shell's completion script (docs/cli.md)",
			args: completionShells(),
			flags: func(_ *flag.FlagSet, stdout, _ io.Writer) func(context.Context, []string) error {
				return func(_ context.Context, args []string) error {
					if len(args) != 1 {
						return usageError{"completion: name one shell: bash, zsh or fish\n" + commandUsage("completion")}
					}
					return completion(args[0], stdout)
				}
			}},
		{name: "help", summary: "print this",
			flags: func(_ *flag.FlagSet, stdout, _ io.Writer) func(context.Context, []string) error {
				return func(context.Context, []string) error {
					fmt.Fprintln(stdout, usage())
					return nil
				}
			}},
	}
}

// title is the command as typed: "limitproxy check".
func (c *command) title() string {
	if c.name == "" {
		return "limitproxy"
	}
	return "limitproxy " + c.name
}

// usage is the command's usage line.
func (c *command) usage() string {
	return strings.TrimSpace("usage: " + c.title() + " " + c.synopsis)
}

// help prints the command's -h: usage, summary and flags (with the top
// level's, every command).
func (c *command) help(w io.Writer, fs *flag.FlagSet) {
	if c.name == "" {
		fmt.Fprintln(w, usage())
	} else {
		fmt.Fprintf(w, "%s\n\n%s\n", c.usage(), c.summary)
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintf(w, "\nflags of %s:\n", c.title())
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}

// commandUsage returns the usage line of the command named name.
func commandUsage(name string) string {
	for i := range commands {
		if commands[i].name == name {
			return commands[i].usage()
		}
	}
	return usage()
}

// usage is the top-level usage: every command.
func usage() string {
	var b strings.Builder
	b.WriteString("usage:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %s\n      %s\n", strings.TrimSpace(c.title()+" "+c.synopsis), c.summary)
	}
	fmt.Fprintf(&b, "Without -config, the first of %s that exists. Each command's -h lists its flags.", strings.Join(defaultConfigs, ", "))
	return b.String()
}

// configFlag declares -config on fs.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", "", "the configuration `PATH` (default: the first of "+strings.Join(defaultConfigs, ", ")+" that exists)")
}

// noArgs refuses arguments after the flags.
func noArgs(name string, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Sprintf("%s: unexpected argument %q\n%s", name, args[0], commandUsage(strings.TrimPrefix(name, "limitproxy")))}
	}
	return nil
}

// defaultConfigs are the files a command reads, the first that exists,
// when -config is absent: the system's file, where nginx keeps its
// compiled-in path and the packages put it, then the working directory's,
// as Caddy reads ./Caddyfile.
var defaultConfigs = []string{"/etc/limitproxy/config.toml", "limitproxy.toml"}

// resolveConfig returns path, or when it is "" the first of
// defaultConfigs that exists.
func resolveConfig(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	p, err := defaultConfig()
	if err != nil {
		return "", usageError{err.Error()}
	}
	return p, nil
}

// defaultConfig returns the first of defaultConfigs that exists.
func defaultConfig() (string, error) {
	for _, p := range defaultConfigs {
		if _, err := os.Stat(p); err == nil || !errors.Is(err, os.ErrNotExist) {
			return p, nil // one that exists but cannot be read is reported by the load
		}
	}
	return "", fmt.Errorf("no -config PATH given, and none of %s exists", strings.Join(defaultConfigs, ", "))
}

// adminBase returns the URL of the admin listener at listen, asking this
// machine's loopback when it listens on every address.
func adminBase(listen string) (string, error) {
	if listen == "" {
		return "", errors.New("admin.listen is off; the admin API is what this command asks")
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("admin.listen %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1" // listening on every address: ask this machine
	}
	return "http://" + net.JoinHostPort(host, port), nil
}
