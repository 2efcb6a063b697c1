package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay"
	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay/logread"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

const replayUsage = `usage: limitproxy replay -config NEW.toml [flags] LOG...
  -config PATH        the configuration to replay the logs against (default: as serving, docs/cli.md)
  -against PATH       a second configuration, replayed beside it and compared
  -overrides FILE     per-key overrides to apply: an overrides_file, or the admin API's GET /api/v1/overrides answer
  -format F           auto | limitproxy | nginx (default auto: detected per file)
  -nginx-format S     nginx's log_format string or whole directive (default: combined)
  -client-var VAR     the variable holding the client address, e.g. $http_x_forwarded_for (default $remote_addr)
  -xff HOW            rightmost | leftmost: which address of a list is the client's (default rightmost, past -trusted)
  -trusted CIDRS      proxies in front of nginx, comma-separated, walked past in an address list
  -trusted-hops N     rightmost: take the N-th address from the right instead, as [server] trusted_hops (default 0: walk past -trusted)
  -slack D            how far out of time order lines may be and still replay in order (default 5s)
  -top N              keys in each list (default 10)
  -raw-keys           show client keys as they are instead of hashed
  -json               print the report as JSON
  -svg DIR            write a plot per policy (admitted and rejected per second) into DIR`

// maxLineErrors is how many unreadable lines replay reports one by one;
// the count of the rest follows.
const maxLineErrors = 10

// replayKeySecret returns the key hash secret of the configuration at
// path ([admin] key_hash_secret_env), so that the report shows the hashes
// the admin API and the access log show; nil when it names none (a
// secret is then drawn for the run).
func replayKeySecret(path string) ([]byte, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	name := cfg.Admin.KeyHashSecretEnv
	if name == "" {
		return nil, nil
	}
	secret := os.Getenv(name)
	if len(secret) < proxy.MinKeyHashSecret {
		return nil, fmt.Errorf("replay: admin.key_hash_secret_env: environment variable %s is unset or shorter than %d bytes (set it as the server has it, so that the report's key hashes are the server's)", name, proxy.MinKeyHashSecret)
	}
	return []byte(secret), nil
}

// replayArgs are replay's flags, as declared on a flag set.
type replayArgs struct {
	o                            replay.Options
	format, xff, trusted, svgDir *string
	asJSON                       *bool
}

// replayFlags declares replay's flags on fs.
func replayFlags(fs *flag.FlagSet) *replayArgs {
	r := &replayArgs{
		format:  fs.String("format", "auto", "auto | limitproxy | nginx"),
		xff:     fs.String("xff", "rightmost", "rightmost | leftmost: which address of a list is the client's"),
		trusted: fs.String("trusted", "", "proxies in front of nginx, comma-separated `CIDRS`"),
		asJSON:  fs.Bool("json", false, "print the report as JSON"),
		svgDir:  fs.String("svg", "", "write a plot per policy into `DIR`"),
	}
	o := &r.o
	fs.StringVar(&o.Config, "config", "", "the configuration to replay the logs against (`PATH`; default: as serving)")
	fs.StringVar(&o.Against, "against", "", "a second configuration (`PATH`), replayed beside it and compared")
	fs.StringVar(&o.Overrides, "overrides", "", "per-key overrides to apply (`FILE`: the memory store's overrides_file, or a saved GET /api/v1/overrides)")
	fs.StringVar(&o.Read.Nginx.LogFormat, "nginx-format", "", "nginx's log_format string or whole directive (default: combined)")
	fs.StringVar(&o.Read.Nginx.ClientVar, "client-var", "", "the `VAR`iable holding the client address (default $remote_addr)")
	fs.DurationVar(&o.Slack, "slack", 0, "how far out of time order lines may be (default 5s)")
	fs.IntVar(&o.Top, "top", replay.DefaultTop, "keys in each list")
	fs.IntVar(&o.Read.Nginx.TrustedHops, "trusted-hops", 0, "take the `N`-th address from the right, as [server] trusted_hops")
	fs.BoolVar(&o.RawKeys, "raw-keys", false, "show client keys as they are instead of hashed")
	return r
}

// replayCmd is `limitproxy replay`: with its flags declared on fs, it
// parses args into replay.Options, runs the replay and prints the report
// (docs/replay.md).
func replayCmd(ctx context.Context, fs *flag.FlagSet, r *replayArgs, args []string, stdout, stderr io.Writer) error {
	o := &r.o
	format, xff, trusted, asJSON, svgDir := r.format, r.xff, r.trusted, r.asJSON, r.svgDir
	// Flags may come after the logs too: parse, take the arguments up to
	// the next flag as logs, parse again.
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError{"replay: " + err.Error() + "\n" + replayUsage}
		}
		rest = fs.Args()
		for len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
			o.Logs = append(o.Logs, rest[0])
			rest = rest[1:]
		}
		if len(rest) == 0 {
			break
		}
	}
	if o.Config == "" {
		path, err := defaultConfig()
		if err != nil {
			return usageError{"replay: " + err.Error() + "\n" + replayUsage}
		}
		o.Config = path
	}
	switch {
	case len(o.Logs) == 0:
		return usageError{"replay: no access log given\n" + replayUsage}
	case o.Top < 1:
		return usageError{fmt.Sprintf("replay: -top %d: must be at least 1", o.Top)}
	case o.Read.Nginx.TrustedHops < 0 || o.Read.Nginx.TrustedHops > config.MaxTrustedHops:
		return usageError{fmt.Sprintf("replay: -trusted-hops %d: must be 0 to %d", o.Read.Nginx.TrustedHops, config.MaxTrustedHops)}
	}
	switch *format {
	case "auto", "":
		o.Read.Format = logread.Auto
	case "limitproxy":
		o.Read.Format = logread.Limitproxy
	case "nginx":
		o.Read.Format = logread.Nginx
	default:
		return usageError{fmt.Sprintf("replay: -format %q: must be auto, limitproxy or nginx", *format)}
	}
	switch *xff {
	case "rightmost":
		o.Read.Nginx.ForwardedFor = logread.RightmostUntrusted
	case "leftmost":
		o.Read.Nginx.ForwardedFor = logread.Leftmost
	default:
		return usageError{fmt.Sprintf("replay: -xff %q: must be rightmost or leftmost", *xff)}
	}
	for _, s := range strings.Split(*trusted, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return usageError{fmt.Sprintf("replay: -trusted %q: not an address or CIDR prefix", s)}
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		o.Read.Nginx.TrustedProxies = append(o.Read.Nginx.TrustedProxies, p.Masked())
	}
	if o.Read.Nginx.LogFormat != "" {
		if _, err := logread.ParseLogFormat(o.Read.Nginx.LogFormat); err != nil {
			return usageError{"replay: -nginx-format: " + err.Error()}
		}
	}

	secret, err := replayKeySecret(o.Config)
	if err != nil {
		return err
	}
	o.KeySecret = secret
	o.Progress = replayProgress(stderr)

	var lineErrors int
	o.LineError = func(err error) {
		lineErrors++
		if lineErrors <= maxLineErrors {
			fmt.Fprintln(stderr, err)
		}
	}
	rep, err := replay.Run(ctx, *o)
	if err != nil {
		return err
	}
	if lineErrors > maxLineErrors {
		fmt.Fprintf(stderr, "… and %d more lines that could not be read\n", lineErrors-maxLineErrors)
	}
	if rep.Read.Replayed == 0 && rep.Read.Malformed > 0 {
		return fmt.Errorf("replay: no request replayed and %d lines could not be read: is -format or -nginx-format right?", rep.Read.Malformed)
	}
	notes := stdout
	if *asJSON {
		if err := rep.WriteJSON(stdout); err != nil {
			return err
		}
		notes = stderr
		for _, w := range rep.Warnings {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
	} else if err := rep.WriteText(stdout); err != nil {
		return err
	}
	if *svgDir != "" {
		paths, err := rep.WriteSVG(*svgDir)
		if err != nil {
			return fmt.Errorf("replay: -svg: %w", err)
		}
		if len(paths) == 0 {
			fmt.Fprintln(notes, "\nplots: none (no request matched a policy)")
		} else {
			fmt.Fprintf(notes, "\nplots: %s\n", strings.Join(paths, " "))
		}
	}
	return nil
}
