package proxy

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy/config"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy"
)

// Verdict is what the proxy decided about one request, as Evaluate
// finds it without forwarding anything: for `limitproxy replay`.
type Verdict struct {
	// Policy is the policy that matched; "" when none did.
	Policy string
	// Decision is one of the access log's decisions: Allowed, Queued,
	// Rejected, ShadowRejected, Banned, ShadowBanned, Skipped, Unmatched,
	// Invalid.
	Decision string
	// Key is the client key the deciding limit counted the request under
	// (the most restrictive one's); "" when no limit did.
	Key string
	// Status is the status the proxy answers itself with (429, 403, 400,
	// 404, 405); 0 when the request is forwarded.
	Status int
	// Delay is a leaky bucket's wait before forwarding (Queued).
	Delay time.Duration

	owes *owed // what the answer owes limits that read it; nil: nothing
}

// Evaluator decides requests as a Handler does — the same canonical
// form, matcher, keys, penalty box and limits, in the same order —
// without forwarding them and on the clock its caller gives: `limitproxy
// replay` runs access logs through it on a virtual clock. Concurrency
// limits (per upstream, per client) are not evaluated: they depend on how
// long answers take, which a log records only roughly. It is not safe for
// concurrent use.
type Evaluator struct {
	h   *Handler
	now time.Time
	// srv is the set's [server] with no trusted proxies: a request's
	// RemoteAddr is its client, already worked out when it was logged.
	srv config.Server
}

// NewEvaluator returns an Evaluator of set, whose limits must be bound to
// a store of its own (the memory store with VirtualQueues, so that a
// leaky bucket's queue follows the virtual clock), with bans as its
// penalty box (nil: none).
func NewEvaluator(set *policy.Set, bans perkey.Bans) *Evaluator {
	e := &Evaluator{}
	e.h = New(set, Options{Bans: bans, Now: func() time.Time { return e.now }})
	e.srv = set.Config.Server
	e.srv.TrustedProxies = nil
	return e
}

// Evaluate decides r, arriving at now, as ServeHTTP would. r must look
// like a request the server read: Method, Host, URL (Path and RawQuery),
// Header, and RemoteAddr "ip:port" of the client as the proxy worked it
// out (the access log's client field): no forwarding header it carries is
// read again, so that a request is keyed as it was live.
func (e *Evaluator) Evaluate(r *http.Request, now time.Time) Verdict {
	e.now = now
	h := e.h
	snap := h.snap.Load()
	cfg := &e.srv
	if status, _ := canonicalize(r, cfg); status != 0 {
		return Verdict{Decision: Invalid, Status: status}
	}
	p, ok := snap.set.Match(r)
	if !ok {
		return Verdict{Decision: Unmatched, Status: http.StatusNotFound}
	}
	v := Verdict{Policy: p.Name}
	if r.Method == http.MethodTrace && !snap.pools[p.Upstream].cfg.AllowTrace {
		v.Decision, v.Status = Invalid, http.StatusMethodNotAllowed
		return v
	}
	var (
		key  string
		res  keyResult
		keys [limiter.MaxLimits]string
	)
	if p.OwnKeys {
		res = limitKeys(r, p, cfg, keys[:len(p.Limits)])
		if p.Concurrency != nil {
			if _, own := clientKey(r, p, cfg); own == keyInvalid {
				res = keyInvalid
			}
		}
	} else {
		key, res = clientKey(r, p, cfg)
	}
	switch res {
	case keyInvalid:
		v.Decision, v.Status = Invalid, http.StatusBadRequest
		return v
	case keySkip:
		v.Decision = Skipped
		return v
	case keyReject:
		v.Decision, v.Status = Rejected, http.StatusBadRequest
		return v
	}
	ctx := context.Background()
	shadowBanned := false
	if p.Ban != nil && h.bans != nil {
		if _, ok := h.banned(p, key, keys[:len(p.Limits)], now); ok {
			if !p.Ban.Shadow {
				v.Decision, v.Status, v.Key = Banned, p.Ban.Status, key
				return v
			}
			shadowBanned = true
		}
	}
	var (
		d   limiter.Decision
		err error
	)
	switch {
	case p.Limiter == nil:
		d = limiter.Decision{Allowed: true, Index: -1}
	case p.Deferred != nil:
		if !p.OwnKeys {
			for i := range p.Limits {
				keys[i] = key
			}
		}
		d, v.owes, err = h.decideDeferred(ctx, r, p, keys[:len(p.Limits)], now)
	case p.OwnKeys:
		d, err = p.Limiter.AllowKeys(ctx, keys[:len(p.Limits)], now, 1)
	default:
		d, err = p.Limiter.Allow(ctx, key, now, 1)
	}
	if err != nil {
		v.Decision = Allowed
		return v
	}
	v.Key = key
	if p.OwnKeys && d.Index >= 0 {
		v.Key = keys[d.Index]
	}
	banned := false
	if !d.Allowed && !d.Degraded && !shadowBanned && p.Ban != nil && h.bans != nil {
		_, banned = h.offend(ctx, p, key, keys[:len(p.Limits)], d, now)
	}
	switch {
	case !d.Allowed && p.Mode == config.Shadow:
		v.Decision = ShadowRejected
	case !d.Allowed && banned && !p.Ban.Shadow:
		v.Decision, v.Status = Rejected, p.Ban.Status
	case !d.Allowed:
		v.Decision, v.Status = Rejected, p.Reject.Status
	case d.Delay > 0 && p.Mode == config.Shadow:
		v.Decision = Allowed
	case d.Delay > 0:
		v.Decision, v.Delay = Queued, d.Delay
	default:
		v.Decision = Allowed
	}
	if shadowBanned && v.Decision == Allowed {
		v.Decision = ShadowBanned
	}
	return v
}

// Answer settles what a forwarded request's answer owes the limits that
// read it (count, cost_from): its final status, the cost it reported (-1
// for none), at end, when the answer ended. It does nothing for a
// Verdict that owes nothing.
func (e *Evaluator) Answer(v Verdict, status int, cost int64, end time.Time) {
	if v.owes == nil {
		return
	}
	e.now = end
	hw := headerWriter{}
	if cost >= 0 {
		for i, ch := range v.owes.p.Charges {
			if v.owes.p.Deferred[i] != nil && ch.CostFrom != "" {
				hw.Header().Set(ch.CostFrom, strconv.FormatInt(cost, 10))
			}
		}
	}
	rec := &recorder{ResponseWriter: hw, forwarded: true, status: status, head: status}
	e.h.settle(rec, v.owes)
}

// headerWriter is a ResponseWriter that holds only a header: an answer
// Answer settles, which nobody sends.
type headerWriter map[string][]string

func (w headerWriter) Header() http.Header       { return http.Header(w) }
func (headerWriter) Write(b []byte) (int, error) { return len(b), nil }
func (headerWriter) WriteHeader(int)             {}
