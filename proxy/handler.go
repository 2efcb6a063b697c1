// Package proxy is limitproxy's data path: for each request, match a
// policy, build the client key, ask the policy's limiter, then reject,
// wait in the leaky-bucket queue, or forward through
// httputil.ReverseProxy.
package proxy

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy/internal/clientkey"
	"github.com/limitproxy/limitproxy/proxy/internal/identity"
)

// Handler is the proxy's http.Handler. It holds the current policy set in
// an atomic pointer: each request loads it once and uses that snapshot from
// start to end, so a reload never changes the rules under a request in
// flight. Safe for concurrent use.
type Handler struct {
	snap    atomic.Pointer[snapshot]
	slotq   slotQueues // requests waiting for a [policy.concurrency] slot
	now     func() time.Time
	jitter  func(n int64) int64 // [rls] expiration_jitter_max's random source (Options.Jitter)
	log     *zap.Logger
	acc     *zap.Logger  // access log; nil when off
	accJSON io.Writer    // Options.AccessJSON
	buffers *bufferPool  // ReverseProxy's copy buffers, shared by every upstream
	resp    *respBuffers // response buffering's budget and temp_dir (respbuf.go)
	metrics *Metrics     // nil: none
	hasher  *KeyHasher   // the key hash, for the access log
	// keyHashes are recent keys' hashes, for the access log.
	keyHashes keyHashCache
	bans      perkey.Bans // the penalty box; nil: none
	// averages are the running averages of the costs answers reported,
	// for estimate_from = "average".
	averages costAverages
	streams  streamCounts // requests streaming their bodies, per upstream and key
	// overrides are the per-key overrides (nil: none); each snapshot's
	// policyState caches their compiled limiters.
	overrides perkey.Overrides
	// swapMu serializes Swap.
	swapMu sync.Mutex

	// closing is done once CloseQueues is called: requests still waiting
	// in a leaky-bucket queue then leave it with 503.
	closing     context.Context
	closeQueues context.CancelFunc
}

// snapshot is a policy set with what is built once for it: the upstream
// pools, and each policy's rejection (its body and fixed fields).
type snapshot struct {
	set *policy.Set
	// slashed reports that a policy's exact path, or its path_regex,
	// ends in '/' (readings.go: ruleAddSlash).
	slashed bool
	pools   map[string]*pool
	// policies holds, for each policy of set, what its requests would
	// otherwise look up by name: read once a request (policyState).
	policies map[*policy.Policy]*policyState
	// replay is what the access log carries with [log] access_replay;
	// nil without it.
	replay *replayPlan
	// verifier verifies the requests' tokens, built from the set's
	// [identity] by Swap; nil without one (or, from New, when its keys
	// did not load: no token is valid then).
	verifier *identity.Verifier
}

// Options configures a Handler.
type Options struct {
	// Logger receives errors and, with AccessLog, one line per request.
	// nil means no logging.
	Logger *zap.Logger
	// AccessLog turns the access log on.
	AccessLog bool
	// AccessLogger, if not nil, receives the access log instead of
	// Logger (the server gives it a buffered destination).
	AccessLogger *zap.Logger
	// AccessJSON, if not nil, is the destination of the access logger,
	// which encodes JSON as zap.NewProductionEncoderConfig with ISO 8601
	// times does: the handler then encodes its access lines through zap's
	// JSON encoder so configured, the same bytes without building zap
	// fields, and writes each line with one Write (which must not keep
	// the slice), when the access logger is enabled at the line's level. Lines with [log] access_replay's
	// fields still go through the access logger.
	AccessJSON io.Writer
	// Metrics, if not nil, receives docs/metrics.md's data-path metrics.
	Metrics *Metrics
	// Bans is the store's penalty box, for policies with a [policy.ban];
	// nil: such policies ban nobody.
	Bans perkey.Bans
	// Overrides are the per-key overrides the admin API sets; nil: none.
	Overrides perkey.Overrides
	// KeyHasher is the key hash the access log shows client keys (and,
	// with [log] client_address = "hashed", addresses) by; nil: one under
	// a secret drawn for this handler.
	KeyHasher *KeyHasher
	// Now is the clock the limiters see. nil means a clock that follows
	// the wall clock at start-up and then the monotonic clock, so it never
	// steps back when the wall clock is corrected.
	Now func() time.Time
	// Jitter is the random source of [rls] expiration_jitter_max: a
	// number from 0 to n less one (n > 0). nil means math/rand/v2's
	// Int64N.
	Jitter func(n int64) int64
}

// MonotonicClock returns a clock that reads the wall time once and then
// advances with the monotonic clock: it never goes backwards, and limits'
// windows stay aligned to the Unix epoch within the wall clock's drift.
func MonotonicClock() func() time.Time {
	base := time.Now()
	return func() time.Time { return base.Add(time.Since(base)) }
}

// Open returns a handler serving set: New, but a set whose [identity]
// keys do not load (a JWKS file that does not parse, a JWKS URL that does
// not answer) is an error.
func Open(set *policy.Set, o Options) (*Handler, error) {
	v, err := newVerifier(set, o.Logger)
	if err != nil {
		return nil, err
	}
	h := newHandler(set, o)
	h.swap(set, v)
	return h, nil
}

// New returns a handler serving set. A set whose [identity] keys do not
// load is served with no token valid (every jwt: key part is missing),
// and that is logged; Open reports it instead.
func New(set *policy.Set, o Options) *Handler {
	h := newHandler(set, o)
	v, err := newVerifier(set, h.log)
	if err != nil {
		h.log.Error("identity keys did not load; no token is valid", zap.Error(err))
	}
	h.swap(set, v)
	return h
}

// CheckIdentity loads the keys of id as a start would: its jwks_file
// read and parsed, or its secret_env's variable read; a jwks_url is not
// fetched (checks may run where the issuer cannot be reached). The error
// names what is wrong, for `limitproxy check`.
func CheckIdentity(id *config.Identity) error {
	if id == nil || id.JWKSURL != "" {
		return nil
	}
	v, err := buildVerifier(id, nil)
	if err != nil {
		return err
	}
	v.Close()
	return nil
}

// newVerifier builds the verifier of set's [identity]; nil without one.
func newVerifier(set *policy.Set, log *zap.Logger) (*identity.Verifier, error) {
	if set.Config.Identity == nil {
		return nil, nil
	}
	return buildVerifier(set.Config.Identity, log)
}

// buildVerifier builds the verifier of id; log, if not nil, is told of
// its background failures.
func buildVerifier(id *config.Identity, log *zap.Logger) (*identity.Verifier, error) {
	cfg := identity.Config{
		Source:   identity.Source{Header: id.Header, Cookie: id.Cookie},
		JWKSFile: id.JWKSFile, JWKSURL: id.JWKSURL,
		Algorithms: id.Algorithms, Issuer: id.Issuer, Audience: id.Audience,
		Leeway: id.Leeway, RefreshInterval: id.RefreshInterval,
	}
	if id.Leeway == 0 {
		cfg.Leeway = -1 // leeway = "0s": none (identity's 0 is its default)
	}
	if id.SecretEnv != "" {
		secret := os.Getenv(id.SecretEnv)
		if secret == "" {
			return nil, fmt.Errorf("identity: secret_env: environment variable %s is unset or empty", id.SecretEnv)
		}
		cfg.Secret = []byte(secret)
	}
	var opts identity.Options
	if log != nil {
		l := log.Named("identity")
		opts.Log = func(msg string, err error) { l.Warn(msg, zap.Error(err)) }
	}
	v, err := identity.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	return v, nil
}

// newHandler returns a handler without a set: Open and New swap one in.
func newHandler(set *policy.Set, o Options) *Handler {
	h := &Handler{now: o.Now, jitter: o.Jitter, log: o.Logger, buffers: newBufferPool(), metrics: o.Metrics, bans: o.Bans, overrides: o.Overrides, hasher: o.KeyHasher}
	if h.jitter == nil {
		h.jitter = rand.Int64N
	}
	if h.hasher == nil {
		h.hasher = NewKeyHasher(nil)
	}
	if o.Metrics != nil {
		o.Metrics.handler.Store(h)
	}
	if h.log == nil {
		h.log = zap.NewNop()
	}
	// temp_dir and response_buffer_budget are the process's: a reload
	// does not change them.
	h.resp = newRespBuffers(h.buffers, set.Config.Server.TempDir, set.Config.Server.ResponseBufferBudget, set.Config.Server.ResponseBufferDisk, h.log)
	h.closing, h.closeQueues = context.WithCancel(context.Background())
	if h.now == nil {
		h.now = MonotonicClock()
	}
	if o.AccessLog {
		if o.AccessLogger != nil {
			h.accJSON = o.AccessJSON
		}
		h.acc = o.AccessLogger
		if h.acc == nil {
			h.acc = h.log.Named("access")
		}
	}
	return h
}

// Swap makes set the one new requests see. Requests in flight keep the set
// they started with. An upstream whose settings are unchanged keeps its
// pool: its connections and its targets' health.
// Pools no longer used let go of their idle connections; requests still
// using them finish normally. Everything that belongs to one set (pools,
// rejections, top-offender trackers, the override cache) is built into
// the new snapshot before it is published, and nothing of the Handler
// outside the snapshot changes, so that a request sees one set's state
// whole. Safe for concurrent use: Swaps are serialized, and the last to
// take the lock is the set in force.
//
// A set with an [identity] gets a new verifier, built before anything
// changes (its JWKS file is read again): if its keys do not load, Swap
// returns the error and the set in force stays, its verifier too. The
// verifier of the set replaced is closed (its JWKS refresh stops);
// requests in flight still verify with it.
func (h *Handler) Swap(set *policy.Set) error {
	v, err := newVerifier(set, h.log)
	if err != nil {
		return err
	}
	h.swap(set, v)
	return nil
}

// Close stops the handler's background work: the JWKS refresh of its
// identity verifier. The handler still serves after Close, with the keys
// it has.
func (h *Handler) Close() {
	h.swapMu.Lock()
	defer h.swapMu.Unlock()
	if s := h.snap.Load(); s != nil && s.verifier != nil {
		s.verifier.Close()
	}
}

// swap is Swap with set's verifier built.
func (h *Handler) swap(set *policy.Set, v *identity.Verifier) {
	h.swapMu.Lock()
	defer h.swapMu.Unlock()
	srv := &set.Config.Server
	old := h.snap.Load()
	s := &snapshot{set: set, pools: map[string]*pool{}, policies: map[*policy.Policy]*policyState{}, verifier: v}
	s.replay = newReplayPlan(set, set.Config.Log.AccessReplay)
	s.slashed = slashedPaths(set)
	trackers := map[string]*tracker{}
	if old != nil {
		for p, ps := range old.policies {
			trackers[p.Name] = ps.tracker
		}
	}
	for _, u := range set.Config.Upstreams {
		if old != nil {
			if p, ok := old.pools[u.Name]; ok && sameUpstream(p.cfg, u) {
				s.pools[u.Name] = p
				continue
			}
		}
		s.pools[u.Name] = newPool(u, h.buffers, h.resp, h.log, h.now)
	}
	for _, p := range set.Policies {
		t := trackers[p.Name]
		if t == nil {
			t = newTracker()
			trackers[p.Name] = t // a name given twice shares one
		}
		s.policies[p] = &policyState{rejection: newRejection(p, srv.RateLimitHeaders), tracker: t}
	}
	h.metrics.declareQueues(set)
	h.snap.Store(s)
	if old != nil && old.verifier != nil && old.verifier != v {
		old.verifier.Close()
	}
	if old != nil {
		for name, p := range old.pools {
			if s.pools[name] != p {
				p.transport.CloseIdleConnections()
			}
		}
	}
}

// sameUpstream reports whether a pool built for a may serve b: the
// config.Upstream values compared as a whole (targets, nested
// [upstream.concurrency] and all), so that a field added to
// config.Upstream can never be left out and keep a stale pool on reload.
// Two parses of the same configuration are equal.
func sameUpstream(a, b config.Upstream) bool { return reflect.DeepEqual(a, b) }

// CloseQueues answers every request waiting in a leaky-bucket queue, now
// and later, with 503 and Retry-After: 1 instead of forwarding it. A server
// calls it when its drain budget (shutdown_timeout) runs out, so that those
// clients get an answer, and one they may retry elsewhere, before their
// connections are closed. Safe to call more than once, and concurrently.
func (h *Handler) CloseQueues() { h.closeQueues() }

// CloseIdleConnections closes the idle upstream connections of every
// upstream, so that backends see them end when the server stops rather
// than when the process exits. Connections in use are not touched and go
// back to their pools as before. Safe to call concurrently.
func (h *Handler) CloseIdleConnections() {
	for _, p := range h.snap.Load().pools {
		p.transport.CloseIdleConnections()
	}
}

// KeyHasher returns the key hash the handler's access log shows client
// keys by (Options.KeyHasher).
func (h *Handler) KeyHasher() *KeyHasher { return h.hasher }

// Set returns the policy set new requests see.
func (h *Handler) Set() *policy.Set { return h.snap.Load().set }

// ServeHTTP is the data path: snapshot → the request's facts (its
// exchange) → decide (canonical form, match, keys, penalty box, limits)
// → the proxy's own answer, or the leaky bucket's queue, the policy's
// concurrency gate and forward.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.now()
	snap := h.snap.Load()
	x := h.newExchange(w, r, snap, &snap.set.Config.Server, start)
	h.arrive(x, r)
	var (
		o    = ruling{keys: x.keys[:]}
		wait time.Duration
	)
	defer func() { h.done(x, &o, wait) }()
	defer abortIfGone(&x.w)
	h.decide(r.Context(), x, &o)
	if o.owes != nil {
		defer h.settle(x, o.owes)
	}
	x.rec.key = o.recordedKey() // the upstream's fair share counts it under this key
	h.inform(&x.w, snap, start, &o)
	if o.reply != noReply {
		readRefusedBody(&x.w, r, x.req.srv.ClientBodyTimeout)
		h.answer(x, &o)
		return
	}
	// From here the request may wait (the queue, a slot, the upstream):
	// a client that goes away meanwhile must end it. A queued request is
	// watched at once, so that a client gone is never forwarded (SPEC:
	// removed from the queue); one about to be forwarded once it has run
	// forwardWatchDelay, so that an upstream that answers sooner costs no
	// watch.
	queued := o.decision == Queued
	if queued {
		watchClient(w, 0)
	} else {
		watchClient(w, forwardWatchDelay)
	}
	// A request that will wait in a leaky-bucket queue takes its
	// concurrency slot before waiting: everything one key holds in the
	// proxy (queued, waiting for a slot, in flight) then counts against
	// limit + queue, so a key cannot keep a leaky queue's worth of
	// connections open beyond what its concurrency allows.
	release, ok := h.gate(x, &o)
	if !ok {
		if queued {
			// Refused a slot: give its place in the queue back.
			leaveQueue(o.p, o.d)
		}
		return
	}
	defer release()
	if queued {
		if wait, ok = h.waitTurn(x, &o, noMaxWait); !ok {
			return
		}
	}
	h.forward(x, o.p)
}

// clientWatcher is a ResponseWriter whose server watches for the client
// going away (the request's context is canceled then) only when asked:
// limitproxy's HTTP/1.1 front (internal/h1), which answers the requests
// refused at once without that watch's goroutine and read. WatchClient
// starts the watch after d (at once for 0). net/http's server watches
// every request by itself.
type clientWatcher interface{ WatchClient(d time.Duration) }

// forwardWatchDelay is how long a request being forwarded runs before the
// front watches its client: a client that leaves is noticed at most this
// much later than net/http notices it, and an upstream that answers
// sooner costs no watch.
const forwardWatchDelay = 10 * time.Millisecond

// watchClient asks w's server, if it is a clientWatcher (through any
// Unwrap), to watch for the client going away from d on.
func watchClient(w http.ResponseWriter, d time.Duration) {
	if cw, ok := unwrapTo[clientWatcher](w); ok {
		cw.WatchClient(d)
	}
}

// abortIfGone ends the exchange of a client that left before anything was
// written (a 499: gone while queued, or before the upstream answered)
// without an answer, by aborting the handler as net/http provides: the
// connection is closed (an HTTP/2 stream reset). Returning would have the
// server send an empty 200 with whatever headers were set, which a client
// that only half-closed its connection (a request piped through nc) would
// still read as a successful answer.
func abortIfGone(rec *recorder) {
	if rec.status == statusClientClosed && rec.head == 0 {
		panic(http.ErrAbortHandler)
	}
}

// done counts and logs the exchange once the handler is through with it.
func (h *Handler) done(x *exchange, o *ruling, wait time.Duration) {
	// The server writes what remains of the response after ServeHTTP
	// returns: it has send_timeout too (at least 7/8 of it, as every
	// write: a deadline set within the last eighth is not set again).
	x.w.renewDeadline()
	name := ""
	if o.p != nil {
		name = o.p.Name
	}
	decision := o.decision
	if x.rec.shed {
		decision = Shed
	}
	if x.rec.streamRefused {
		decision = StreamRefused
	}
	if ps := x.req.snap.policies[o.p]; ps != nil {
		ps.count(h.metrics, name, decision)
	} else {
		h.metrics.decision(name, decision)
	}
	h.logAccess(x, o.p, decision, wait, o.owes)
}

// inform writes the RateLimit fields of what the limits decided, and
// shows it to the top offenders.
func (h *Handler) inform(rec *recorder, snap *snapshot, now time.Time, o *ruling) {
	if !o.limited {
		return
	}
	// A rejection's fields are built once per policy, unless a per-key
	// override changes its limits (o.hp is then a view of its own).
	ps := snap.policies[o.p]
	if o.d.Allowed || o.hp != o.p || !ps.rejection.setFields(rec.Header(), o.d) {
		setRateLimitHeaders(rec.Header(), snap.set.Config.Server.RateLimitHeaders, o.hp, o.d, now)
	}
	ps.tracker.observe(o.counted, o.d, now)
}

// policyState is what a snapshot holds for one of its policies: the
// parts of an answer built once (rejection), its top-offenders tracker,
// and the limitproxy_requests_total children its requests have met, so
// that a request finds them in one map read rather than by name. Safe
// for concurrent use.
type policyState struct {
	rejection *rejection
	// tracker holds the policy's top offenders: carried over from the
	// snapshot before for a policy of the same name, so that a reload
	// keeps them.
	tracker  *tracker
	requests [numDecisions]atomic.Pointer[counterRef]
	// overrides caches the policy's compiled per-key overrides: client
	// key → *overrideEntry (overridden). It belongs to this snapshot, so
	// a request still deciding under the set before never fills the
	// cache of the set in force.
	overrides sync.Map
	// rls holds an RLS policy's counters with [rls] compatibility
	// (rls_compat.go), built on first use.
	rls rlsCounters
}

// counterRef holds a counter for an atomic.Pointer.
type counterRef struct{ c prometheus.Counter }

// count counts a request of the policy named policy under decision d,
// as Metrics.decision does, with the counter found in ps once met.
func (ps *policyState) count(m *Metrics, policy string, d Decision) {
	if m == nil {
		return
	}
	if d == Skipped {
		d = Allowed
	}
	ref := ps.requests[d].Load()
	if ref == nil {
		ref = &counterRef{m.requestsCounter(policy, d)}
		ps.requests[d].Store(ref)
	}
	ref.c.Inc()
}

// answer gives the answer of the proxy's own that decide chose.
func (h *Handler) answer(x *exchange, o *ruling) {
	p, rec, snap, now := o.p, &x.w, x.req.snap, x.req.start
	pr := problem{Type: "about:blank", Title: http.StatusText(o.status), Status: o.status}
	switch o.reply {
	case replyInvalid:
		if o.status == http.StatusMethodNotAllowed {
			rec.Header().Set("Allow", allowed)
		}
		pr.Detail = o.detail
	case replyNoMatch:
		pr.Detail = "no policy matches this request"
	case replyTrace:
		rec.Header().Set("Allow", allowed)
		pr.Detail = "TRACE is not allowed to the upstream " + p.Upstream
	case replyAmbiguous:
		pr.Detail = "a part of the client key is repeated or malformed: " + clientkey.AmbiguousPart(x.req.r, p, x.req.srv.AmbiguousKeyParts)
	case replyNoKey:
		pr.Detail = "the request lacks a part of its client key: " + clientkey.Names(p)
	case replyNoToken:
		// RFC 9110 §11.6.1: a 401 carries a challenge; RFC 6750 §3.1's
		// invalid_token when a token was sent and failed verification.
		challenge, why := "Bearer", "no token"
		if t := x.req.token; t.Status == identity.Invalid {
			challenge = `Bearer error="invalid_token", error_description="` + t.Reason + `"`
			why = "invalid token: " + t.Reason
		}
		rec.Header().Set("WWW-Authenticate", challenge)
		x.rec.err = why
		pr.Detail = "the request has no valid token for its client key: " + clientkey.Names(p)
	case replyBan:
		var offence *limiter.Decision // the limit's rejection, when this request's offence began the ban
		if o.limited {
			offence = &o.d
		} else {
			// The offence that began a ban was observed as a rejection
			// (inform); each later refusal of the ban is observed here.
			snap.policies[p].tracker.observeBanned(o.counted, now)
		}
		h.refuseBanned(rec, snap.policies[p], p, o.key, o.ban, offence, x.req.srv.RateLimitHeaders, now)
		return
	case replyLimit:
		reject(rec, p, o.d, snap.policies[p].rejection)
		return
	}
	writeProblem(rec, o.status, pr)
}

// gate takes a slot of the policy's [policy.concurrency] for the
// request's key, if it passes one; when none could be had, it has
// answered the request (or the client left) and reports false.
func (h *Handler) gate(x *exchange, o *ruling) (release func(), ok bool) {
	if !o.gated {
		return func() {}, true
	}
	return h.concurrencyGate(x, o.p, o.gateKey, o.ps.rejection, &o.decision)
}

// waitTurn holds x's request in its policy's leaky-bucket queue until
// its turn comes (await: a turn further away than maxWait is refused as
// the limit refuses; o is then refused and waitTurn reports true). It
// returns how long it waited since it arrived, and false when it left
// the queue without its turn: the client went (nobody to answer), or
// CloseQueues turned it away (answered 503).
func (h *Handler) waitTurn(x *exchange, o *ruling, maxWait time.Duration) (time.Duration, bool) {
	r, rec := x.req.r, &x.w
	wait, err := h.await(r.Context(), o, x.req.start, maxWait)
	switch {
	case err == nil:
		return wait, true
	case err != errShuttingDown:
		// The client left while queued: it has left the queue and is
		// never forwarded; there is no one to answer.
		rec.status = statusClientClosed
	default:
		// The drain budget ran out (CloseQueues): the request has left
		// the queue and is answered, not forwarded.
		readRefusedBody(rec, r, x.req.srv.ClientBodyTimeout)
		rec.Header().Set("Retry-After", "1")
		writeProblem(rec, http.StatusServiceUnavailable, problem{Type: "about:blank", Title: "Service Unavailable",
			Status: http.StatusServiceUnavailable, Detail: "the proxy is shutting down; retry"})
	}
	return wait, false
}

// forward sends x's request to its policy's upstream and relays the
// answer: through the streams bound, the body's buffering, the upstream's
// concurrency limit, and the target's httputil.ReverseProxy, which finds
// the exchange on the request (exchangeOf) to name its client.
func (h *Handler) forward(x *exchange, p *policy.Policy) {
	r, w, snap := x.req.r, &x.w, x.req.snap
	pool := snap.pools[p.Upstream]
	x.rec.upstream = p.Upstream
	lim := limitsFor(&pool.cfg, x.req.srv)
	lim.dir = h.resp.dir // temp_dir needs a restart: the one the server started with
	release, ok := h.admitStream(x, &pool.cfg, lim)
	if !ok {
		return
	}
	defer release()
	cleanup, berr := prepareBody(x, r, lim)
	defer cleanup()
	if berr != nil {
		x.rec.err = berr.Error()
		berr.write(w, r)
		return
	}
	x.rec.body, _ = r.Body.(*timedBody)
	if w.dl != nil && r.Header.Get("Upgrade") != "" {
		// An upgraded connection is the tunnel's own: no deadline left
		// from an earlier exchange on it may cut it.
		w.dl.SetReadDeadline(time.Time{})
		w.dl.SetWriteDeadline(time.Time{})
	}
	if pool.conc != nil {
		ticket, ok := h.acquire(x, pool, p.Class)
		if !ok {
			return
		}
		w.clock = h.now
		x.rec.slot.hold(ticket)
		// Given back here when the exchange ends, unless the response
		// buffer gave it back when the upstream was done (respbuf.go).
		defer func() { x.rec.slot.release(upstreamOutcome(x), w.headerAt.Sub(x.rec.sentAt)) }()
	}
	r = withExchange(r, x)
	t := pool.pick()
	begin := h.now()
	defer func() {
		// ReverseProxy aborts the handler (http.ErrAbortHandler) when the
		// response body cannot be copied after its header went out:
		// either the upstream cut it short or the client stopped taking
		// it. The access log and the metrics say which.
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			if w.writeFailed || r.Context().Err() != nil {
				w.status, x.rec.err = statusClientClosed, "client gone while the response was sent"
			} else {
				w.status, x.rec.err = http.StatusBadGateway, "upstream response cut short"
			}
			h.metrics.forwarded(p.Upstream, w.statusCode(), h.now().Sub(begin))
		}
		panic(v)
	}()
	x.rec.forwarded = true
	forwardRequestID(r, x)
	t.proxy.ServeHTTP(w, r)
	if w.status != statusClientClosed {
		h.metrics.forwarded(p.Upstream, w.statusCode(), h.now().Sub(begin))
	}
}
