package proxy

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy/internal/clientkey"
)

// Decision is what the proxy decided about one request, as the access
// log's decision field, the limitproxy_requests_total metric's decision
// label and `limitproxy replay` name it (String). The zero Decision is
// none: a request not decided yet, whose String is "".
type Decision uint8

// The decisions. Their names (String) are part of the user contract
// (docs/metrics.md): they never change.
const (
	_              Decision = iota
	Allowed                 // forwarded (also when its limits failed to decide)
	Rejected                // refused by a limit or its policy's concurrency (429), or for lacking a part of its key (400)
	Queued                  // forwarded after waiting in a leaky bucket's queue
	ShadowRejected          // over a limit of a shadow policy: forwarded
	Unmatched               // no policy matches: forwarded unlimited ([server] unmatched = "forward"), else 404
	Skipped                 // on_missing = "skip": forwarded without limiting
	Invalid                 // refused before matching, or for an ambiguous key part: 400 or 405 (see canonicalize)
	Shed                    // turned away by its upstream's concurrency limit: 503
	Banned                  // its key is in the policy's penalty box: 429 or 403
	ShadowBanned            // its key is in a shadow penalty box: forwarded
	StreamRefused           // its key streams max_streams_per_key bodies already: 429 (streams.go)
	numDecisions
)

var decisionNames = [numDecisions]string{
	Allowed:        "allowed",
	Rejected:       "rejected",
	Queued:         "queued",
	ShadowRejected: "shadow_rejected",
	Unmatched:      "unmatched",
	Skipped:        "skipped",
	Invalid:        "invalid",
	Shed:           "shed",
	Banned:         "banned",
	ShadowBanned:   "shadow_banned",
	StreamRefused:  "stream_refused",
}

// String returns d's name: "allowed", "rejected", "queued",
// "shadow_rejected", "unmatched", "skipped", "invalid", "shed", "banned",
// "shadow_banned" or "stream_refused"; "" for the zero Decision.
func (d Decision) String() string {
	if d < numDecisions {
		return decisionNames[d]
	}
	return "decision(" + strconv.Itoa(int(d)) + ")"
}

// MarshalText returns d's name, so that a Decision is written as its
// name in JSON.
func (d Decision) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// reply is which answer of its own the proxy gives a request decide
// refused.
type reply uint8

const (
	noReply        reply = iota // no answer of the proxy's: forward (after any queue)
	replyInvalid                // canonicalize refused it: its status and detail
	replyNoMatch                // 404
	replyTrace                  // 405: TRACE to an upstream that does not allow it
	replyAmbiguous              // 400: a key part repeated or malformed
	replyNoKey                  // 400: a key part missing, with on_missing = "reject"
	replyNoToken                // 401: no valid token for a jwt: part, with on_missing = "unauthorized"
	replyBan                    // the ban's status (banned, or banned by this offence)
	replyLimit                  // the policy's rejection (429)
)

// ruling is what decide found about one request: its decision, the answer
// the proxy gives it (or that it is to be forwarded), and what the rest of
// the data path needs: the keys, the limits' Decision, what the answer
// owes the limits that read it.
type ruling struct {
	p        *policy.Policy // nil: no policy (Invalid before matching, Unmatched)
	ps       *policyState   // p's state in the request's snapshot
	decision Decision
	reply    reply
	status   int    // the answer's status; 0 when forwarded
	detail   string // replyInvalid's detail

	// key is r's client key under p; with OwnKeys, "" (each limit's key
	// is in keys). keys has room for limiter.MaxLimits keys: the caller's
	// array, so that a ruling stays on the caller's stack.
	key  string
	keys []string
	// counted is the key the deciding limit counted r under: key, or
	// with OwnKeys the key of the limit d.Index names ("" for none).
	counted string

	// limited reports that p's limits decided (no store error): the
	// RateLimit fields describe d under hp.
	limited bool
	d       limiter.Decision
	hp      *policy.Policy // p, or the view of p with a per-key override's limits
	ban     perkey.Ban     // replyBan's ban

	// gated reports that r passes p's [policy.concurrency] before it is
	// forwarded, under gateKey; noGateKey that r lacks that key (OwnKeys,
	// on_missing = "reject"), which refuses it before the gate.
	gated     bool
	gateKey   string
	noGateKey clientkey.Result
	// shadowBanned reports that a key r is counted under is in a shadow
	// penalty box.
	shadowBanned bool
	// n is the request's weight (each limit multiplies it by its own
	// cost); 0 counts as 1. peek asks the limits what they would decide
	// without counting it (an RLS descriptor's hits_addend of 0): no
	// offence, no place in a leaky bucket's queue.
	n    int64
	peek bool
	// rls reports that askRLS asks p's limits (an RLS descriptor's: a
	// limit of 0, or compat's counting); compat that [rls] compatibility
	// is envoyproxy/ratelimit's (rls_compat.go).
	rls, compat bool
	// entries are an RLS descriptor's, which askRLS names its counts by
	// with compat (countKey); nil for a request.
	entries []policy.DescriptorEntry
	// verbatim reports that the upstream receives r's target as the
	// client sent it, not limitproxy's canonical form (forward auth: the
	// asking proxy forwards the original), so that its path is also read
	// as sent (readings.go).
	verbatim bool
	// owes is what the answer owes the limits that read it (count,
	// cost_from); nil: nothing.
	owes *owed
}

// decide decides x's request, as it arrived (its facts: the snapshot,
// the server settings, the client, the time): canonical form, policy, keys, penalty box, per-key overrides,
// limits (reserving what limits that read the answer need), and the
// offence a rejection makes. It is the one path both ServeHTTP and the
// Evaluator take: what follows it (waiting in a leaky bucket's queue, the
// concurrency gates, forwarding, settling the answer) is theirs. It
// rewrites r as the upstream is to see it (canonicalize, pinned key
// headers). o must be the zero ruling but for its keys.
func (h *Handler) decide(ctx context.Context, x *exchange, o *ruling) {
	if !h.match(x, o) {
		return
	}
	if o.p == x.req.snap.set.Unmatched {
		// No policy matches: forwarded, counted against no limit.
		o.decision = Unmatched
		return
	}
	if !h.buildKeys(x, o) {
		return
	}
	if h.inPenaltyBox(x.req.start, o) {
		return
	}
	h.applyLimits(ctx, x.req.r, x.req.start, o)
}

// recordedKey is the client key the access log shows the request under,
// and an upstream's fair share counts it under: its key, or with OwnKeys
// its first limit's.
func (o *ruling) recordedKey() string {
	if o.p != nil && o.p.OwnKeys {
		return o.keys[0]
	}
	return o.key
}

// refuse records that the proxy answers r itself.
func (o *ruling) refuse(d Decision, a reply, status int) {
	o.decision, o.reply, o.status = d, a, status
}

// refuseNoKey refuses a request lacking a part of its key under
// on_missing "reject" (400) or, for a missing token, "unauthorized" (401).
func (o *ruling) refuseNoKey(res clientkey.Result) {
	if res == clientkey.Unauthorized {
		o.refuse(Rejected, replyNoToken, http.StatusUnauthorized)
		return
	}
	o.refuse(Rejected, replyNoKey, http.StatusBadRequest)
}

// match puts r in canonical form and finds its policy; false when r is
// answered without one (Invalid, Unmatched) or refused as TRACE.
func (h *Handler) match(x *exchange, o *ruling) bool {
	r, snap, s := x.req.r, x.req.snap, x.req.srv
	var sent string // the path as the upstream receives it, if not canonical
	if o.verbatim && strings.HasPrefix(r.RequestURI, "/") {
		sent, _, _ = strings.Cut(r.RequestURI, "?")
	}
	if status, detail := canonicalize(r, s); status != 0 {
		o.refuse(Invalid, replyInvalid, status)
		o.detail = detail
		return false
	}
	p, ok := snap.set.MatchClaims(r, x)
	if !ok {
		// [server] unmatched: forwarded under the set's policy of no
		// limits (its readings checked as a policy's are), or 404.
		if p = snap.set.Unmatched; p == nil {
			o.refuse(Unmatched, replyNoMatch, http.StatusNotFound)
			return false
		}
	}
	if sent == "" {
		sent = escapedPath(r.URL)
	}
	if detail := checkReadings(r, x, snap.set, p, sent, !s.CaseSensitivePaths, snap.slashed); detail != "" {
		status := http.StatusBadRequest
		if detail == tooLongToRead {
			status = http.StatusRequestURITooLong
		}
		o.refuse(Invalid, replyInvalid, status)
		o.detail = detail
		return false
	}
	o.p, o.hp, o.ps = p, p, snap.policies[p]
	if len(p.Limits) > cap(o.keys) {
		// More limits than the recorder holds keys for (inlineKeys).
		o.keys = make([]string, len(p.Limits))
	}
	if r.Method == http.MethodTrace && !snap.pools[p.Upstream].cfg.AllowTrace {
		o.refuse(Invalid, replyTrace, http.StatusMethodNotAllowed)
		return false
	}
	return true
}

// buildKeys builds r's client key (with OwnKeys, each limit's, and the
// policy's own for its [policy.concurrency]); false when r is refused for
// its key (ambiguous, or missing with on_missing = "reject") or
// forwarded without limiting (Skipped).
func (h *Handler) buildKeys(x *exchange, o *ruling) bool {
	p, r := o.p, x.req.r
	q := x.keyRequest()
	var (
		res    clientkey.Result
		ownRes = clientkey.OK
	)
	if p.OwnKeys {
		res = clientkey.Limits(&q, p, o.keys[:len(p.Limits)])
		if p.Concurrency != nil {
			// Built now, so that an ambiguous part of it is refused
			// before any limit counts the request.
			if o.gateKey, ownRes = clientkey.Policy(&q, p); ownRes == clientkey.Invalid {
				res = clientkey.Invalid
			}
		}
	} else {
		o.key, res = clientkey.Policy(&q, p)
		o.gateKey = o.key
	}
	if res == clientkey.Invalid {
		o.refuse(Invalid, replyAmbiguous, http.StatusBadRequest)
		return false
	}
	if x.req.srv.AmbiguousKeyParts == config.AmbiguousRewrite {
		clientkey.Rewrite(r, p)
	}
	switch res {
	case clientkey.Skip:
		o.decision = Skipped
		return false
	case clientkey.Reject, clientkey.Unauthorized:
		o.refuseNoKey(res)
		return false
	}
	clientkey.Pin(r, p)
	// The request passes the policy's concurrency gate under its own key,
	// unless that key skips it; one that lacks it is refused (gate).
	o.gated = p.Concurrency != nil && ownRes != clientkey.Skip
	if ownRes == clientkey.Reject || ownRes == clientkey.Unauthorized {
		o.noGateKey = ownRes
	}
	return true
}

// inPenaltyBox refuses r when a key it is counted under is banned (not
// in shadow); reports true when it did.
func (h *Handler) inPenaltyBox(now time.Time, o *ruling) bool {
	p := o.p
	if p.Ban == nil || h.bans == nil {
		return false
	}
	b, ok := h.banned(p, o.key, o.keys[:len(p.Limits)], now)
	if !ok {
		return false
	}
	if p.Ban.Shadow {
		// Counted, never refused: the limits decide as usual.
		o.shadowBanned = true
		return false
	}
	o.refuse(Banned, replyBan, p.Ban.Status)
	o.ban, o.counted = b, o.key
	return true
}

// applyLimits asks p's limits (or r's key's override's) about r, bans the
// key of a limit that rejects it, and rules on what the Decision says.
func (h *Handler) applyLimits(ctx context.Context, r *http.Request, now time.Time, o *ruling) {
	p := o.p
	d, err := h.ask(ctx, r, now, o)
	if err != nil {
		// The memory store never fails; the Redis store's on_error
		// policy decides this case there. Forwarded as it is.
		h.logLimiterFailed(p, err)
		o.decision, o.gated = Allowed, false
		return
	}
	o.d, o.limited = d, true
	o.counted = o.key
	if p.OwnKeys {
		o.counted = ""
		if d.Index >= 0 {
			o.counted = o.keys[d.Index]
		}
	}
	banned := false
	if !d.Allowed && !d.Degraded && !o.shadowBanned && !o.peek && p.Ban != nil && h.bans != nil {
		// Over a limit: an offence. (Not a rejection made without the
		// shared store, on_error: an outage is nobody's offence.)
		o.ban, banned = h.offend(context.WithoutCancel(ctx), p, o.key, o.keys[:len(p.Limits)], d, now)
	}
	switch {
	case !d.Allowed && p.Mode == config.Shadow:
		o.decision = ShadowRejected
		h.logShadowReject(p, d.RetryAfter)
	case !d.Allowed && banned && !p.Ban.Shadow:
		// The offence's answer is the ban's: its status, and Retry-After
		// until it ends rather than until the limit would admit.
		o.refuse(Rejected, replyBan, p.Ban.Status)
		return
	case !d.Allowed:
		o.refuse(Rejected, replyLimit, p.Reject.Status)
		return
	case d.Delay > 0 && o.peek:
		// Would wait its turn: admitted, holding no place to wait in.
		o.decision = Allowed
	case d.Delay > 0 && p.Mode == config.Shadow:
		// Counted in the queue like an enforced request, never held.
		o.decision = Allowed
		h.logShadowDelay(p, d.Delay)
	case d.Delay > 0:
		o.decision = Queued
	default:
		o.decision = Allowed
	}
	if o.shadowBanned && o.decision == Allowed {
		o.decision = ShadowBanned
	}
	if o.gated && o.noGateKey != clientkey.OK {
		// The policy's own key, which its rate limits did not use, is
		// missing: refused before its concurrency gate.
		o.refuseNoKey(o.noGateKey)
		if d.Delay > 0 && p.Mode != config.Shadow {
			leaveQueue(p, d)
		}
		if o.owes != nil {
			h.refund(ctx, o.owes)
			o.owes = nil
		}
	}
}

// logLimiterFailed, logShadowReject and logShadowDelay log for
// applyLimits. They are not inlined, so that their fields take no room
// on applyLimits's stack frame, which every decision's stack holds (an
// RLS call's then stays within 8 KiB: rls.StreamWorkers).
//
//go:noinline
func (h *Handler) logLimiterFailed(p *policy.Policy, err error) {
	h.log.Error("limiter failed; request forwarded", zap.String("policy", p.Name), zap.Error(err))
}

//go:noinline
func (h *Handler) logShadowReject(p *policy.Policy, retryAfter time.Duration) {
	h.log.Info("shadow policy would reject", zap.String("policy", p.Name), zap.Duration("retry_after", retryAfter))
}

//go:noinline
func (h *Handler) logShadowDelay(p *policy.Policy, delay time.Duration) {
	h.log.Debug("shadow policy would delay", zap.String("policy", p.Name), zap.Duration("delay", delay))
}

// ask asks the limits that decide r, keeping in o what the answer will
// owe them and the policy view the RateLimit fields describe.
func (h *Handler) ask(ctx context.Context, r *http.Request, now time.Time, o *ruling) (limiter.Decision, error) {
	p := o.p
	switch {
	case o.rls:
		return h.askRLS(ctx, now, o)
	case p.Limiter == nil:
		// Only a [policy.concurrency]: no rate to decide.
		return limiter.Decision{Allowed: true, Index: -1}, nil
	case p.Deferred != nil:
		keys := o.keys[:len(p.Limits)]
		if !p.OwnKeys {
			for i := range keys {
				keys[i] = o.key
			}
		}
		d, owes, err := h.decideDeferred(ctx, r, p, keys, now)
		o.owes = owes
		return d, err
	case p.OwnKeys && o.peek:
		return p.Limiter.PeekKeys(ctx, o.keys[:len(p.Limits)], now, max(o.n, 1))
	case p.OwnKeys:
		return p.Limiter.AllowKeys(ctx, o.keys[:len(p.Limits)], now, max(o.n, 1))
	}
	l := p.Limiter
	if h.overrides != nil {
		if ol, view, ok := h.overridden(o.ps, p, o.key); ok {
			l, o.hp = ol, view
		}
	}
	if o.peek {
		return l.PeekN(ctx, o.key, now, max(o.n, 1))
	}
	return l.Allow(ctx, o.key, now, max(o.n, 1))
}
