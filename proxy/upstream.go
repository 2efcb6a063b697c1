package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy/internal/clientkey"
	"github.com/limitproxy/limitproxy/proxy/internal/concurrency"
)

// pool is one upstream: its targets, served round-robin, each skipped for
// fail_timeout after max_fails consecutive failures (passive health, as
// nginx's max_fails/fail_timeout). Safe for concurrent use.
type pool struct {
	cfg       config.Upstream
	transport roundTripper
	targets   []*target
	next      atomic.Uint64
	now       func() time.Time
	conc      *concurrency.Limiter // [upstream.concurrency]; nil: none
}

// target is one upstream address with its reverse proxy and health.
type target struct {
	pool      *pool
	proxy     *httputil.ReverseProxy
	name      string
	fails     atomic.Int64
	downUntil atomic.Int64 // Unix ns; 0 when up
}

// NewTransport returns the Transport shared by an upstream's targets: it
// keeps many connections alive per host (a proxy talks to few hosts, hard),
// never goes through an environment proxy, and bounds the wait for response
// headers by the upstream's timeout. Exported so that the benchmark's bare
// httputil.ReverseProxy uses exactly the same Transport.
func NewTransport(cfg config.Upstream) *http.Transport {
	tr := &http.Transport{
		Proxy:                 nil, // never via an environment proxy
		DialContext:           (&net.Dialer{Timeout: min(cfg.Timeout, 10*time.Second), KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: cfg.Timeout,
		// A proxy passes the client's Accept-Encoding and the upstream's
		// Content-Encoding on as they are: never asks for gzip itself
		// and decompresses behind the client's back.
		DisableCompression: true,
		// Larger than the 4 KiB default: a response head and a small body
		// in one read, a request head in one write.
		ReadBufferSize:  16 << 10,
		WriteBufferSize: 16 << 10,
		// Unused by limitproxy, which never sends Expect (newPool's
		// Rewrite drops it); kept for other users of this Transport.
		ExpectContinueTimeout: time.Second,
	}
	if cfg.Protocol == config.ProtocolH2C {
		// HTTP/2 with prior knowledge to http:// targets (gRPC without
		// TLS); the configuration allows h2c only for those.
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	return tr
}

// roundTripper is an upstream's transport: an http.RoundTripper whose idle
// connections can be let go of.
type roundTripper interface {
	http.RoundTripper
	CloseIdleConnections()
}

// newRoundTripper returns the transport of an upstream: for HTTP/1.1
// upstreams with transport = "limitproxy" (the default), syncTransport,
// which does the common requests on the handler's goroutine and hands
// the rest to an http.Transport; for h2c ones, and with transport =
// "net/http", the http.Transport alone. syncTransport saves a quarter
// of the forwarding CPU http.Transport costs (BENCHMARKS.md).
func newRoundTripper(cfg config.Upstream) roundTripper {
	tr := NewTransport(cfg)
	if cfg.Protocol == config.ProtocolH2C || cfg.Transport == config.ImplNetHTTP {
		return tr
	}
	return newSyncTransport(tr, cfg.Timeout)
}

func newPool(cfg config.Upstream, buffers httputil.BufferPool, resp *respBuffers, log *zap.Logger, now func() time.Time) *pool {
	tr := newRoundTripper(cfg)
	p := &pool{cfg: cfg, transport: tr, now: now}
	if c := cfg.Concurrency; c != nil {
		params := concurrency.Params{Limit: c.Limit, Adaptive: c.Adaptive, MinLimit: c.MinLimit, MaxLimit: c.MaxLimit,
			Queue: c.Queue, MaxWait: c.MaxWait, FairShare: c.FairShare, Shadow: c.Mode == config.Shadow}
		for _, cl := range c.Classes {
			params.Classes = append(params.Classes, concurrency.Class{Name: cl.Name, Reserve: cl.Reserve})
		}
		p.conc = concurrency.New(params, now)
	}
	errLog, _ := zap.NewStdLogAt(log.Named("upstream"), zap.WarnLevel)
	for _, u := range cfg.Targets {
		t := &target{pool: p, name: u.Host}
		t.proxy = &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(u)
				// The query exactly as received: ReverseProxy re-encodes
				// one it finds unusual (a ';', a malformed escape), and
				// the upstream would then read other parameters than the
				// client sent and limitproxy keyed.
				pr.Out.URL.RawQuery = pr.In.URL.RawQuery
				filterUpgrade(pr.Out.Header, cfg.Upgrades)
				// Never an Expect (issue 35), as nginx: the client's
				// 100-continue is limitproxy's to answer, and its server
				// does so when the body is first read (by prepareBody
				// for a buffered body, by the transport for a streamed
				// one). Forwarded, the transport would hold the body
				// back for an upstream's 100 Continue, which RFC 9110
				// lets it never send: ExpectContinueTimeout of an
				// upstream connection and slot, per request.
				delete(pr.Out.Header, "Expect")
				// Every client-address header names the client the
				// request was keyed by: its exchange's (forward puts
				// it on the request). Without one, none is vouched for.
				if x := exchangeOf(pr.In); x != nil {
					clientkey.SetForwarded(pr, x.req.srv, &x.req.client)
				} else {
					clientkey.SetForwarded(pr, &config.Server{}, &clientkey.Client{})
				}
				// The request id (forwardRequestID put it on In) after
				// the hop-by-hop fields went: a client's Connection
				// field naming X-Request-Id cannot strip it.
				if id, ok := pr.In.Header[requestIDHeader]; ok {
					pr.Out.Header[requestIDHeader] = id
				}
				if cfg.PreserveHost {
					pr.Out.Host = pr.In.Host
				}
			},
			Transport:  tr,
			BufferPool: buffers,
			ModifyResponse: func(res *http.Response) error {
				if err := checkStatus(res); err != nil {
					return err // a malformed answer: 502, counted against t
				}
				t.fails.Store(0)
				if cfg.ResponseBuffering {
					return resp.buffer(res, &cfg)
				}
				return nil
			},
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				t.failed(w, r, err, log)
			},
			ErrorLog: errLog,
		}
		p.targets = append(p.targets, t)
	}
	return p
}

// checkStatus refuses a final response whose status is outside 100–999,
// which net/http's server cannot write (WriteHeader panics on it): the
// upstream's answer is then malformed, as one whose status line
// net/http's client cannot read (issue 35). That client reads any three
// digits as a status over HTTP/1.1 ("000", "099", "+99" too), and any
// integer over HTTP/2. Informational statuses (100–199 but 101) never
// get here: the transports read past them (ReverseProxy passes on those
// http.Transport reports).
func checkStatus(res *http.Response) error {
	if res.StatusCode >= 100 && res.StatusCode <= 999 {
		return nil
	}
	code, _, _ := strings.Cut(res.Status, " ")
	return fmt.Errorf("malformed HTTP status code %q", code)
}

// pick returns the next target that is up, round-robin; if every target is
// down, the one that comes back first (trying is better than refusing).
func (p *pool) pick() *target {
	now := p.now().UnixNano()
	n := uint64(len(p.targets))
	start := p.next.Add(1)
	var soonest *target
	for i := range n {
		t := p.targets[(start+i)%n]
		until := t.downUntil.Load()
		if until <= now {
			return t
		}
		if soonest == nil || until < soonest.downUntil.Load() {
			soonest = t
		}
	}
	return soonest
}

// failed answers a request the upstream could not serve, and counts the
// failure against the target. It is the one place upstream errors are
// logged. Statuses: the client's own for a request body that could not be
// read (400, 408, 413; no failure counted), nothing for a client that went
// away, 504 for a timeout, 502 for anything else (refused, reset, bad
// response).
func (t *target) failed(w http.ResponseWriter, r *http.Request, err error, log *zap.Logger) {
	x := exchangeOf(r)
	if x != nil && x.rec.body != nil && x.rec.body.err != nil {
		// The client's body broke off, was malformed or too large
		// (streamed to an unbuffered upstream): the client's fault, never
		// counted against the target. Checked first, since a body read
		// that timed out also ends the request's context.
		log.Debug("request body could not be read", zap.String("upstream", t.pool.cfg.Name), zap.Error(x.rec.body.err))
		x.rec.err = x.rec.body.err.Error()
		x.rec.ownAnswer = true
		x.rec.body.err.write(w, r)
		return
	}
	if errors.Is(err, context.Canceled) || r.Context().Err() != nil {
		log.Debug("client gone before upstream answered", zap.String("upstream", t.pool.cfg.Name), zap.String("target", t.name), zap.Error(err))
		if x != nil {
			x.w.status = statusClientClosed
		}
		return
	}
	status := http.StatusBadGateway
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	if max := int64(t.pool.cfg.MaxFails); max > 0 && t.fails.Add(1) >= max {
		t.fails.Store(0)
		t.downUntil.Store(t.pool.now().Add(t.pool.cfg.FailTimeout).UnixNano())
		log.Warn("upstream target marked down", zap.String("upstream", t.pool.cfg.Name), zap.String("target", t.name), zap.Duration("for", t.pool.cfg.FailTimeout))
	}
	log.Warn("upstream error", zap.String("upstream", t.pool.cfg.Name), zap.String("target", t.name), zap.Int("status", status), zap.Error(err))
	if x != nil {
		x.rec.ownAnswer = true
	}
	writeProblem(w, status, problem{Type: "about:blank", Title: http.StatusText(status), Status: status,
		Detail: "the upstream " + t.pool.cfg.Name + " did not answer"})
}

// statusClientClosed is what the access log records for a request whose
// client left before an answer (nginx's 499); nothing is written, and the
// connection is closed (abortIfGone).
const statusClientClosed = 499

// filterUpgrade keeps, of the protocols a request asks to upgrade to, only
// those in allowed (lower case; an entry without a version allows every
// version), and removes the upgrade altogether when none is left. An
// upgraded connection is no longer seen request by request: an upstream
// that accepted h2c, say, would carry any number of HTTP/2 requests past a
// per-request limit. WebSocket, allowed by default, is one exchange.
// ReverseProxy has already reduced Connection to "Upgrade" when an upgrade
// was asked for.
func filterUpgrade(h http.Header, allowed []string) {
	vs := h["Upgrade"]
	if len(vs) == 0 {
		return
	}
	var keep []string
	for _, v := range vs {
		for _, proto := range strings.Split(v, ",") {
			proto = strings.TrimSpace(proto)
			if proto != "" && upgradeAllowed(proto, allowed) {
				keep = append(keep, proto)
			}
		}
	}
	if len(keep) == 0 {
		h.Del("Upgrade")
		h.Del("Connection")
		return
	}
	h["Upgrade"] = []string{strings.Join(keep, ", ")}
}

func upgradeAllowed(proto string, allowed []string) bool {
	name, _, _ := strings.Cut(proto, "/")
	for _, a := range allowed {
		if strings.EqualFold(a, proto) || !strings.Contains(a, "/") && strings.EqualFold(a, name) {
			return true
		}
	}
	return false
}

// acquire takes a slot of pool's concurrency limit for r, of priority
// class class (its policy's), waiting in its
// queue if need be. A request turned away is answered 503 with
// Retry-After (429 stays for quota); one whose client left while it
// waited is not answered. It reports whether r may go on.
func (h *Handler) acquire(x *exchange, pool *pool, class int) (concurrency.Ticket, bool) {
	r, w := x.req.r, &x.w
	ticket, _, err := pool.conc.Acquire(r.Context(), x.rec.key, class)
	x.rec.sentAt = h.now()
	if err == nil {
		return ticket, true
	}
	var shed *concurrency.Shed
	if !errors.As(err, &shed) {
		w.status = statusClientClosed
		return ticket, false
	}
	x.rec.shed = true
	x.rec.err = string(shed.Reason)
	readRefusedBody(w, r, x.req.srv.ClientBodyTimeout)
	w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(shed.RetryAfter), 10))
	writeProblem(w, http.StatusServiceUnavailable, problem{Type: "about:blank", Title: "Service Unavailable",
		Status: http.StatusServiceUnavailable, Detail: "the upstream " + pool.cfg.Name + " is at its concurrency limit; retry"})
	return ticket, false
}

// upstreamOutcome classifies what the upstream made of a request for its
// adaptive concurrency limit: its own answer below 500 but 429 is Good (101, a tunnel, is Neutral);
// 429, 503, 504, a timeout or a failed connection (the proxy's 502 or
// 504) are Overload; other 5xx and a client that left are Neutral.
func upstreamOutcome(x *exchange) concurrency.Outcome {
	w := &x.w
	switch code := w.statusCode(); {
	case code == statusClientClosed || code == http.StatusSwitchingProtocols:
		// An upgraded connection (WebSocket) is a tunnel: its time to
		// the 101 says nothing of the upstream's load.
		return concurrency.Neutral
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout:
		return concurrency.Overload
	case code == http.StatusBadGateway && (x.rec.ownAnswer || x.rec.err != ""):
		// The proxy's own 502: the upstream could not be reached or
		// answered no valid head (or cut its answer short).
		return concurrency.Overload
	case code >= 500 || x.rec.ownAnswer || w.headerAt.IsZero():
		return concurrency.Neutral
	}
	return concurrency.Good
}

// Hijack takes over the client's connection for an upgrade (WebSocket)
// and returns one whose reads start with what the server had already
// read from it. net/http reads the request head through a buffer, and a
// client that sends its first frame right behind the upgrade request (in
// the same packet, or before the 101) has those bytes in that buffer, or
// in the one byte of the server's background read, which Hijack puts back
// there; httputil.ReverseProxy then copies from the bare connection and
// never reads the buffer, so the frame was lost and the client waited
// for an answer that never came. nginx forwards those bytes.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err != nil || brw == nil || brw.Reader.Buffered() == 0 {
		return c, brw, err
	}
	bc := &bufferedConn{Conn: c, br: brw.Reader}
	if cw, ok := c.(closeWriter); ok {
		// ReverseProxy half-closes the client's side when the upstream
		// is done sending; keep that possible.
		return &bufferedCloseWriteConn{bufferedConn: bc, cw: cw}, brw, nil
	}
	return bc, brw, nil
}

// bufferedConn is a hijacked connection whose reads return, first, the
// bytes the server had buffered from it.
type bufferedConn struct {
	net.Conn
	br *bufio.Reader
}

// Read implements net.Conn: the buffered bytes first, then the
// connection's.
func (c *bufferedConn) Read(p []byte) (int, error) {
	if c.br != nil {
		if c.br.Buffered() > 0 {
			return c.br.Read(p)
		}
		c.br = nil
	}
	return c.Conn.Read(p)
}

type closeWriter interface{ CloseWrite() error }

// bufferedCloseWriteConn is a bufferedConn over a connection that can be
// half-closed (TCP, TLS).
type bufferedCloseWriteConn struct {
	*bufferedConn
	cw closeWriter
}

// CloseWrite shuts down the writing side of the connection.
func (c *bufferedCloseWriteConn) CloseWrite() error { return c.cw.CloseWrite() }
