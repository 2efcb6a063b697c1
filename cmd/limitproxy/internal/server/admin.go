package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// adminHandler serves docs/admin-api.md's admin API: GET /healthz, GET /readyz,
// GET /metrics, GET /api/v1/config, POST /api/v1/reload, and GET and DELETE
// /api/v1/policies/{policy}/keys/{key} (inspect or reset one client), and
// GET /api/v1/policies/{policy}/bans and DELETE …/bans/{key} (the penalty
// box), and GET /api/v1/top and …/policies/{policy}/top (top offenders).
// With a token, /api/ requires "Authorization: Bearer TOKEN", compared in
// constant time.
func adminHandler(r *reloader, ready func(context.Context) error, m *metrics, token string, bans perkey.Bans, overrides perkey.Overrides, persistence func(context.Context) (bool, string)) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	registerDashboard(mux) // GET /dashboard: dashboard.go
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		// Ready once a configuration is in force (always, once serving)
		// and the store answers (the memory store always does).
		if err := ready(req.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /api/v1/config", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, configView(r.Status()))
	})
	// One client's state: {key} is the raw value of the policy's key part
	// (an IP, an API key...); for a policy with several parts, give each in
	// order as ?part=…&part=… and any {key}.
	clientKey := func(w http.ResponseWriter, req *http.Request) (*policy.Policy, string, bool) {
		set := r.handler.Set()
		var p *policy.Policy
		for _, q := range set.Policies {
			if q.Name == req.PathValue("policy") {
				p = q
			}
		}
		if p == nil {
			writeJSON(w, http.StatusNotFound, map[string]any{"error": "no policy " + strconv.Quote(req.PathValue("policy"))})
			return nil, "", false
		}
		if p.OwnKeys {
			// Its limits count under different keys: one key names no
			// single client of all of them.
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "policy " + strconv.Quote(p.Name) +
				" has limits counted under keys of their own; the admin API inspects and resets clients only of policies whose limits share the policy's key"})
			return nil, "", false
		}
		if p.Limiter == nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "policy " + strconv.Quote(p.Name) +
				" has no rate limits, only a [policy.concurrency]: there is no quota to inspect or reset"})
			return nil, "", false
		}
		values := []string{req.PathValue("key")}
		if len(p.Key) != 1 {
			values = req.URL.Query()["part"]
		}
		key, err := proxy.KeyFor(p, &set.Config.Server, values)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
			return nil, "", false
		}
		return p, key, true
	}
	mux.HandleFunc("GET /api/v1/policies/{policy}/keys/{key}", func(w http.ResponseWriter, req *http.Request) {
		p, key, ok := clientKey(w, req)
		if !ok {
			return
		}
		now := r.now()
		d, err := p.Limiter.Peek(req.Context(), key, now)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error()})
			return
		}
		_, window := p.Limits[d.Index].Quota()
		writeJSON(w, http.StatusOK, map[string]any{
			"policy": p.Name, "next_request_allowed": d.Allowed,
			"limit": d.Limit, "remaining": d.Remaining, "window_seconds": window.Seconds(),
			"limiting": p.Limits[d.Index].String(), "reset_in_seconds": d.ResetAt.Sub(now).Seconds(),
			"retry_after_seconds": d.RetryAfter.Seconds(), "next_quota_in_seconds": d.Next.Seconds(),
		})
	})
	mux.HandleFunc("DELETE /api/v1/policies/{policy}/keys/{key}", func(w http.ResponseWriter, req *http.Request) {
		p, key, ok := clientKey(w, req)
		if !ok {
			return
		}
		if err := p.Limiter.Reset(req.Context(), key); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error()})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	policyNamed := func(w http.ResponseWriter, name string) (*policy.Policy, bool) {
		for _, q := range r.handler.Set().Policies {
			if q.Name == name {
				return q, true
			}
		}
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "no policy " + strconv.Quote(name)})
		return nil, false
	}
	mux.HandleFunc("GET /api/v1/policies/{policy}/bans", func(w http.ResponseWriter, req *http.Request) {
		p, ok := policyNamed(w, req.PathValue("policy"))
		if !ok {
			return
		}
		limit := maxBansListed
		if v := req.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				writeJSON(w, http.StatusBadRequest, map[string]any{"error": "limit: " + strconv.Quote(v) + " is not a whole number above zero"})
				return
			}
			limit = min(n, maxBansListed)
		}
		now := r.now()
		list, err := bans.List(req.Context(), p.Name, now, limit)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error()})
			return
		}
		out := make([]map[string]any, 0, len(list))
		for _, b := range list {
			out = append(out, map[string]any{
				"key": b.Key, "level": b.Level,
				"since": b.Since.UTC().Format(time.RFC3339Nano), "until": b.Until.UTC().Format(time.RFC3339Nano),
				"until_in_seconds": b.Until.Sub(now).Seconds(),
			})
		}
		writeJSON(w, http.StatusOK, map[string]any{"policy": p.Name, "bans": out})
	})
	mux.HandleFunc("DELETE /api/v1/policies/{policy}/bans/{key}", func(w http.ResponseWriter, req *http.Request) {
		p, ok := policyNamed(w, req.PathValue("policy"))
		if !ok {
			return
		}
		// The client named as for …/keys/{key}, or a key as the list
		// shows it (hashed: a limit's own key, a key of several parts).
		key := req.URL.Query().Get("hash")
		if key == "" {
			values := []string{req.PathValue("key")}
			if len(p.Key) != 1 {
				values = req.URL.Query()["part"]
			}
			raw, err := proxy.KeyFor(p, &r.handler.Set().Config.Server, values)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
				return
			}
			key = proxy.StoreKey(raw)
		}
		lifted, err := bans.Lift(req.Context(), p.Name, key)
		switch {
		case err != nil:
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error()})
		case !lifted:
			writeJSON(w, http.StatusNotFound, map[string]any{"error": "no ban of that key under policy " + strconv.Quote(p.Name)})
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	// Top offenders: every policy's, or one's.
	hasher := newKeyHasher()
	top := func(w http.ResponseWriter, req *http.Request, only string) {
		n := 10
		if v := req.URL.Query().Get("n"); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < 1 || n > proxy.TopK {
				writeJSON(w, http.StatusBadRequest, map[string]any{"error": "n: " + strconv.Quote(v) + " must be a whole number from 1 to " + strconv.Itoa(proxy.TopK)})
				return
			}
		}
		raw := r.handler.Set().Config.Admin.RawTopKeys
		show := func(key string) string {
			if raw {
				parts, _ := proxy.KeyParts(key)
				return strings.Join(parts, " ")
			}
			return hasher.hash(key)
		}
		keys := "hashed"
		if raw {
			keys = "raw"
		}
		lists := []map[string]any{}
		for _, l := range r.handler.Top(n) {
			if only != "" && l.Policy != only {
				continue
			}
			rejected := []map[string]any{}
			for _, e := range l.Rejected {
				rejected = append(rejected, map[string]any{"key": show(e.Key), "count": e.Count, "error": e.Error})
			}
			closest := []map[string]any{}
			for _, e := range l.Closest {
				closest = append(closest, map[string]any{"key": show(e.Key), "used": e.Used})
			}
			lists = append(lists, map[string]any{
				"policy": l.Policy, "window_seconds": proxy.TopWindow.Seconds(), "total_rejected": l.Total,
				"error_bound": (l.Total + proxy.TopK - 1) / proxy.TopK, "keys": keys, "rejected": rejected, "closest": closest,
			})
		}
		if only != "" {
			if len(lists) == 0 {
				writeJSON(w, http.StatusNotFound, map[string]any{"error": "no policy " + strconv.Quote(only)})
				return
			}
			writeJSON(w, http.StatusOK, lists[0])
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"policies": lists})
	}
	mux.HandleFunc("GET /api/v1/top", func(w http.ResponseWriter, req *http.Request) { top(w, req, "") })
	mux.HandleFunc("GET /api/v1/policies/{policy}/top", func(w http.ResponseWriter, req *http.Request) {
		top(w, req, req.PathValue("policy"))
	})
	// Per-key overrides: a client decided by other limits than its
	// policy's, set live.
	listOverrides := func(w http.ResponseWriter, req *http.Request, policy string) {
		list, err := overrides.List(req.Context(), policy, maxOverridesListed)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error()})
			return
		}
		inForce := map[string]bool{}
		for _, p := range r.handler.Set().Policies {
			inForce[p.Name] = true
		}
		out := make([]map[string]any, 0, len(list))
		for _, o := range list {
			out = append(out, overrideView(o, inForce[o.Policy]))
		}
		writeJSON(w, http.StatusOK, map[string]any{"overrides": out})
	}
	mux.HandleFunc("GET /api/v1/overrides", func(w http.ResponseWriter, req *http.Request) { listOverrides(w, req, "") })
	mux.HandleFunc("GET /api/v1/policies/{policy}/overrides", func(w http.ResponseWriter, req *http.Request) {
		if _, ok := policyNamed(w, req.PathValue("policy")); ok {
			listOverrides(w, req, req.PathValue("policy"))
		}
	})
	mux.HandleFunc("PUT /api/v1/policies/{policy}/overrides/{key}", func(w http.ResponseWriter, req *http.Request) {
		p, key, ok := clientKey(w, req)
		if !ok {
			return
		}
		var o perkey.Override
		if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 64<<10)).Decode(&o); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "body: " + err.Error()})
			return
		}
		o.Policy, o.Key, o.SetAt = p.Name, proxy.StoreKey(key), r.now()
		if err := o.Validate(); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
			return
		}
		l, err := p.OverrideLimiter(p.Limiter.Store(), o)
		if err == nil && r.handler.Set().Config.Store.Backend == config.BackendRedis {
			for _, lim := range l.Limits() {
				if err = redisstore.Check(lim); err != nil {
					break
				}
			}
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
			return
		}
		switch err := overrides.Set(req.Context(), o); {
		case errors.Is(err, perkey.ErrTooManyOverrides):
			writeJSON(w, http.StatusConflict, map[string]any{"error": err.Error()})
		case errors.Is(err, limiter.ErrStoreUnavailable):
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error()})
		case err != nil:
			writeJSON(w, http.StatusInternalServerError, map[string]any{"error": err.Error()})
		default:
			v := overrideView(o, true)
			persisted, where := persistence(req.Context())
			v["persisted"], v["persistence"] = persisted, where
			switch {
			case where == "memory":
				r.log.Warn("a per-key override is kept in memory only: it is lost at restart (set [store] overrides_file)",
					zap.String("policy", p.Name))
			case !persisted:
				r.log.Warn("a per-key override is on a Redis that does not report persistence (RDB or AOF): the instances write it back if Redis restarts alone, but it is lost if every instance restarts with Redis",
					zap.String("policy", p.Name), zap.String("persistence", where))
			}
			writeJSON(w, http.StatusOK, v)
		}
	})
	mux.HandleFunc("DELETE /api/v1/policies/{policy}/overrides/{key}", func(w http.ResponseWriter, req *http.Request) {
		p, key, ok := clientKey(w, req)
		if !ok {
			return
		}
		removed, err := overrides.Remove(req.Context(), p.Name, proxy.StoreKey(key))
		switch {
		case err != nil:
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error()})
		case !removed:
			writeJSON(w, http.StatusNotFound, map[string]any{"error": "no override of that key under policy " + strconv.Quote(p.Name)})
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	mux.HandleFunc("POST /api/v1/reload", func(w http.ResponseWriter, _ *http.Request) {
		if err := r.reload("api"); err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"applied": false, "errors": errorList(err)})
			return
		}
		s := r.Status()
		writeJSON(w, http.StatusOK, map[string]any{"applied": true, "hash": s.Config.Hash, "loaded_at": s.LoadedAt, "requires_restart": s.PendingRestart})
	})
	if token == "" {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, "/api/") {
			got, ok := bearer(req.Header.Get("Authorization"))
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				m.unauthorized.Inc()
				w.Header().Set("WWW-Authenticate", `Bearer realm="limitproxy"`)
				writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "a valid bearer token is required"})
				return
			}
		}
		mux.ServeHTTP(w, req)
	})
}

// bearer returns the token of an Authorization field of the Bearer scheme,
// whose name is case-insensitive, as every HTTP authentication scheme's
// (RFC 9110): "bearer T" and "BEARER T"
// are "Bearer T".
func bearer(auth string) (string, bool) {
	scheme, token, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	return token, token != ""
}

// loopback reports whether the listen address addr ("host:port") accepts
// connections from this machine only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// errorList turns a reload error into its positioned parts.
func errorList(err error) []map[string]any {
	var es config.Errors
	if !errors.As(err, &es) {
		return []map[string]any{{"message": err.Error()}}
	}
	out := make([]map[string]any, len(es))
	for i, e := range es {
		out[i] = map[string]any{"file": e.File, "line": e.Line, "col": e.Col, "key": e.Key, "message": e.Msg, "error": e.Error()}
	}
	return out
}

// configView is GET /api/v1/config: the configuration in force, its hash
// and load time, and the outcome of the last reload. The file itself holds
// no secrets (passwords and tokens are named by environment variable and
// never read into it), so nothing needs redacting beyond not showing those
// variables' values, which this view never does.
func configView(s *reloadStatus) map[string]any {
	c := s.Config
	var policies []map[string]any
	for _, p := range c.Policies {
		policies = append(policies, map[string]any{"name": p.Name, "description": p.Describe()})
	}
	var upstreams []map[string]any
	for _, u := range c.Upstreams {
		var targets []string
		for _, t := range u.Targets {
			targets = append(targets, t.Redacted())
		}
		upstreams = append(upstreams, map[string]any{"name": u.Name, "targets": targets, "timeout": u.Timeout.String(),
			"preserve_host": u.PreserveHost, "max_fails": u.MaxFails, "fail_timeout": u.FailTimeout.String(), "protocol": u.Protocol})
	}
	return map[string]any{
		"file":      c.File,
		"hash":      c.Hash,
		"loaded_at": s.LoadedAt.UTC().Format(time.RFC3339Nano),
		"server": map[string]any{"listen": c.Server.Listen, "rate_limit_headers": c.Server.RateLimitHeaders,
			"trusted_proxies": c.Server.TrustedProxies, "client_ip_header": c.Server.ClientIPHeader, "trusted_hops": c.Server.TrustedHops,
			"ipv6_prefix": c.Server.IPv6Prefix, "proxy_protocol": c.Server.ProxyProtocol, "proxy_protocol_from": c.Server.ProxyProtocolFrom,
			"h2c": c.Server.H2C, "ambiguous_key_parts": c.Server.AmbiguousKeyParts},
		"store":     map[string]any{"backend": c.Store.Backend, "max_keys": c.Store.MaxKeys},
		"upstreams": upstreams,
		"policies":  policies,
		"last_reload": map[string]any{
			"at": s.LastAttempt.UTC().Format(time.RFC3339Nano), "trigger": s.LastTrigger,
			"successful": s.LastError == nil, "error": s.lastError(), "errors": errorsOrNil(s.LastError),
			"successes": s.Successes, "failures": s.Failures, "requires_restart": s.PendingRestart,
		},
	}
}

func errorsOrNil(err error) []map[string]any {
	if err == nil {
		return nil
	}
	return errorList(err)
}

// maxBansListed bounds GET /api/v1/policies/{policy}/bans.
const maxBansListed = 1000

// keyHasher shows client keys as 16 hex digits of HMAC-SHA-256 under a
// secret drawn at start: stable until restart, and not reversible by
// hashing every address.
type keyHasher struct{ secret [32]byte }

func newKeyHasher() *keyHasher {
	h := &keyHasher{}
	rand.Read(h.secret[:])
	return h
}

func (h *keyHasher) hash(key string) string {
	m := hmac.New(sha256.New, h.secret[:])
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil)[:8])
}

// maxOverridesListed bounds GET …/overrides.
const maxOverridesListed = 10000

// overrideView is an override as the admin API shows it: its JSON form
// (its key hashed, proxy.StoreKey), and whether its policy is in force (an override of a
// policy since removed or renamed stays in the store, orphaned).
func overrideView(o perkey.Override, inForce bool) map[string]any {
	b, _ := json.Marshal(o)
	var v map[string]any
	json.Unmarshal(b, &v)
	v["orphaned"] = !inForce
	return v
}
