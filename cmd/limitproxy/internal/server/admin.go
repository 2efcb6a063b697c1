package server

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// adminAPI is the admin listener's API (docs/admin-api.md), one method
// per route: health and readiness, the configuration and its reload, one
// client's state, the penalty box, the top offenders and the per-key
// overrides. It reads the policies in force from the reloader's handler at
// each request. Safe for concurrent use.
type adminAPI struct {
	reloader *reloader
	stores   *stores
	// hasher shows client keys hashed: in the top lists unless top_keys
	// = "raw", in the bans and overrides lists always (the handler's, so
	// that the access log shows the same).
	hasher *proxy.KeyHasher
	// tokenSet: [admin] token_env is set, so that /api/ needs the token
	// (revealKey refuses without one).
	tokenSet bool
	log      *zap.Logger // the admin listener's: what an operator asked for
}

// adminHandler returns the admin listener's handler: the API's routes,
// GET /metrics and the dashboard. With a token, every path under /api/
// requires "Authorization: Bearer TOKEN" (requireToken). log is the
// admin listener's logger.
func adminHandler(r *reloader, st *stores, m *metrics, token string, log *zap.Logger) http.Handler {
	a := &adminAPI{reloader: r, stores: st, hasher: r.handler.KeyHasher(), tokenSet: token != "", log: log}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.gatherer(), promhttp.HandlerOpts{}))
	registerDashboard(mux) // GET /dashboard: dashboard.go
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.HandleFunc("GET /api/v1/config", a.config)
	mux.HandleFunc("POST /api/v1/reload", a.reload)
	mux.HandleFunc("GET /api/v1/policies/{policy}/keys/{key}", a.client)
	mux.HandleFunc("DELETE /api/v1/policies/{policy}/keys/{key}", a.resetClient)
	mux.HandleFunc("GET /api/v1/policies/{policy}/bans", a.bans)
	mux.HandleFunc("DELETE /api/v1/policies/{policy}/bans/{key}", a.liftBan)
	mux.HandleFunc("GET /api/v1/history", func(w http.ResponseWriter, _ *http.Request) { m.history.serveHTTP(w, r.now()) })
	mux.HandleFunc("GET /api/v1/top", a.top)
	mux.HandleFunc("GET /api/v1/policies/{policy}/top", a.policyTop)
	mux.HandleFunc("GET /api/v1/policies/{policy}/keys/by-hash/{hash}", a.revealKey)
	mux.HandleFunc("GET /api/v1/overrides", a.overrides)
	mux.HandleFunc("GET /api/v1/policies/{policy}/overrides", a.policyOverrides)
	mux.HandleFunc("PUT /api/v1/policies/{policy}/overrides/{key}", a.putOverride)
	mux.HandleFunc("DELETE /api/v1/policies/{policy}/overrides/{key}", a.deleteOverride)
	if token == "" {
		return mux
	}
	return requireToken(mux, token, m.unauthorized)
}

// requireToken returns next behind a check that every request whose path
// (as the request gives it, before the mux cleans it) begins with /api/
// carries "Authorization: Bearer token", compared in constant time;
// refused counts the requests that do not.
func requireToken(next http.Handler, token string, refused prometheus.Counter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, "/api/") {
			got, ok := bearer(req.Header.Get("Authorization"))
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				refused.Inc()
				w.Header().Set("WWW-Authenticate", `Bearer realm="limitproxy"`)
				writeError(w, http.StatusUnauthorized, "a valid bearer token is required")
				return
			}
		}
		next.ServeHTTP(w, req)
	})
}

// healthz is GET /healthz: the process answers.
func (a *adminAPI) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Write([]byte("ok\n"))
}

// readyz is GET /readyz: ready once a configuration is in force (always,
// once serving) and the store answers (the memory store always does).
func (a *adminAPI) readyz(w http.ResponseWriter, req *http.Request) {
	if err := a.stores.ready(req.Context()); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ready\n"))
}

// config is GET /api/v1/config (configView).
func (a *adminAPI) config(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, configView(a.reloader.Status()))
}

// reload is POST /api/v1/reload: the file read again and applied whole,
// or its errors, each at its position.
func (a *adminAPI) reload(w http.ResponseWriter, _ *http.Request) {
	if err := a.reloader.reload("api"); err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"applied": false, "errors": errorList(err)})
		return
	}
	s := a.reloader.Status()
	writeJSON(w, http.StatusOK, map[string]any{"applied": true, "hash": s.Config.Hash, "loaded_at": s.LoadedAt, "requires_restart": s.PendingRestart})
}

// client is GET /api/v1/policies/{policy}/keys/{key}: one client's quota,
// looked at without being spent.
func (a *adminAPI) client(w http.ResponseWriter, req *http.Request) {
	p, key, ok := a.clientKey(w, req)
	if !ok {
		return
	}
	now := a.reloader.now()
	d, err := p.Limiter.Peek(req.Context(), key, now)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	_, window := p.Limits[d.Index].Quota()
	out := map[string]any{
		"policy": p.Name, "next_request_allowed": d.Allowed,
		"limit": d.Limit, "remaining": d.Remaining, "window_seconds": window.Seconds(),
		"limiting": p.Limits[d.Index].String(), "reset_in_seconds": d.ResetAt.Sub(now).Seconds(),
		"retry_after_seconds": d.RetryAfter.Seconds(), "next_quota_in_seconds": d.Next.Seconds(),
	}
	// A ban in force refuses the next request before the limits see it,
	// as the proxy does (a shadow ban refuses nothing): the answer says
	// so, and until when, rather than the limits' figures alone.
	if p.Ban != nil && !p.Ban.Shadow && a.stores.bans != nil {
		if b, banned := a.stores.bans.Banned(p.Name, proxy.StoreKey(key), now); banned {
			out["next_request_allowed"] = false
			out["banned_until"] = b.Until.UTC().Format(time.RFC3339Nano)
			out["ban_level"] = b.Level
			out["retry_after_seconds"] = max(d.RetryAfter, b.Until.Sub(now)).Seconds()
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// resetClient is DELETE /api/v1/policies/{policy}/keys/{key}: the
// client's state forgotten, its quota whole again.
func (a *adminAPI) resetClient(w http.ResponseWriter, req *http.Request) {
	p, key, ok := a.clientKey(w, req)
	if !ok {
		return
	}
	if err := p.Limiter.Reset(req.Context(), key); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// clientKey returns the policy and the client key a …/keys/{key} or
// …/overrides/{key} request names, or answers why it names none. {key} is
// the raw value of the policy's key part (an IP, an API key...), one path
// segment unescaped once; for a policy with several parts, each is given
// in order as ?part=…&part=… and any {key}.
func (a *adminAPI) clientKey(w http.ResponseWriter, req *http.Request) (*policy.Policy, string, bool) {
	set := a.reloader.handler.Set()
	var p *policy.Policy
	for _, q := range set.Policies {
		if q.Name == req.PathValue("policy") {
			p = q
		}
	}
	if p == nil {
		writeError(w, http.StatusNotFound, "no policy "+strconv.Quote(req.PathValue("policy")))
		return nil, "", false
	}
	if p.OwnKeys {
		// Its limits count under different keys: one key names no
		// single client of all of them.
		writeError(w, http.StatusBadRequest, "policy "+strconv.Quote(p.Name)+
			" has limits counted under keys of their own; the admin API inspects and resets clients only of policies whose limits share the policy's key")
		return nil, "", false
	}
	if p.Limiter == nil {
		writeError(w, http.StatusBadRequest, "policy "+strconv.Quote(p.Name)+
			" has no rate limits (only a [policy.concurrency], or an RLS policy without limits): there is no quota to inspect or reset")
		return nil, "", false
	}
	key, err := proxy.KeyFor(p, &set.Config.Server, keyValues(p, req))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return nil, "", false
	}
	return p, key, true
}

// keyValues returns the values of p's key parts a request names: {key}
// for a key of one part, else the ?part= parameters in order.
func keyValues(p *policy.Policy, req *http.Request) []string {
	if len(p.Key) != 1 {
		return req.URL.Query()["part"]
	}
	return []string{req.PathValue("key")}
}

// policyNamed returns the policy in force named name, or answers 404.
func (a *adminAPI) policyNamed(w http.ResponseWriter, name string) (*policy.Policy, bool) {
	for _, q := range a.reloader.handler.Set().Policies {
		if q.Name == name {
			return q, true
		}
	}
	writeError(w, http.StatusNotFound, "no policy "+strconv.Quote(name))
	return nil, false
}

// bans is GET /api/v1/policies/{policy}/bans: the policy's bans in force,
// at most ?limit= (maxBansListed).
func (a *adminAPI) bans(w http.ResponseWriter, req *http.Request) {
	p, ok := a.policyNamed(w, req.PathValue("policy"))
	if !ok {
		return
	}
	limit := maxBansListed
	if v := req.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "limit: "+strconv.Quote(v)+" is not a whole number above zero")
			return
		}
		limit = min(n, maxBansListed)
	}
	now := a.reloader.now()
	list, err := a.stores.bans.List(req.Context(), p.Name, now, limit)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	out := make([]map[string]any, 0, len(list))
	for _, b := range list {
		out = append(out, map[string]any{
			"key": a.hasher.Stored(b.Key), "level": b.Level,
			"since": b.Since.UTC().Format(time.RFC3339Nano), "until": b.Until.UTC().Format(time.RFC3339Nano),
			"until_in_seconds": b.Until.Sub(now).Seconds(),
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"policy": p.Name, "bans": out})
}

// liftBan is DELETE /api/v1/policies/{policy}/bans/{key}: the client
// named as for …/keys/{key}, or ?hash= its key hash as the bans list shows
// it (a limit's own key, a key of several parts), is let in again. Named
// by its key, the client starts afresh: its counts in the policy's limits
// are reset too (as DELETE …/keys/{key}), so that its next request is not
// the offence that bans it again (204). Named by its hash, which cannot be
// turned back into the key the limits count under, only the ban is lifted:
// the answer (200) says so, and what to call to reset the counts.
func (a *adminAPI) liftBan(w http.ResponseWriter, req *http.Request) {
	p, ok := a.policyNamed(w, req.PathValue("policy"))
	if !ok {
		return
	}
	key, raw := req.URL.Query().Get("hash"), ""
	if key != "" {
		stored, ok, err := a.bannedStoreKey(req, p.Name, key)
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		if !ok {
			writeError(w, http.StatusNotFound, "no ban under the key hash "+strconv.Quote(key)+" in policy "+strconv.Quote(p.Name)+"'s bans list")
			return
		}
		key = stored
	} else {
		var err error
		raw, err = proxy.KeyFor(p, &a.reloader.handler.Set().Config.Server, keyValues(p, req))
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		key = proxy.StoreKey(raw)
	}
	lifted, err := a.stores.bans.Lift(req.Context(), p.Name, key)
	switch {
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	case !lifted:
		writeError(w, http.StatusNotFound, "no ban of that key under policy "+strconv.Quote(p.Name))
		return
	}
	if raw != "" && p.Limiter != nil && !p.OwnKeys {
		if err := p.Limiter.Reset(req.Context(), raw); err != nil {
			writeError(w, http.StatusServiceUnavailable, "the ban is lifted, but the client's counts could not be reset: "+err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	detail := "the ban is lifted; the client's counts in the policy's limits are as they were (a key hash does not name the key they count under): its next request over a limit is an offence again. Reset them with DELETE /api/v1/policies/" + p.Name + "/keys/{key}"
	if p.OwnKeys {
		detail = "the ban is lifted; the policy's limits count under keys of their own, which are not reset: its next request over a limit is an offence again"
	}
	writeJSON(w, http.StatusOK, map[string]any{"policy": p.Name, "lifted": true, "counts_reset": false, "detail": detail})
}

// bannedStoreKey returns the stored form of the banned key whose key hash
// is hash, looked for among the bans the list shows (maxBansListed). A
// key hash cannot be reversed: it is found by hashing what is listed. The
// stored form itself (32 hex digits, proxy.StoreKey) is taken as it is.
func (a *adminAPI) bannedStoreKey(req *http.Request, policy, hash string) (string, bool, error) {
	if len(hash) == 32 {
		return hash, true, nil
	}
	list, err := a.stores.bans.List(req.Context(), policy, a.reloader.now(), maxBansListed)
	if err != nil {
		return "", false, err
	}
	for _, b := range list {
		if a.hasher.Stored(b.Key) == hash {
			return b.Key, true, nil
		}
	}
	return "", false, nil
}

// top is GET /api/v1/top: every policy's top offenders.
func (a *adminAPI) top(w http.ResponseWriter, req *http.Request) {
	n, ok := topN(w, req)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"policies": a.topLists(n, "")})
}

// policyTop is GET /api/v1/policies/{policy}/top: one policy's.
func (a *adminAPI) policyTop(w http.ResponseWriter, req *http.Request) {
	n, ok := topN(w, req)
	if !ok {
		return
	}
	only := req.PathValue("policy")
	lists := a.topLists(n, only)
	if len(lists) == 0 {
		writeError(w, http.StatusNotFound, "no policy "+strconv.Quote(only))
		return
	}
	writeJSON(w, http.StatusOK, lists[0])
}

// topN returns the ?n= of a top request (10 if none), or answers 400.
func topN(w http.ResponseWriter, req *http.Request) (int, bool) {
	v := req.URL.Query().Get("n")
	if v == "" {
		return 10, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > proxy.TopK {
		writeError(w, http.StatusBadRequest, "n: "+strconv.Quote(v)+" must be a whole number from 1 to "+strconv.Itoa(proxy.TopK))
		return 0, false
	}
	return n, true
}

// topLists returns the n top offenders of every policy, or of the policy
// named only if it is not "", as the API shows them: keys hashed, or raw
// with top_keys = "raw".
func (a *adminAPI) topLists(n int, only string) []map[string]any {
	raw := a.reloader.handler.Set().Config.Admin.RawTopKeys
	show, keys := a.hasher.Key, "hashed"
	if raw {
		show, keys = func(key string) string {
			parts, _ := proxy.KeyParts(key)
			return strings.Join(parts, " ")
		}, "raw"
	}
	lists := []map[string]any{}
	for _, l := range a.reloader.handler.Top(n) {
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
	return lists
}

// revealKey is GET /api/v1/policies/{policy}/keys/by-hash/{hash}: the
// client key of a top offender the lists show by its key hash, for an
// operator who holds the token. A key hash cannot be reversed: it is
// looked for among the keys the policy's top-offender lists hold now (at
// most 2 × proxy.TopK, hashed at each call), so the answer only ever names
// a client those lists show, and a guessed hash finds nothing else: no
// oracle over the store's keys or over addresses. Keys may be credentials
// (an API key), so without a token, when anyone who reaches the listener
// may call it, the reveal is refused (403), unless top_keys = "raw" shows
// the keys to them anyway. Each reveal is logged, with the hash.
func (a *adminAPI) revealKey(w http.ResponseWriter, req *http.Request) {
	p, ok := a.policyNamed(w, req.PathValue("policy"))
	if !ok {
		return
	}
	hash := strings.ToLower(req.PathValue("hash"))
	if !isKeyHash(hash) {
		writeError(w, http.StatusBadRequest, "hash: "+strconv.Quote(req.PathValue("hash"))+" is not a key hash (16 hex digits, as the top offenders show one)")
		return
	}
	if !a.tokenSet && !a.reloader.handler.Set().Config.Admin.RawTopKeys {
		writeError(w, http.StatusForbidden, "revealing a client key needs [admin] token_env: without a token, anyone who reaches the admin listener could read client keys, which may be credentials")
		return
	}
	key, found := a.topKey(p.Name, hash)
	if !found {
		writeError(w, http.StatusNotFound, "no key with hash "+strconv.Quote(hash)+" among policy "+strconv.Quote(p.Name)+
			"'s top offenders now (a key is revealed only while the lists hold it)")
		return
	}
	parts, _ := proxy.KeyParts(key)
	if parts == nil {
		parts = []string{} // key = []: the policy's one shared key
	}
	if req.Method != http.MethodHead { // a HEAD is answered no key
		remote, _, _ := net.SplitHostPort(req.RemoteAddr)
		a.log.Info("client key revealed", zap.String("policy", p.Name), zap.String("key", hash), zap.String("remote_ip", remote))
	}
	writeJSON(w, http.StatusOK, map[string]any{"policy": p.Name, "hash": hash, "key": strings.Join(parts, " "), "parts": parts})
}

// topKey returns the key of policy's top-offender lists whose key hash
// is hash, if they hold one now.
func (a *adminAPI) topKey(policy, hash string) (string, bool) {
	for _, l := range a.reloader.handler.Top(proxy.TopK) {
		if l.Policy != policy {
			continue
		}
		for _, list := range [][]proxy.TopEntry{l.Rejected, l.Closest} {
			for _, e := range list {
				if a.hasher.Key(e.Key) == hash {
					return e.Key, true
				}
			}
		}
	}
	return "", false
}

// isKeyHash reports whether s has the form of a key hash: 16 lower-case
// hex digits (proxy.KeyHasher).
func isKeyHash(s string) bool {
	if len(s) != 16 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// overrides is GET /api/v1/overrides: every per-key override stored (a
// client decided by other limits than its policy's, set live).
func (a *adminAPI) overrides(w http.ResponseWriter, req *http.Request) {
	a.listOverrides(w, req, "")
}

// policyOverrides is GET /api/v1/policies/{policy}/overrides: those of a
// policy in force.
func (a *adminAPI) policyOverrides(w http.ResponseWriter, req *http.Request) {
	if _, ok := a.policyNamed(w, req.PathValue("policy")); ok {
		a.listOverrides(w, req, req.PathValue("policy"))
	}
}

// listOverrides answers the overrides stored of policy ("" for all), at
// most maxOverridesListed, each marked orphaned if its policy is no
// longer in force.
func (a *adminAPI) listOverrides(w http.ResponseWriter, req *http.Request, policy string) {
	list, err := a.stores.overrides.List(req.Context(), policy, maxOverridesListed)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	inForce := map[string]bool{}
	for _, p := range a.reloader.handler.Set().Policies {
		inForce[p.Name] = true
	}
	out := make([]map[string]any, 0, len(list))
	for _, o := range list {
		out = append(out, a.overrideView(o, inForce[o.Policy]))
	}
	writeJSON(w, http.StatusOK, map[string]any{"overrides": out})
}

// putOverride is PUT /api/v1/policies/{policy}/overrides/{key}: the
// client, named as for …/keys/{key}, is decided by the override the body
// gives from now on, on every instance of the store.
func (a *adminAPI) putOverride(w http.ResponseWriter, req *http.Request) {
	p, key, ok := a.clientKey(w, req)
	if !ok {
		return
	}
	o, ok := a.decodeOverride(w, req, p, key)
	if !ok {
		return
	}
	switch err := a.stores.overrides.Set(req.Context(), o); {
	case errors.Is(err, perkey.ErrTooManyOverrides):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, limiter.ErrStoreUnavailable):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
	default:
		v := a.overrideView(o, true)
		persisted, where := a.stores.persistence(req.Context())
		v["persisted"], v["persistence"] = persisted, where
		a.warnPersistence(p.Name, persisted, where)
		writeJSON(w, http.StatusOK, v)
	}
}

// decodeOverride reads the override of p's client key from the body (at
// most 64 KiB) and checks it as the store will apply it (on Redis, each
// limit as Redis can count it), or answers 400.
func (a *adminAPI) decodeOverride(w http.ResponseWriter, req *http.Request, p *policy.Policy, key string) (perkey.Override, bool) {
	var o perkey.Override
	if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 64<<10)).Decode(&o); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return o, false
	}
	o.Policy, o.Key, o.SetAt = p.Name, proxy.StoreKey(key), a.reloader.now()
	if err := o.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return o, false
	}
	l, err := p.OverrideLimiter(p.Limiter.Store(), o)
	if err == nil && a.reloader.handler.Set().Config.Store.Backend == config.BackendRedis {
		for _, lim := range l.Limits() {
			if err = redisstore.Check(lim); err != nil {
				break
			}
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return o, false
	}
	return o, true
}

// warnPersistence logs, for an override of policy just stored, that a
// restart can lose it, if one can.
func (a *adminAPI) warnPersistence(policy string, persisted bool, where string) {
	switch {
	case where == "memory":
		a.reloader.log.Warn("a per-key override is kept in memory only: it is lost at restart (set [store] overrides_file)",
			zap.String("policy", policy))
	case !persisted:
		a.reloader.log.Warn("a per-key override is on a Redis that does not report persistence (RDB or AOF): the instances write it back if Redis restarts alone, but it is lost if every instance restarts with Redis",
			zap.String("policy", policy), zap.String("persistence", where))
	}
}

// deleteOverride is DELETE /api/v1/policies/{policy}/overrides/{key}: the
// client is decided by its policy's limits again.
func (a *adminAPI) deleteOverride(w http.ResponseWriter, req *http.Request) {
	p, key, ok := a.clientKey(w, req)
	if !ok {
		return
	}
	removed, err := a.stores.overrides.Remove(req.Context(), p.Name, proxy.StoreKey(key))
	switch {
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case !removed:
		writeError(w, http.StatusNotFound, "no override of that key under policy "+strconv.Quote(p.Name))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
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

// writeError answers {"error": msg} with status.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": msg})
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

// maxOverridesListed bounds GET …/overrides.
const maxOverridesListed = 10000

// overrideView is an override as the admin API shows it: its JSON form
// with its key as the key hash, and whether its policy is in force (an override of a
// policy since removed or renamed stays in the store, orphaned).
func (a *adminAPI) overrideView(o perkey.Override, inForce bool) map[string]any {
	b, _ := json.Marshal(o)
	var v map[string]any
	json.Unmarshal(b, &v)
	v["key"] = a.hasher.Stored(o.Key)
	v["orphaned"] = !inForce
	return v
}
