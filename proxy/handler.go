// Package proxy is limitproxy's data path: for each request, match a
// policy, build the client key, ask the policy's limiter, then reject,
// wait in the leaky-bucket queue, or forward through
// httputil.ReverseProxy.
package proxy

import (
	"context"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// Decisions, as the access log and docs/metrics.md's metrics name them.
const (
	Allowed        = "allowed"
	Rejected       = "rejected"
	Queued         = "queued"
	ShadowRejected = "shadow_rejected"
	Unmatched      = "unmatched"
	Skipped        = "skipped" // on_missing = "skip": forwarded without limiting
	Invalid        = "invalid" // refused before matching: 400 or 405 (see canonicalize)
	Shed           = "shed"    // turned away by its upstream's concurrency limit: 503
	Banned         = "banned"  // its key is in the policy's penalty box: 429 or 403
	ShadowBanned   = "shadow_banned"
)

// Handler is the proxy's http.Handler. It holds the current policy set in
// an atomic pointer: each request loads it once and uses that snapshot from
// start to end, so a reload never changes the rules under a request in
// flight. Safe for concurrent use.
type Handler struct {
	snap    atomic.Pointer[snapshot]
	slotq   slotQueues // requests waiting for a [policy.concurrency] slot
	now     func() time.Time
	log     *zap.Logger
	acc     *zap.Logger  // access log; nil when off
	buffers *bufferPool  // ReverseProxy's copy buffers, shared by every upstream
	resp    *respBuffers // response buffering's budget and temp_dir (respbuf.go)
	metrics *Metrics     // nil: none
	hasher  *KeyHasher   // the key hash, for the access log
	bans    perkey.Bans  // the penalty box; nil: none
	// averages are the running averages of the costs answers reported,
	// for estimate_from = "average".
	averages costAverages
	top      trackers     // the top offenders, per policy
	streams  streamCounts // requests streaming their bodies, per upstream and key
	// overrides are the per-key overrides (nil: none), ovCache their
	// compiled limiters.
	overrides perkey.Overrides
	ovCache   overrideCache

	// closing is done once CloseQueues is called: requests still waiting
	// in a leaky-bucket queue then leave it with 503.
	closing     context.Context
	closeQueues context.CancelFunc
}

// snapshot is a policy set with what is built once for it: the upstream
// pools, and each policy's rejection body.
type snapshot struct {
	set       *policy.Set
	pools     map[string]*pool
	rejection map[*policy.Policy][]byte
	// replay lists the request headers the access log carries with
	// [log] access_replay (replayHeaders); nil without it.
	replay []string
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
}

// MonotonicClock returns a clock that reads the wall time once and then
// advances with the monotonic clock: it never goes backwards, and limits'
// windows stay aligned to the Unix epoch within the wall clock's drift.
func MonotonicClock() func() time.Time {
	base := time.Now()
	return func() time.Time { return base.Add(time.Since(base)) }
}

// New returns a handler serving set.
func New(set *policy.Set, o Options) *Handler {
	h := &Handler{now: o.Now, log: o.Logger, buffers: newBufferPool(), metrics: o.Metrics, bans: o.Bans, overrides: o.Overrides, hasher: o.KeyHasher}
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
	h.resp = newRespBuffers(h.buffers, set.Config.Server.TempDir, set.Config.Server.ResponseBufferBudget, h.log)
	h.closing, h.closeQueues = context.WithCancel(context.Background())
	if h.now == nil {
		h.now = MonotonicClock()
	}
	if o.AccessLog {
		h.acc = o.AccessLogger
		if h.acc == nil {
			h.acc = h.log.Named("access")
		}
	}
	h.Swap(set)
	return h
}

// Swap makes set the one new requests see. Requests in flight keep the set
// they started with. An upstream whose settings (and the trusted proxies)
// are unchanged keeps its pool: its connections and its targets' health.
// Pools no longer used let go of their idle connections; requests still
// using them finish normally.
func (h *Handler) Swap(set *policy.Set) {
	srv := &set.Config.Server
	old := h.snap.Load()
	s := &snapshot{set: set, pools: map[string]*pool{}, rejection: map[*policy.Policy][]byte{}}
	if set.Config.Log.AccessReplay {
		s.replay = replayHeaders(set)
	}
	for _, p := range set.Policies {
		s.rejection[p] = rejectionBody(p)
	}
	for _, u := range set.Config.Upstreams {
		if old != nil {
			if p, ok := old.pools[u.Name]; ok && sameUpstream(p.cfg, u) && sameClientSource(p.srv, srv) {
				s.pools[u.Name] = p
				continue
			}
		}
		s.pools[u.Name] = newPool(u, srv, h.buffers, h.resp, h.log, h.now)
	}
	h.top.sync(set)
	h.metrics.declareQueues(set)
	h.ovCache.reset()
	h.snap.Store(s)
	if old != nil {
		for name, p := range old.pools {
			if s.pools[name] != p {
				p.transport.CloseIdleConnections()
			}
		}
	}
}

// sameClientSource reports whether a and b work out client addresses
// alike (resolveClient), so that a pool of a's may serve b's requests.
func sameClientSource(a, b *config.Server) bool {
	return slices.Equal(a.TrustedProxies, b.TrustedProxies) && a.ClientIPHeader == b.ClientIPHeader && a.TrustedHops == b.TrustedHops
}

func sameConcurrency(a, b *config.Concurrency) bool {
	if a == nil || b == nil {
		return a == b
	}
	return reflect.DeepEqual(*a, *b)
}

func sameUpstream(a, b config.Upstream) bool {
	if a.Name != b.Name || a.Timeout != b.Timeout || a.PreserveHost != b.PreserveHost ||
		a.MaxFails != b.MaxFails || a.FailTimeout != b.FailTimeout || len(a.Targets) != len(b.Targets) ||
		a.AllowTrace != b.AllowTrace || a.Buffering != b.Buffering || a.MaxBodyBytes != b.MaxBodyBytes ||
		a.MinBodyRate != b.MinBodyRate || a.RateWindow != b.RateWindow || a.MaxStreamsPerKey != b.MaxStreamsPerKey ||
		a.Protocol != b.Protocol || !slices.Equal(a.Upgrades, b.Upgrades) ||
		a.ResponseBuffering != b.ResponseBuffering || a.ResponseBufferMemory != b.ResponseBufferMemory || a.ResponseBufferFile != b.ResponseBufferFile ||
		!sameConcurrency(a.Concurrency, b.Concurrency) {
		return false
	}
	for i := range a.Targets {
		if a.Targets[i].String() != b.Targets[i].String() {
			return false
		}
	}
	return true
}

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

// ServeHTTP is the data path: snapshot → canonical form → match → key →
// limits → reject, wait in the leaky-bucket queue, or forward.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.now()
	snap := h.snap.Load()
	rec := &recorder{ResponseWriter: w, sendTimeout: snap.set.Config.Server.SendTimeout, grpc: isGRPC(r), h2: r.ProtoMajor == 2}
	rec.dl, _ = unwrapDeadliner(w)
	h.beginRequest(r, rec, snap)
	if h.acc != nil && snap.set.Config.Log.AccessReplay {
		rec.replay = captureReplay(r, snap.replay, &snap.set.Config.Server, start)
	}
	var (
		p        *policy.Policy
		decision string
		wait     time.Duration
		owes     *owed // what the answer owes limits that read it
	)
	defer func() {
		// The server writes what remains of the response after this
		// returns: give it a fresh send_timeout too.
		rec.renewed = time.Time{}
		rec.renewDeadline()
		name := ""
		if p != nil {
			name = p.Name
		}
		if rec.shed {
			decision = Shed
		}
		if rec.streamRefused {
			decision = StreamRefused
		}
		h.metrics.decision(name, decision)
		h.logAccess(r, rec, start, p, decision, wait, owes)
	}()

	if status, detail := canonicalize(r, &snap.set.Config.Server); status != 0 {
		decision = Invalid
		if status == http.StatusMethodNotAllowed {
			rec.Header().Set("Allow", allowed)
		}
		writeProblem(rec, status, problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
		return
	}
	p, ok := snap.set.Match(r)
	if !ok {
		decision = Unmatched
		writeProblem(rec, http.StatusNotFound, problem{Type: "about:blank", Title: "Not Found", Status: http.StatusNotFound,
			Detail: "no policy matches this request"})
		return
	}
	if r.Method == http.MethodTrace && !snap.pools[p.Upstream].cfg.AllowTrace {
		decision = Invalid
		rec.Header().Set("Allow", allowed)
		writeProblem(rec, http.StatusMethodNotAllowed, problem{Type: "about:blank", Title: "Method Not Allowed", Status: http.StatusMethodNotAllowed,
			Detail: "TRACE is not allowed to the upstream " + p.Upstream})
		return
	}
	cfg := &snap.set.Config.Server
	var (
		key  string
		res  keyResult
		keys [limiter.MaxLimits]string
	)
	var (
		ownKey string    // with OwnKeys and a [policy.concurrency]: the policy's own key
		ownRes keyResult // and what building it found
	)
	if p.OwnKeys {
		res = limitKeys(r, p, cfg, keys[:len(p.Limits)])
		if p.Concurrency != nil {
			// Built now, so that an ambiguous part of it is refused
			// before any limit counts the request.
			if ownKey, ownRes = clientKey(r, p, cfg); ownRes == keyInvalid {
				res = keyInvalid
			}
		}
	} else {
		key, res = clientKey(r, p, cfg)
	}
	rec.key = key
	if p.OwnKeys {
		rec.key = keys[0]
	}
	if res == keyInvalid {
		decision = Invalid
		writeProblem(rec, http.StatusBadRequest, problem{Type: "about:blank", Title: "Bad Request", Status: http.StatusBadRequest,
			Detail: "a part of the client key is repeated or malformed: " + ambiguousPart(r, p, cfg.AmbiguousKeyParts)})
		return
	}
	if cfg.AmbiguousKeyParts == config.AmbiguousRewrite {
		rewriteKeyParts(r, p)
	}
	switch res {
	case keySkip:
		decision = Skipped
		h.forward(rec, r, snap, p)
		return
	case keyReject:
		decision = Rejected
		writeProblem(rec, http.StatusBadRequest, problem{Type: "about:blank", Title: "Bad Request", Status: http.StatusBadRequest,
			Detail: "the request lacks a part of its client key: " + keyNames(p)})
		return
	}

	pinKeyHeaders(r, p)

	shadowBanned := false
	if p.Ban != nil && h.bans != nil {
		if b, ok := h.banned(p, key, keys[:len(p.Limits)], start); ok {
			if !p.Ban.Shadow {
				decision = Banned
				h.refuseBanned(rec, p, b, start)
				return
			}
			// Counted, never refused: the limits decide as usual.
			shadowBanned = true
		}
	}
	var (
		d   limiter.Decision
		err error
		hp  = p // the policy whose limits the RateLimit fields describe
	)
	switch {
	case p.Limiter == nil:
		// Only a [policy.concurrency]: no rate to decide.
		d = limiter.Decision{Allowed: true, Index: -1}
	case p.Deferred != nil:
		if !p.OwnKeys {
			for i := range p.Limits {
				keys[i] = key
			}
		}
		d, owes, err = h.decideDeferred(r.Context(), r, p, keys[:len(p.Limits)], start)
		if owes != nil {
			defer h.settle(rec, owes)
		}
	case p.OwnKeys:
		d, err = p.Limiter.AllowKeys(r.Context(), keys[:len(p.Limits)], start, 1)
	default:
		l := p.Limiter
		if h.overrides != nil {
			if ol, view, ok := h.overridden(p, key); ok {
				l, hp = ol, view
			}
		}
		d, err = l.Allow(r.Context(), key, start, 1)
	}
	if err != nil {
		// The memory store never fails; the Redis store's on_error
		// policy decides this case there.
		h.log.Error("limiter failed; request forwarded", zap.String("policy", p.Name), zap.Error(err))
		decision = Allowed
		h.forward(rec, r, snap, p)
		return
	}
	setRateLimitHeaders(rec.Header(), cfg.RateLimitHeaders, hp, d, start)
	if d.Index >= 0 {
		k := key
		if p.OwnKeys {
			k = keys[d.Index]
		}
		h.top.observe(p, k, d, start)
	}
	var ban perkey.Ban
	banned := false
	if !d.Allowed && !d.Degraded && !shadowBanned && p.Ban != nil && h.bans != nil {
		// Over a limit: an offence. (Not a rejection made without the
		// shared store, on_error: an outage is nobody's offence.)
		ban, banned = h.offend(context.WithoutCancel(r.Context()), p, key, keys[:len(p.Limits)], d, start)
	}
	// gate takes a slot of the policy's [policy.concurrency] for the
	// request's key, if it has one. A request that will wait in a
	// leaky-bucket queue takes it before waiting: everything one key
	// holds in the proxy (queued, waiting for a slot, in flight) then
	// counts against limit + queue, so a key cannot keep a leaky queue's
	// worth of connections open beyond what its concurrency allows.
	gated := false
	gate := func() (release func(), ok bool) {
		if p.Concurrency == nil {
			return func() {}, true
		}
		if p.OwnKeys {
			// The policy's own key, which its rate limits did not use.
			if key, res = ownKey, ownRes; res == keyReject {
				decision = Rejected
				writeProblem(rec, http.StatusBadRequest, problem{Type: "about:blank", Title: "Bad Request", Status: http.StatusBadRequest,
					Detail: "the request lacks a part of its client key: " + keyNames(p)})
				return nil, false
			}
		}
		if res == keySkip {
			return func() {}, true
		}
		return h.concurrencyGate(rec, r, p, key, snap.rejection[p], &decision)
	}
	switch {
	case !d.Allowed && p.Mode == config.Shadow:
		decision = ShadowRejected
		h.log.Info("shadow policy would reject", zap.String("policy", p.Name), zap.Duration("retry_after", d.RetryAfter))
	case !d.Allowed && banned && !p.Ban.Shadow:
		// The offence's answer is the ban's: its status, and Retry-After
		// until it ends rather than until the limit would admit.
		decision = Rejected
		h.refuseBanned(rec, p, ban, start)
		return
	case !d.Allowed:
		decision = Rejected
		reject(rec, p, d, snap.rejection[p])
		return
	case d.Delay > 0 && p.Mode == config.Shadow:
		// Counted in the queue like an enforced request, never held.
		decision = Allowed
		h.log.Debug("shadow policy would delay", zap.String("policy", p.Name), zap.Duration("delay", d.Delay))
	case d.Delay > 0:
		decision = Queued
		release, ok := gate()
		if !ok {
			// Refused a slot: give its place in the queue back.
			gone, cancel := context.WithCancel(r.Context())
			cancel()
			p.Limiter.Wait(gone, d)
			return
		}
		defer release()
		gated = true
		h.metrics.queued(p.Name, 1)
		ctx, cancel := context.WithCancel(r.Context())
		stop := context.AfterFunc(h.closing, cancel)
		err := p.Limiter.Wait(ctx, d)
		stop()
		cancel()
		h.metrics.queued(p.Name, -1)
		wait = h.now().Sub(start)
		h.metrics.waited(p.Name, wait)
		switch {
		case err == nil:
		case r.Context().Err() != nil:
			// The client left while queued: it has left the queue and is
			// never forwarded; there is no one to answer.
			rec.status = statusClientClosed
			return
		default:
			// The drain budget ran out (CloseQueues): the request has
			// left the queue and is answered, not forwarded.
			rec.Header().Set("Retry-After", "1")
			writeProblem(rec, http.StatusServiceUnavailable, problem{Type: "about:blank", Title: "Service Unavailable",
				Status: http.StatusServiceUnavailable, Detail: "the proxy is shutting down; retry"})
			return
		}
	default:
		decision = Allowed
	}
	if shadowBanned && decision == Allowed {
		decision = ShadowBanned
	}
	if !gated {
		release, ok := gate()
		if !ok {
			return
		}
		defer release()
	}
	h.forward(rec, r, snap, p)
}

func keyNames(p *policy.Policy) string {
	names := make([]string, len(p.Key))
	for i, k := range p.Key {
		names[i] = k.String()
	}
	return strings.Join(names, ", ")
}

func (h *Handler) forward(w *recorder, r *http.Request, snap *snapshot, p *policy.Policy) {
	pool := snap.pools[p.Upstream]
	w.upstream = p.Upstream
	lim := limitsFor(&pool.cfg, &snap.set.Config.Server)
	lim.dir = h.resp.dir // temp_dir needs a restart: the one the server started with
	release, ok := h.admitStream(w, r, &pool.cfg, lim, &snap.set.Config.Server)
	if !ok {
		return
	}
	defer release()
	cleanup, berr := prepareBody(w, r, lim)
	defer cleanup()
	if berr != nil {
		w.err = berr.Error()
		berr.write(w, r)
		return
	}
	w.body, _ = r.Body.(*timedBody)
	if w.dl != nil && r.Header.Get("Upgrade") != "" {
		// An upgraded connection is the tunnel's own: no deadline left
		// from an earlier exchange on it may cut it.
		w.dl.SetReadDeadline(time.Time{})
		w.dl.SetWriteDeadline(time.Time{})
	}
	if pool.conc != nil {
		ticket, ok := h.acquire(w, r, pool, p.Class)
		if !ok {
			return
		}
		w.clock = h.now
		w.slot.hold(ticket)
		// Given back here when the exchange ends, unless the response
		// buffer gave it back when the upstream was done (respbuf.go).
		defer func() { w.slot.release(upstreamOutcome(w), w.headerAt.Sub(w.sentAt)) }()
		if pool.cfg.ResponseBuffering {
			r = r.WithContext(context.WithValue(r.Context(), recorderKey{}, w))
		}
	}
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
				w.status, w.err = statusClientClosed, "client gone while the response was sent"
			} else {
				w.status, w.err = http.StatusBadGateway, "upstream response cut short"
			}
			h.metrics.forwarded(p.Upstream, w.statusCode(), h.now().Sub(begin))
		}
		panic(v)
	}()
	w.forwarded = true
	forwardRequestID(r, w)
	t.proxy.ServeHTTP(w, r)
	if w.status != statusClientClosed {
		h.metrics.forwarded(p.Upstream, w.statusCode(), h.now().Sub(begin))
	}
}

// recorder remembers the status written, for the access log. It unwraps to
// the underlying writer so that http.ResponseController (which
// ReverseProxy uses to flush streams and hijack WebSocket upgrades) reaches
// it; flushes stop at its FlushError (grpc.go), which passes them on.
type recorder struct {
	http.ResponseWriter
	dl            deadliner     // the connection's deadlines; nil if none
	sendTimeout   time.Duration // allowed between two writes
	renewed       time.Time     // when the write deadline was last set
	status        int
	upstream      string
	body          *timedBody    // the request body being streamed, if any
	writeFailed   bool          // a write to the client failed
	err           string        // why the exchange failed after the status went out
	grpc          bool          // a gRPC call: answered with grpc-status (grpc.go)
	h2            bool          // an HTTP/2 request (see FlushError)
	grpcStatus    int           // the HTTP status a gRPC answer of ours stands for
	key           string        // the client key, for the upstream's fair share
	replay        *replayFields // [log] access_replay's fields; nil without it
	forwarded     bool          // sent to the upstream
	head          int           // the status written first, whatever became of the exchange
	shed          bool          // turned away by the upstream's concurrency limit
	streamRefused bool          // refused: its key streams max_streams_per_key bodies already
	ownAnswer     bool          // the proxy answered for the upstream (502, 504, a body error)
	access        accessFields  // what the access log and the answer carry beyond the above (accesslog.go)

	// Under a concurrency limit: when the request was let through, and
	// when the response head was written (by clock).
	clock            func() time.Time
	sentAt, headerAt time.Time
	slot             slotHold // the upstream slot held, if any
}

func (r *recorder) WriteHeader(code int) {
	// An informational answer (100 Continue, 103 Early Hints) relayed
	// before the final one is not the answer: the final status is what
	// the log, the limits that read answers and the adaptive limit's
	// latency see.
	if r.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		r.stampHeader()
		r.status, r.head = code, code
		if r.clock != nil {
			r.headerAt = r.clock()
		}
	}
	r.renewDeadline()
	r.ResponseWriter.WriteHeader(code)
}

// renewDeadline gives the next write to the client send_timeout (as
// nginx's send_timeout: the time between two writes, not for the whole
// response). The deadline is moved at most every eighth of the timeout, so
// that a response of many small writes does not pay for it each time: a
// client is cut between 7/8 and all of send_timeout after its last read.
func (r *recorder) renewDeadline() {
	if r.dl == nil || r.sendTimeout <= 0 {
		return
	}
	now := time.Now()
	if now.Sub(r.renewed) < r.sendTimeout/8 {
		return
	}
	r.renewed = now
	r.dl.SetWriteDeadline(now.Add(r.sendTimeout))
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.stampHeader()
		r.status = http.StatusOK
	}
	r.renewDeadline()
	n, err := r.ResponseWriter.Write(b)
	r.access.sent += int64(n)
	if err != nil {
		r.writeFailed = true
	}
	return n, err
}

// Unwrap returns the underlying ResponseWriter.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// statusCode is the status the access log and metrics record: for a
// gRPC answer of limitproxy's own (HTTP 200 with a grpc-status), the HTTP
// status it stands for.
func (r *recorder) statusCode() int {
	if r.grpcStatus != 0 {
		return r.grpcStatus
	}
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}
