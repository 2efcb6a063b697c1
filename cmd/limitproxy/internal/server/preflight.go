package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// PreflightOptions says what Preflight does beyond opening and parsing.
type PreflightOptions struct {
	// Bind also listens on each listen address, and closes it at once:
	// an address taken or not allowed is found too.
	Bind bool
}

// Preflight opens and parses, without starting anything, what starting
// cfg would open beyond the file itself: the certificate and key of
// [server.tls] mode = "files", the variables token_env and password_env
// name (set and not empty) and key_hash_secret_env names (set, at least
// proxy.MinKeyHashSecret bytes), the overrides file (its directory exists and
// takes files; the file, if there, reads and parses), temp_dir (exists,
// takes files), [identity]'s jwks_file (reads and parses) or secret_env
// (set and long enough), and the listen addresses (parse; with o.Bind,
// free).
// It returns nil, or config.Errors holding every problem, each at its
// key's file:line:col. `limitproxy check` and the start run it both, so
// they cannot disagree.
func Preflight(cfg *config.Config, o PreflightOptions) error {
	var errs config.Errors
	add := func(key, format string, args ...any) { errs = append(errs, cfg.Errorf(key, format, args...)) }

	listens := [][2]string{{"server.listen", cfg.Server.Listen}}
	if t := cfg.Server.TLS; t != nil && t.HTTPListen != "" {
		listens = append(listens, [2]string{"server.tls.http_listen", t.HTTPListen})
	}
	if cfg.Admin.Listen != "" {
		listens = append(listens, [2]string{"admin.listen", cfg.Admin.Listen})
	}
	if cfg.ForwardAuth.Listen != "" {
		listens = append(listens, [2]string{"forward_auth.listen", cfg.ForwardAuth.Listen})
	}
	if cfg.RLS.Listen != "" {
		listens = append(listens, [2]string{"rls.listen", cfg.RLS.Listen})
	}
	for _, l := range listens {
		if err := checkListen(l[1], o.Bind); err != nil {
			add(l[0], "%v", err)
		}
	}

	if t := cfg.Server.TLS; t != nil && t.Mode == config.TLSFiles {
		ok := true
		for _, f := range [][2]string{{"server.tls.cert_file", t.CertFile}, {"server.tls.key_file", t.KeyFile}} {
			if err := readable(f[1]); err != nil {
				add(f[0], "%v", err)
				ok = false
			}
		}
		if ok {
			if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
				add("server.tls.cert_file", "%s with key_file %s: %v", t.CertFile, t.KeyFile, err)
			}
		}
	}

	if r := cfg.RLS; r.Listen != "" && r.CertFile != "" {
		ok := true
		files := [][2]string{{"rls.cert_file", r.CertFile}, {"rls.key_file", r.KeyFile}}
		if r.ClientCAFile != "" {
			files = append(files, [2]string{"rls.client_ca_file", r.ClientCAFile})
		}
		for _, f := range files {
			if err := readable(f[1]); err != nil {
				add(f[0], "%v", err)
				ok = false
			}
		}
		if ok {
			if _, err := tls.LoadX509KeyPair(r.CertFile, r.KeyFile); err != nil {
				add("rls.cert_file", "%s with key_file %s: %v", r.CertFile, r.KeyFile, err)
			}
		}
	}

	for _, f := range [][2]string{{"log.file", cfg.Log.File}, {"log.access_file", cfg.Log.AccessFile}} {
		if f[1] != "" {
			if err := appendable(f[1]); err != nil {
				add(f[0], "%v", err)
			}
		}
	}

	if cfg.Admin.Listen != "" {
		if _, err := secretEnv(cfg.Admin.TokenEnv); err != nil {
			add("admin.token_env", "%v", err)
		}
	}
	if name := cfg.Admin.KeyHashSecretEnv; name != "" && len(os.Getenv(name)) < proxy.MinKeyHashSecret {
		add("admin.key_hash_secret_env", "environment variable %s is unset or shorter than %d bytes", name, proxy.MinKeyHashSecret)
	}
	if cfg.Store.Backend == config.BackendRedis {
		if _, err := secretEnv(cfg.Store.Redis.PasswordEnv); err != nil {
			add("store.redis.password_env", "%v", err)
		}
	}
	if cfg.Store.Backend == config.BackendMemory && cfg.Store.OverridesFile != "" {
		// What the memory store opens at start, opened and closed: the
		// file read and parsed, a temporary file made beside it. A
		// missing directory is said plainly (the probe file's random name
		// would otherwise be all the message names).
		if dir := filepath.Dir(cfg.Store.OverridesFile); !isDir(dir) {
			add("store.overrides_file", "overrides file %s: directory %s does not exist", cfg.Store.OverridesFile, dir)
		} else if ov, err := memstore.NewOverrides(memstore.OverrideOptions{Path: cfg.Store.OverridesFile}); err != nil {
			add("store.overrides_file", "%v", err)
		} else {
			ov.Close()
		}
	}
	if id := cfg.Identity; id != nil {
		if err := proxy.CheckIdentity(id); err != nil {
			key := "identity.jwks_file"
			if id.SecretEnv != "" {
				key = "identity.secret_env"
			}
			add(key, "%s", strings.TrimPrefix(strings.TrimPrefix(err.Error(), "identity: "), "secret_env: "))
		}
	}
	if err := proxy.CheckTempDir(cfg.Server.TempDir); err != nil {
		add("server.temp_dir", "%s", strings.TrimPrefix(err.Error(), "server.temp_dir "))
	}

	if len(errs) == 0 {
		return nil
	}
	SortInFileOrder(errs)
	return errs
}

// SortInFileOrder sorts errs by their place in the file, line then
// column, those without a line (Line 0) last; errors at the same place
// keep their order.
func SortInFileOrder(errs config.Errors) {
	slices.SortStableFunc(errs, func(a, b *config.Error) int {
		if (a.Line == 0) != (b.Line == 0) {
			if a.Line == 0 {
				return 1
			}
			return -1
		}
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Col - b.Col
	})
}

// secretEnv returns the value of the environment variable name, which
// must be set and not empty; "" for name "" (no secret).
func secretEnv(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("environment variable %s is empty or unset", name)
	}
	return v, nil
}

// checkListen parses a listen address, host:port with a port number (a
// name is looked up by the resolver, which may be slow or absent), and
// with bind listens on it and closes it.
func checkListen(addr string, bind bool) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		if _, numErr := strconv.ParseUint(addr, 10, 16); numErr == nil {
			return fmt.Errorf("%q is a port alone: write \":%s\" for every address, or \"127.0.0.1:%s\" for loopback only", addr, addr, addr)
		}
		return fmt.Errorf("%q: %v", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || port == "" {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	} else if n == 0 && bind {
		return nil // any free port: nothing to try
	}
	if bind {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		ln.Close()
	}
	return nil
}

// isDir reports whether path is a directory (following links).
// appendable reports why a log file could not be appended to at path:
// an existing file is opened for writing (and closed); for one that does
// not exist yet, its directory must exist and be writable (a start
// creates the file; a check does not).
func appendable(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	dir := filepath.Dir(path)
	if !isDir(dir) {
		return fmt.Errorf("log file %s: directory %s does not exist", path, dir)
	}
	probe, err := os.CreateTemp(dir, ".limitproxy-check-*")
	if err != nil {
		return fmt.Errorf("log file %s: %w", path, err)
	}
	probe.Close()
	return os.Remove(probe.Name())
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// readable opens path for reading and closes it.
func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return f.Close()
}
