package proxy

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// The penalty box ([policy.ban], docs/response-limits.md): a key that a
// limit of its policy rejects is banned, and its requests are refused
// without reaching the limits or the upstream until the ban ends.

// banned reports whether a key r is counted under by p is banned at now:
// key, or with OwnKeys any of keys.
func (h *Handler) banned(p *policy.Policy, key string, keys []string, now time.Time) (perkey.Ban, bool) {
	if empty(h.bans) {
		return perkey.Ban{}, false
	}
	if !p.OwnKeys {
		return h.bans.Banned(p.Name, StoreKey(key), now)
	}
	for i, k := range keys {
		if k == limiter.SkipKey || (i > 0 && k == keys[i-1]) {
			continue
		}
		if b, ok := h.bans.Banned(p.Name, StoreKey(k), now); ok {
			return b, true
		}
	}
	return perkey.Ban{}, false
}

// offend bans the key of the limit that rejected a request of p (d), and
// returns the ban if it was recorded.
func (h *Handler) offend(ctx context.Context, p *policy.Policy, key string, keys []string, d limiter.Decision, now time.Time) (perkey.Ban, bool) {
	k := key
	if p.OwnKeys && d.Index >= 0 {
		k = keys[d.Index]
	}
	if k == limiter.SkipKey {
		return perkey.Ban{}, false
	}
	b := p.Ban
	ban, err := h.bans.Ban(ctx, p.Name, StoreKey(k), perkey.BanParams{Duration: b.Duration, Factor: b.Escalation, Max: b.MaxDuration, Memory: b.ForgetAfter}, now)
	if err != nil {
		h.log.Warn("banning a key failed", zap.String("policy", p.Name), zap.Error(err))
		return perkey.Ban{}, false
	}
	if began(ban, now) {
		h.metrics.banned(p.Name)
		h.log.Info("key banned", zap.String("policy", p.Name), zap.String("key", h.hasher.Stored(StoreKey(k))), zap.Int64("level", ban.Level), zap.Time("until", ban.Until), zap.Bool("shadow", b.Shadow))
	}
	return ban, true
}

// began reports whether the offence at now began ban, the record Ban
// returned for it, rather than fell in a ban already running (decided
// before this instance saw that ban), which changes nothing: both stores
// return the record of the offence that began a ban with Since = now.
func began(ban perkey.Ban, now time.Time) bool { return ban.Since.Equal(now) }

// refuseBanned answers a request of p whose key is banned (b): the ban's
// status (429 with Retry-After until the ban ends, or 403), the
// rate-limit fields of mode saying so (setBanHeaders), and a problem+json
// body. d is the decision whose offence began the ban, nil for a key
// banned already.
func (h *Handler) refuseBanned(w *recorder, ps *policyState, p *policy.Policy, key string, b perkey.Ban, d *limiter.Decision, mode config.HeadersMode, now time.Time) {
	status := p.Ban.Status
	setBanHeaders(w.Header(), mode, h.quotaView(ps, p, key), d, b, now)
	if w.grpc {
		// RESOURCE_EXHAUSTED with the ban's pushback (429), as a rate
		// limit's rejection, or PERMISSION_DENIED (403): never
		// UNAVAILABLE, which clients retry at once.
		w.grpcStatus = status
		if status == http.StatusForbidden {
			writeGRPCStatus(w, grpcPermissionDenied, "banned: policy "+p.Name)
			return
		}
		wait := max(b.Until.Sub(now), 0)
		if d != nil && !d.Allowed && d.RetryAfter < limiter.Never/2 {
			wait = max(wait, d.RetryAfter)
		}
		w.Header().Set("Grpc-Retry-Pushback-Ms", strconv.FormatInt(int64((wait+time.Millisecond-1)/time.Millisecond), 10))
		writeGRPCStatus(w, grpcResourceExhausted, "banned: policy "+p.Name)
		return
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.FormatInt(banRetryAfter(d, b, now), 10))
	}
	w.Header().Set("Cache-Control", "no-store")
	writeProblem(w, status, problem{Type: "about:blank", Title: http.StatusText(status), Status: status,
		Detail: "this client went over a limit of policy " + p.Name + " and is refused until " + b.Until.UTC().Format(time.RFC3339)})
}
