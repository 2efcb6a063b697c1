package server

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// reloader applies a configuration file to the running proxy (docs/configuration.md):
// read, parse, validate and compile completely, then swap atomically; on
// any error the running policies stay and the error is recorded. Reloads
// are serialised; status may be read at any time. Safe for concurrent use.
type reloader struct {
	path    string
	stores  *stores
	handler *proxy.Handler
	level   zap.AtomicLevel
	log     *zap.Logger
	now     func() time.Time
	started *config.Config // what the listeners, store and logs were built from

	mu     sync.Mutex // one reload at a time
	status atomic.Pointer[reloadStatus]
	// next is closed when a configuration is next applied (and replaced
	// by a new channel): the JWKS watch follows the file it names.
	next atomic.Pointer[chan struct{}]
}

// applied returns a channel closed when a configuration is next applied
// (a reload that changes nothing does not count).
func (r *reloader) applied() <-chan struct{} { return *r.next.Load() }

// reloadStatus is what the admin API reports. A new value replaces the old
// after every attempt; values are never modified.
type reloadStatus struct {
	Config         *config.Config // in force
	LoadedAt       time.Time      // when it came into force
	LastAttempt    time.Time
	LastTrigger    string
	LastError      error // of the last attempt; nil if it succeeded
	Successes      int64
	Failures       int64
	PendingRestart []string // settings changed in the file that need a restart
}

func newReloader(path string, cfg *config.Config, st *stores, h *proxy.Handler, level zap.AtomicLevel, log *zap.Logger, now func() time.Time) *reloader {
	r := &reloader{path: path, stores: st, handler: h, level: level, log: log.Named("reload"), now: now, started: cfg}
	r.status.Store(&reloadStatus{Config: cfg, LoadedAt: now(), LastAttempt: now(), LastTrigger: "start"})
	next := make(chan struct{})
	r.next.Store(&next)
	return r
}

// Status returns the latest status.
func (r *reloader) Status() *reloadStatus { return r.status.Load() }

// reload re-reads the file. trigger names what asked ("file", "jwks", "sighup",
// "api") for the log. It returns the error that kept the file from being
// applied, if any.
func (r *reloader) reload(trigger string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.status.Load()
	next := *old
	next.LastAttempt, next.LastTrigger = r.now(), trigger

	if r.path == "" {
		err := fmt.Errorf("started from the embedded example configuration: there is no file to reload")
		next.LastError = err
		next.Failures++
		r.status.Store(&next)
		return err
	}
	cfg, err := config.LoadWith(r.path, LoadOptions())
	var set *policy.Set
	if err == nil {
		set, err = policy.Compile(cfg, r.stores.decide, r.now())
	}
	// An [identity]'s keys live outside the file (a JWKS file, a URL):
	// the same file may come with new keys, so a set with one is swapped
	// in whatever its hash. Swap reads the keys first and keeps the set
	// in force if they do not load.
	unchanged := err == nil && cfg.Hash == old.Config.Hash && cfg.Identity == nil
	if err == nil && !unchanged {
		err = r.handler.Swap(set)
	}
	if err != nil {
		next.LastError = err
		next.Failures++
		r.status.Store(&next)
		r.log.Error("policy reload rejected", zap.String("file", r.path), zap.String("trigger", trigger), zap.Error(err))
		return err
	}
	recovered := old.LastError != nil // the last attempt was refused
	next.LastError = nil
	next.Successes++
	if unchanged {
		r.status.Store(&next)
		if recovered {
			// Said at the level the refusal was, so that the last line
			// an operator sees is not that refusal.
			r.log.Info("config file accepted again; it is the configuration in force", zap.String("file", r.path), zap.String("trigger", trigger),
				zap.String("hash", cfg.Hash[:12]))
		} else {
			r.log.Debug("config unchanged", zap.String("file", r.path), zap.String("trigger", trigger))
		}
		return nil
	}

	r.level.SetLevel(levelOf(cfg.Log.Level))
	added, removed, changed := diffSections(old.Config, cfg)
	// Released at once in memory; Redis keys expire by their TTL.
	r.stores.memory.Forget(sortedKeys(removedLimits(old.Config, cfg))...)
	next.Config, next.LoadedAt = cfg, r.now()
	next.PendingRestart = restartOnly(r.started, cfg)
	r.status.Store(&next)
	ch := make(chan struct{})
	close(*r.next.Swap(&ch))
	r.log.Info("policy reloaded", zap.String("file", r.path), zap.String("trigger", trigger), zap.String("hash", cfg.Hash[:12]),
		zap.Strings("added", added), zap.Strings("removed", removed), zap.Strings("changed", changed), zap.Bool("recovered", recovered))
	if len(next.PendingRestart) > 0 {
		r.log.Warn("settings changed that require a restart; they are not applied", zap.Strings("requires_restart", next.PendingRestart))
	}
	warnEscapes(r.log, cfg)
	return nil
}

// diffSections names the sections of the configuration added, removed
// and changed from a to b: each table ("server", "admin", "log", "store")
// compared whole, and each named element of an array of tables
// ("upstream:app", "policy:api") compared whole with the element of a of
// that name. It walks Config's fields, so that a section or a key added
// to it is compared without being listed here.
func diffSections(a, b *config.Config) (added, removed, changed []string) {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	t := va.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Name == "File" || f.Name == "Hash" {
			continue
		}
		x, y := va.Field(i), vb.Field(i)
		if f.Type.Kind() != reflect.Slice || f.Type.Elem().Kind() != reflect.Struct {
			if !reflect.DeepEqual(x.Interface(), y.Interface()) {
				changed = append(changed, sectionName(f.Name))
			}
			continue
		}
		prefix := sectionName(f.Name) + ":"
		was := map[string]reflect.Value{}
		for j := range x.Len() {
			was[x.Index(j).FieldByName("Name").String()] = x.Index(j)
		}
		now := map[string]bool{}
		for j := range y.Len() {
			e := y.Index(j)
			name := e.FieldByName("Name").String()
			now[name] = true
			switch old, ok := was[name]; {
			case !ok:
				added = append(added, prefix+name)
			case !reflect.DeepEqual(old.Interface(), e.Interface()):
				changed = append(changed, prefix+name)
			}
		}
		for j := range x.Len() {
			if name := x.Index(j).FieldByName("Name").String(); !now[name] {
				removed = append(removed, prefix+name)
			}
		}
	}
	return added, removed, changed
}

// sectionName is the file's name of a Config field: "Server" → "server",
// "Upstreams" → "upstream", "Policies" → "policy".
func sectionName(field string) string {
	var b strings.Builder
	for i, c := range field {
		if 'A' <= c && c <= 'Z' {
			if i > 0 {
				b.WriteByte('_') // ForwardAuth: forward_auth
			}
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	n := b.String()
	switch {
	case strings.HasSuffix(n, "ies"):
		return strings.TrimSuffix(n, "ies") + "y"
	case strings.HasSuffix(n, "s"):
		return strings.TrimSuffix(n, "s")
	}
	return n
}

// removedLimits returns the state names of a's limits that b no longer has
// (a policy removed, or a limit whose algorithm or window changed).
func removedLimits(a, b *config.Config) map[string]bool {
	keep := map[string]bool{}
	for _, n := range b.LimitNames() {
		keep[n] = true
	}
	gone := map[string]bool{}
	for _, n := range a.LimitNames() {
		if !keep[n] {
			gone[n] = true
		}
	}
	return gone
}

func sortedKeys(names map[string]bool) []string {
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// restartOnly lists the settings of b that differ from those the process
// started with and cannot change while it runs: the listeners, the server's
// timeouts, TLS, the store, the admin, RLS and RLQS listeners and the log's
// format.
func restartOnly(a, b *config.Config) []string {
	var out []string
	check := func(name string, x, y any) {
		if !reflect.DeepEqual(x, y) {
			out = append(out, name)
		}
	}
	check("server.listen", a.Server.Listen, b.Server.Listen)
	check("server.read_header_timeout", a.Server.ReadHeaderTimeout, b.Server.ReadHeaderTimeout)
	check("server.idle_timeout", a.Server.IdleTimeout, b.Server.IdleTimeout)
	check("server.shutdown_timeout", a.Server.ShutdownTimeout, b.Server.ShutdownTimeout)
	check("server.max_header_bytes", a.Server.MaxHeaderBytes, b.Server.MaxHeaderBytes)
	check("server.max_connections", a.Server.MaxConnections, b.Server.MaxConnections)
	check("server.proxy_protocol", a.Server.ProxyProtocol, b.Server.ProxyProtocol)
	check("server.http1", a.Server.HTTP1, b.Server.HTTP1)
	check("server.h2c", a.Server.H2C, b.Server.H2C)
	check("server.temp_dir", a.Server.TempDir, b.Server.TempDir)
	check("server.response_buffer_budget", a.Server.ResponseBufferBudget, b.Server.ResponseBufferBudget)
	check("server.response_buffer_disk", a.Server.ResponseBufferDisk, b.Server.ResponseBufferDisk)
	check("server.tls", a.Server.TLS, b.Server.TLS)
	check("admin", a.Admin, b.Admin)
	check("forward_auth.listen", a.ForwardAuth.Listen, b.ForwardAuth.Listen)
	check("store", a.Store, b.Store)
	check("rls", a.RLS, b.RLS)
	check("rlqs", a.RLQS, b.RLQS)
	check("log.format", a.Log.Format, b.Log.Format)
	check("log.access", a.Log.Access, b.Log.Access)
	check("log.file", a.Log.File, b.Log.File)
	check("log.access_file", a.Log.AccessFile, b.Log.AccessFile)
	return out
}

func (s *reloadStatus) lastError() string {
	if s.LastError == nil {
		return ""
	}
	return fmt.Sprint(s.LastError)
}
