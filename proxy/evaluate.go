package proxy

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy/internal/clientkey"
	"github.com/limitproxy/limitproxy/proxy/internal/identity"

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
	Decision Decision
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

// Evaluator decides requests as a Handler does: the same function
// (canonical form, matcher, keys, penalty box, per-key overrides, limits)
// decides, without forwarding and on the clock its caller gives:
// `limitproxy replay` runs access logs through it on a virtual clock.
// Concurrency limits (per upstream, per client) are not evaluated: they
// depend on how long answers take, which a log records only roughly. It
// is not safe for concurrent use.
type Evaluator struct {
	h   *Handler
	now time.Time
	// srv is the set's [server] with no trusted proxies: a request's
	// RemoteAddr is its client, already worked out when it was logged.
	srv config.Server
}

// EvaluatorOptions configures an Evaluator. The zero value has no
// penalty box and no overrides.
type EvaluatorOptions struct {
	// Bans is the penalty box, for policies with a [policy.ban]; nil:
	// such policies ban nobody.
	Bans perkey.Bans
	// Overrides are the per-key overrides; nil: none. The Evaluator only
	// reads them.
	Overrides perkey.Overrides
}

// NewEvaluator returns an Evaluator of set, whose limits must be bound to
// a store of its own (the memory store with VirtualQueues, so that a
// leaky bucket's queue follows the virtual clock).
func NewEvaluator(set *policy.Set, o EvaluatorOptions) *Evaluator {
	e := &Evaluator{}
	e.h = New(set, Options{Bans: o.Bans, Overrides: o.Overrides, Now: func() time.Time { return e.now }})
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
	var keys [limiter.MaxLimits]string
	o := ruling{keys: keys[:]}
	snap := e.h.snap.Load()
	x := e.h.newExchange(headerWriter{}, r, snap, &e.srv, now)
	x.req.r = r
	x.req.client = clientkey.Resolve(r, &e.srv)
	if byPath, ok := r.Context().Value(claimsKey{}).(map[string]string); ok {
		// WithClaims checked nothing: text that is not JSON is no claim.
		x.req.claims, _ = identity.FromJSON(byPath)
	}
	e.h.decide(context.Background(), x, &o)
	v := Verdict{Decision: o.decision, Status: o.status, owes: o.owes}
	if o.p != nil {
		v.Policy = o.p.Name
	}
	switch o.reply {
	case noReply, replyBan, replyLimit:
		v.Key = o.counted
	}
	if o.decision == Queued {
		v.Delay = o.d.Delay
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
	x := &exchange{w: recorder{ResponseWriter: hw, status: status, head: status}, rec: record{forwarded: true}}
	e.h.settle(x, v.owes)
}

// WithClaims returns ctx carrying the claims of a replayed request's
// verified token as [log] access_replay logged them: by claim path, the
// claim's JSON text (the line's c:PATH fields, docs/replay.md). Evaluate
// keys and matches a request whose context carries them by those claims,
// as the live proxy did by its token's; a request without them has no
// valid token (Evaluate never verifies one).
func WithClaims(ctx context.Context, byPath map[string]string) context.Context {
	return context.WithValue(ctx, claimsKey{}, byPath)
}

// claimsKey is the context key of WithClaims.
type claimsKey struct{}

// headerWriter is a ResponseWriter that holds only a header: an answer
// Answer settles, which nobody sends.
type headerWriter map[string][]string

func (w headerWriter) Header() http.Header       { return http.Header(w) }
func (headerWriter) Write(b []byte) (int, error) { return len(b), nil }
func (headerWriter) WriteHeader(int)             {}
