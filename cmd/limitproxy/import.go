package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/envoyimport"
	"github.com/limitproxy/limitproxy/policy/config"
)

// maxImportBytes bounds each YAML file import reads.
const maxImportBytes = 4 << 20

// importFlags are the flags of limitproxy import.
type importFlags struct {
	out, listen string
	merge, env  bool
	joinedKeys  bool
}

func declareImportFlags(fs *flag.FlagSet) *importFlags {
	f := &importFlags{}
	fs.StringVar(&f.out, "o", "", "write the TOML to `FILE` (replaced whole, or left alone on an error) instead of stdout")
	fs.StringVar(&f.listen, "listen", envoyimport.DefaultListen, "the [rls] listen `ADDRESS` written")
	fs.BoolVar(&f.merge, "merge-domains", false, "merge files of one domain, as the reference's MERGE_DOMAIN_CONFIG=true does (default: refused, as it does)")
	fs.BoolVar(&f.joinedKeys, "joined-keys", false, "write [rls] count_keys = \"joined\" and lookup = \"joined\": counts named as the reference names them, keys and values joined with '_', so that descriptors whose joins are equal share one count, and descriptors looked up as the reference does, by KEY_VALUE, with the policies laid out as its tree (default: \"distinct\", keys and values apart, policies in first-match order)")
	fs.BoolVar(&f.env, "env", false, "read the reference's settings that change its answers from the environment, as it reads them: MERGE_DOMAIN_CONFIG, LIMIT_RESPONSE_HEADERS_ENABLED, LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER, SHADOW_MODE, QUOTA_MODE, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, RESPONSE_DYNAMIC_METADATA, EXPIRATION_JITTER_MAX_SECONDS (when set)")
	return f
}

// referenceSettings reads the reference's settings from getenv as its
// envconfig does (booleans as strconv.ParseBool reads them; unset or
// empty: the default); merge is MERGE_DOMAIN_CONFIG.
func referenceSettings(getenv func(string) string) (s envoyimport.Settings, merge bool, err error) {
	boolean := func(name string, v *bool) {
		if raw := getenv(name); raw != "" && err == nil {
			b, perr := strconv.ParseBool(raw)
			if perr != nil {
				err = fmt.Errorf("import: %s=%q is not a boolean", name, raw)
			}
			*v = b
		}
	}
	boolean("MERGE_DOMAIN_CONFIG", &merge)
	boolean("LIMIT_RESPONSE_HEADERS_ENABLED", &s.ResponseHeaders)
	boolean("SHADOW_MODE", &s.ShadowMode)
	boolean("QUOTA_MODE", &s.QuotaMode)
	boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", &s.StopIncrement)
	boolean("RESPONSE_DYNAMIC_METADATA", &s.DynamicMetadata)
	s.LimitHeader, s.RemainingHeader, s.ResetHeader = getenv("LIMIT_LIMIT_HEADER"), getenv("LIMIT_REMAINING_HEADER"), getenv("LIMIT_RESET_HEADER")
	// EXPIRATION_JITTER_MAX_SECONDS as envconfig reads an int64 (its
	// default, 300, is not assumed when unset: limitproxy's is 0).
	if raw := getenv("EXPIRATION_JITTER_MAX_SECONDS"); raw != "" && err == nil {
		n, perr := strconv.ParseInt(raw, 0, 64)
		if perr != nil || n > int64(envoyimport.MaxJitterSeconds) {
			err = fmt.Errorf("import: EXPIRATION_JITTER_MAX_SECONDS=%q is not a number of seconds up to %d", raw, envoyimport.MaxJitterSeconds)
		}
		s.ExpirationJitterMax = max(n, 0)
	}
	return s, merge, err
}

// importCmd converts envoyproxy/ratelimit YAML files to limitproxy TOML.
// Warnings go to stderr; the TOML to -o or stdout.
func importCmd(f *importFlags, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"import: name the envoyproxy/ratelimit YAML files (a RUNTIME_ROOT's config/*.yaml)\n" + commandUsage("import")}
	}
	var in []envoyimport.Input
	for _, p := range args {
		src, err := readBounded(p, maxImportBytes)
		if err != nil {
			return err
		}
		in = append(in, envoyimport.Input{Name: p, Src: src})
	}
	o := envoyimport.Options{Listen: f.listen, MergeDomains: f.merge, JoinedKeys: f.joinedKeys}
	if f.env {
		st, merge, err := referenceSettings(os.Getenv)
		if err != nil {
			return err
		}
		o.Settings, o.MergeDomains = st, o.MergeDomains || merge
	}
	res, err := envoyimport.Import(in, o)
	if err != nil {
		return err
	}
	if len(res.TOML) > config.MaxFileBytes {
		return fmt.Errorf("import: the TOML would be %d bytes, above the %d a configuration may have", len(res.TOML), config.MaxFileBytes)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "%s (noted in the output)\n", w)
	}
	if f.out == "" {
		_, err := stdout.Write(res.TOML)
		return err
	}
	return writeReplacing(f.out, res.TOML)
}

// readBounded reads the file at p, refusing one above limit bytes.
func readBounded(p string, limit int64) ([]byte, error) {
	fh, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", p, limit)
	}
	return b, nil
}

// writeReplacing writes b to path through a file beside it renamed over
// it, so that a reader never sees half a configuration.
func writeReplacing(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// importCommand is the command table's entry for import.
func importCommand() command {
	return command{name: "import", synopsis: "[-o FILE] [-listen ADDRESS] [-merge-domains] [-joined-keys] [-env] CONFIG.yaml...",
		summary: "convert envoyproxy/ratelimit YAML configuration to RLS policies (docs/envoy.md)", files: true,
		flags: func(fs *flag.FlagSet, stdout, stderr io.Writer) func(context.Context, []string) error {
			f := declareImportFlags(fs)
			return func(_ context.Context, args []string) error {
				return importCmd(f, args, stdout, stderr)
			}
		}}
}
