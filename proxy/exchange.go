package proxy

import (
	"context"
	"net/http"
	"time"

	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy/internal/clientkey"
	"github.com/limitproxy/limitproxy/proxy/internal/identity"
)

// exchange is one request's way through the data path, from its arrival
// to its access-log line, in one allocation: its facts, worked out once
// as it arrives (request), the writer of its answer (recorder), and what
// the path records of it for the access log, the metrics and the limits
// that read the answer (record). The decision (decide.go), the access log,
// the replay capture, the streams bound and the upstream's fair share all
// read the one request; none of them works a fact out again. An exchange
// belongs to its request's goroutine, but for the response buffer, which
// reads record.slot and sentAt from the transport's (respbuf.go), after
// they were set.
type exchange struct {
	req request
	w   recorder
	rec record

	// keys are the ruling's (decide.go): here, they take no allocation
	// of their own for a policy of up to inlineKeys limits (match makes
	// room for more). Not limiter.MaxLimits of them: that would make
	// every exchange 192 bytes larger, past the size class allocated
	// without a header, for the rare policy that has more.
	keys [inlineKeys]string
}

// inlineKeys is how many limits' keys an exchange holds itself.
const inlineKeys = 4

// request is what is known of a request as it arrives, worked out once:
// when, under which snapshot and settings, from which client, under which
// id. It is set by newExchange and arrive and not changed after, but for
// the path key part's value (PathKey), read on first use.
type request struct {
	r     *http.Request // as the policies see it: put in canonical form by decide
	start time.Time
	snap  *snapshot
	// srv is the server settings the request is judged by: the set's, or
	// for the forward-auth endpoint the set's with the trusted senders
	// believed as proxies.
	srv *config.Server
	// client is the client, resolved once (clientkey.Resolve): the one
	// the keys, the access log, the replay fields, the streams bound, the
	// fair share and the forwarding headers name.
	client clientkey.Client
	// id is the request id (requestid.go), as a header's values, for
	// the request forwarded and the answer alike: the header maps take a
	// slice of it (capacity 1), not a new slice; neither is changed in
	// place.
	id [1]string
	// pathKey is the path key part's value, once read (PathKey).
	pathKey  string
	pathRead bool
	// claims are the claims of the request's token when arrive verified
	// it as valid (the set has an [identity]); the zero Claims, which
	// hold none, for a token missing or invalid and without [identity].
	// The token itself is kept nowhere.
	claims identity.Claims
	// token is what arrive's verification of the request's token came
	// to (Missing without [identity]): the 401 of on_missing
	// "unauthorized" says which.
	token identity.Result
}

// record is what the data path records of an exchange beyond what its
// writer saw: for the access log, the metrics, the limits that read the
// answer and the upstream's concurrency limit.
type record struct {
	upstream      string
	body          *timedBody // the request body being streamed, if any
	readBody      *timedBody // the request body as read, if it was; nil: none read
	err           string     // why the exchange failed after the status went out
	key           string     // the client key, for the upstream's fair share
	replay        *replayFields
	forwarded     bool // sent to the upstream
	unseen        bool // answered by someone else: the forward-auth endpoint's caller
	shed          bool // turned away by the upstream's concurrency limit
	streamRefused bool // refused: its key streams max_streams_per_key bodies already
	ownAnswer     bool // the proxy answered for the upstream (502, 504, a body error)

	// Under a concurrency limit: when the request was let through, and
	// the upstream slot held, if any.
	sentAt time.Time
	slot   slotHold
}

// recorder writes an exchange's answer and remembers what it wrote: the
// status, the bytes, whether a write failed. It unwraps to the underlying
// writer so that http.ResponseController (which ReverseProxy uses to
// flush streams and hijack WebSocket upgrades) reaches it; flushes stop
// at its FlushError (grpc.go), which passes them on.
type recorder struct {
	http.ResponseWriter
	dl          deadliner     // the connection's deadlines; nil if none
	sendTimeout time.Duration // allowed between two writes
	renewed     time.Time     // when the write deadline was last set
	status      int
	head        int   // the status written first, whatever became of the exchange
	sent        int64 // bytes of response body written to the client
	writeFailed bool  // a write to the client failed
	grpc        bool  // a gRPC call: answered with grpc-status (grpc.go)
	h2          bool  // an HTTP/2 request (see FlushError)
	headReq     bool  // a HEAD request: no body goes out, whatever Write is given
	grpcStatus  int   // the HTTP status a gRPC answer of ours stands for
	// id is the request id as the answer's header values (stampHeader);
	// nil: none.
	id []string
	// Under a concurrency limit: the clock, and when the response head
	// was written by it.
	clock    func() time.Time
	headerAt time.Time
}

// newExchange begins the exchange of r, arriving at start under snap and
// judged by srv, answered through w: its writer, and its peer. arrive
// completes its facts.
func (h *Handler) newExchange(w http.ResponseWriter, r *http.Request, snap *snapshot, srv *config.Server, start time.Time) *exchange {
	x := &exchange{}
	x.req.start, x.req.snap, x.req.srv = start, snap, srv
	x.w = recorder{ResponseWriter: w, sendTimeout: srv.SendTimeout, grpc: isGRPC(r), h2: r.ProtoMajor == 2,
		headReq: r.Method == http.MethodHead}
	x.w.dl, _ = unwrapDeadliner(w)
	return x
}

// arrive works out r's facts: its client (the one place it is), its
// request id, the replay fields (as received: before decide puts r in
// canonical form) and, when the set has an [identity], its token's
// verification (the one place it is).
func (h *Handler) arrive(x *exchange, r *http.Request) {
	q := &x.req
	q.r = r
	q.client = clientkey.Resolve(r, q.srv)
	q.id[0] = requestID(r, &q.client)
	x.w.id = q.id[:]
	if v := q.snap.verifier; v != nil {
		var c identity.Claims
		if c, q.token = v.Verify(r, q.start); q.token.Status == identity.Valid {
			q.claims = c
		}
	}
	if h.acc != nil && q.snap.replay != nil {
		x.rec.replay = captureReplay(r, q.snap.replay, q.claims, q.start, h.hasher.Value)
	}
}

// keyRequest returns what x's keys are built from.
func (x *exchange) keyRequest() clientkey.Request {
	return clientkey.Request{R: x.req.r, Client: &x.req.client, Server: x.req.srv, Path: x, Identity: x}
}

// Claim returns the claim at path of x's token, if it was verified as
// valid (clientkey.ClaimReader): a missing or invalid token has none.
func (x *exchange) Claim(path string) (string, bool) { return x.req.claims.Get(path) }

// PathKey returns the path key part's value of x's request in canonical
// form (pathKey), read once.
func (x *exchange) PathKey() string {
	q := &x.req
	if !q.pathRead {
		q.pathKey, q.pathRead = pathKey(q.r.URL, q.srv), true
	}
	return q.pathKey
}

// exchangeKey is the context key under which a forwarded request carries
// its exchange, for what ReverseProxy calls with the request alone: the
// Rewrite that writes the forwarding headers, the response buffer.
type exchangeKey struct{}

// exchangeOf returns the exchange r carries (forward puts it there); nil
// for none.
func exchangeOf(r *http.Request) *exchange {
	x, _ := r.Context().Value(exchangeKey{}).(*exchange)
	return x
}

// withExchange returns r carrying x.
func withExchange(r *http.Request, x *exchange) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), exchangeKey{}, x))
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
	// Since reads the monotonic clock alone (renewed has its reading),
	// and Now reads the wall clock too: only a renewal needs that. The
	// first write of an answer renews without asking (a clock read costs
	// 70–180 ns on a virtual machine).
	if !r.renewed.IsZero() && time.Since(r.renewed) < r.sendTimeout/8 {
		return
	}
	now := time.Now()
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
	if !r.headReq {
		// The server takes a HEAD answer's body and sends none of it.
		r.sent += int64(n)
	}
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
