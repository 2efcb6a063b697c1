package proxy

import (
	"hash/maphash"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"

	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// maxLoggedUserAgent bounds the user agent the access log carries, in
// bytes: a client's header is up to max_header_bytes, and a flood of
// such lines would be the client's to write.
const maxLoggedUserAgent = 256

// forwardRequestID sets the request id on r as it goes to the upstream,
// replacing what the client sent. (Not before: the policies match and
// key on the request's headers as the client sent them.)
func forwardRequestID(r *http.Request, x *exchange) {
	r.Header[requestIDHeader] = x.req.id[:]
}

// stampHeader sets the request id on the answer, once, as its head is
// written: an upstream's own X-Request-Id is replaced, so that the client
// holds the id the access log has.
func (r *recorder) stampHeader() {
	if r.id != nil {
		r.Header()[requestIDHeader] = r.id
	}
}

// logAccess writes docs/metrics.md's access-log line: at info level for
// every request, rejections included (so that the log says who was
// refused); at warn for one whose exchange failed after its status went
// out, with an error field. The line is encoded here and written out off
// the request's time (the server gives the access logger a buffered
// destination).
func (h *Handler) logAccess(x *exchange, p *policy.Policy, decision Decision, wait time.Duration, o *owed) {
	if h.acc == nil {
		return
	}
	r, rec, w, start := x.req.r, &x.rec, &x.w, x.req.start
	level := zapcore.InfoLevel
	if rec.err != "" {
		level = zapcore.WarnLevel
	}
	if h.accJSON != nil && rec.replay == nil {
		if h.acc.Core().Enabled(level) {
			h.writeAccessJSON(x, p, decision, wait, o, level)
		}
		return
	}
	ce := h.acc.Check(level, "request")
	if ce == nil {
		return
	}
	name := ""
	if p != nil {
		name = p.Name
	}
	key := ""
	if rec.key != "" && h.hasher != nil {
		key = h.hasher.Key(rec.key)
	}
	var received int64
	if rec.readBody != nil {
		received = rec.readBody.read.Load()
	}
	ua := r.Header.Get("User-Agent")
	if len(ua) > maxLoggedUserAgent {
		ua = ua[:maxLoggedUserAgent]
	}
	var stack [20]zap.Field
	fields := append(stack[:0],
		zap.String("method", r.Method),
		zap.String("host", r.Host),
		zap.String("path", r.URL.Path),
		zap.Int("status", w.statusCode()),
		zap.Duration("duration", h.now().Sub(start)),
		zap.String("policy", name),
		zap.String("decision", decision.String()),
		zap.String("upstream", rec.upstream),
		zap.Duration("queue_wait", wait),
		zap.String("client", h.loggedClient(x)),
		zap.String("key", key),
		zap.Int64("bytes_sent", w.sent),
		zap.Int64("bytes_received", received),
		zap.String("user_agent", ua),
		zap.String("request_id", x.req.id[0]))
	if x.req.verifies() {
		fields = append(fields, zap.String("identity", h.loggedIdentity(x)))
	}
	if rec.err != "" { // no error field on a line that has none
		fields = append(fields, zap.String("error", rec.err))
	}
	if o != nil && o.cost >= 0 {
		fields = append(fields, zap.Int64("cost", o.cost))
	}
	if rec.replay != nil {
		fields = rec.replay.fields(fields)
	}
	ce.Write(fields...)
}

// verifies reports that q's set has an [identity]: its access lines carry
// an identity field. (The line of an RLS descriptor has no snapshot.)
func (q *request) verifies() bool { return q.snap != nil && q.snap.set.Config.Identity != nil }

// loggedIdentity is the access log's identity field, with an [identity]:
// the key hash of the request's verified sub claim (as the key field
// hashes a key), "" without a valid token or a sub.
func (h *Handler) loggedIdentity(x *exchange) string {
	sub, ok := x.req.claims.Get("sub")
	if !ok || h.hasher == nil {
		return ""
	}
	return string(h.keyHashes.appendKey(nil, h.hasher, sub))
}

// loggedClient is the access log's client field: the address the ip key
// part resolves, as [log] client_address shows it; "" for none (a Unix
// socket).
func (h *Handler) loggedClient(x *exchange) string {
	if !x.req.client.OK {
		return ""
	}
	a := x.req.client.Addr
	switch x.req.snap.set.Config.Log.ClientAddress {
	case config.ClientMasked:
		return maskAddr(a).String()
	case config.ClientHashed:
		if h.hasher == nil {
			return ""
		}
		return h.hasher.Addr(a)
	}
	return a.String()
}

// maskAddr returns a's network as a masked client address shows it: an
// IPv4 address's /24, an IPv6 address's /48 (as Caddy's and Matomo's
// masks).
func maskAddr(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	bits := 48
	if a.Is4() {
		bits = 24
	}
	p, _ := a.Prefix(bits)
	return p
}

// accessEncoder is the access logger's JSON encoder as the server builds
// it (newLogger: zap.NewProductionEncoderConfig with ISO 8601 times), a
// zapcore.Encoder shared by every request: EncodeEntry encodes each line
// in an encoder and a buffer of zap's pools.
var accessEncoder = zapcore.NewJSONEncoder(accessEncoderConfig())

// accessEncoderConfig is the access logger's encoder configuration with
// the JSON format, but for its time encoder: accessTime writes the same
// text as zapcore.ISO8601TimeEncoder, formatting the date, time and zone
// once a second rather than once a line.
func accessEncoderConfig() zapcore.EncoderConfig {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = accessTime
	return enc
}

// accessTime is zapcore.ISO8601TimeEncoder ("2006-01-02T15:04:05.000Z0700"):
// the text is made once a millisecond (appendTimestamp), and kept.
func accessTime(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
	ms := t.UnixMilli()
	s := lastMilli.Load()
	if s == nil || s.ms != ms || s.loc != t.Location() {
		s = &stampMilli{ms: ms, loc: t.Location(), text: string(appendTimestamp(nil, t))}
		lastMilli.Store(s)
	}
	enc.AppendString(s.text)
}

// stampMilli is the text of a millisecond's timestamps (accessTime).
type stampMilli struct {
	ms   int64
	loc  *time.Location
	text string
}

// lastMilli is the millisecond the latest access line was stamped in.
var lastMilli atomic.Pointer[stampMilli]

// accessLine is one request's access-log fields as zap's encoder reads
// them (MarshalLogObject), in the order logAccess gives them. Pooled
// (accessLinePool) with the field that carries it and the scratch its
// client address and key hash are appended in, so that a line is encoded
// without allocating.
type accessLine struct {
	h              *Handler
	x              *exchange
	p              *policy.Policy
	decision       Decision
	duration, wait time.Duration
	o              *owed
	field          [1]zapcore.Field // zap.Inline of the line itself
	scratch        [96]byte         // the client address, then the key hash
}

var accessLinePool = sync.Pool{New: func() any {
	l := &accessLine{}
	l.field[0] = zap.Inline(l)
	return l
}}

// writeAccessJSON writes logAccess's line to Options.AccessJSON as the
// server's JSON access logger would, through zap's JSON encoder
// configured as that logger's (accessEncoder), in one Write, without
// building zap fields.
func (h *Handler) writeAccessJSON(x *exchange, p *policy.Policy, decision Decision, wait time.Duration, o *owed, level zapcore.Level) {
	buf := h.encodeAccess(x, time.Now(), h.now().Sub(x.req.start), p, decision, wait, o, level)
	h.accJSON.Write(buf.Bytes())
	buf.Free()
}

// encodeAccess returns x's access line, stamped ts, in a buffer of zap's
// pool.
func (h *Handler) encodeAccess(x *exchange, ts time.Time, duration time.Duration, p *policy.Policy, decision Decision, wait time.Duration, o *owed, level zapcore.Level) *buffer.Buffer {
	l := accessLinePool.Get().(*accessLine)
	l.h, l.x, l.p, l.decision, l.duration, l.wait, l.o = h, x, p, decision, duration, wait, o
	// zap's JSON encoder returns no error, and MarshalLogObject none.
	buf, _ := accessEncoder.EncodeEntry(zapcore.Entry{Level: level, Time: ts, LoggerName: "access", Message: "request"}, l.field[:])
	l.h, l.x, l.p, l.o = nil, nil, nil, nil
	accessLinePool.Put(l)
	return buf
}

// MarshalLogObject adds the line's fields to enc: logAccess's, in its
// order.
func (l *accessLine) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	h, x := l.h, l.x
	r, rec, w := x.req.r, &x.rec, &x.w
	enc.AddString("method", r.Method)
	enc.AddString("host", r.Host)
	enc.AddString("path", r.URL.Path)
	enc.AddInt("status", w.statusCode())
	enc.AddDuration("duration", l.duration)
	name := ""
	if l.p != nil {
		name = l.p.Name
	}
	enc.AddString("policy", name)
	enc.AddString("decision", l.decision.String())
	enc.AddString("upstream", rec.upstream)
	enc.AddDuration("queue_wait", l.wait)
	b := h.appendLoggedClient(l.scratch[:0], x)
	enc.AddByteString("client", b)
	k := len(b)
	if rec.key != "" && h.hasher != nil {
		b = h.keyHashes.appendKey(b, h.hasher, rec.key)
	}
	enc.AddByteString("key", b[k:])
	enc.AddInt64("bytes_sent", w.sent)
	var received int64
	if rec.readBody != nil {
		received = rec.readBody.read.Load()
	}
	enc.AddInt64("bytes_received", received)
	ua := r.Header.Get("User-Agent")
	if len(ua) > maxLoggedUserAgent {
		ua = ua[:maxLoggedUserAgent]
	}
	enc.AddString("user_agent", ua)
	enc.AddString("request_id", x.req.id[0])
	if x.req.verifies() {
		if sub, ok := x.req.claims.Get("sub"); ok && h.hasher != nil {
			enc.AddByteString("identity", h.keyHashes.appendKey(b[k:k], h.hasher, sub))
		} else {
			enc.AddString("identity", "")
		}
	}
	if rec.err != "" {
		enc.AddString("error", rec.err)
	}
	if l.o != nil && l.o.cost >= 0 {
		enc.AddInt64("cost", l.o.cost)
	}
	return nil
}

// appendLoggedClient appends loggedClient's value to b, without
// allocating for a full or masked address.
func (h *Handler) appendLoggedClient(b []byte, x *exchange) []byte {
	if !x.req.client.OK {
		return b
	}
	a := x.req.client.Addr
	switch x.req.snap.set.Config.Log.ClientAddress {
	case config.ClientMasked:
		return maskAddr(a).AppendTo(b)
	case config.ClientHashed:
		if h.hasher == nil {
			return b
		}
		return append(b, h.hasher.Addr(a)...)
	}
	return a.AppendTo(b)
}

// keyHashCache remembers the key hashes of recent client keys, so that a
// client sending many requests (a flood, most of them refused) has its
// key hashed (three SHA-256 sums) once, not on each access line. It is
// direct-mapped, keyHashSlots entries, each a slot's last key; keys
// longer than maxCachedKey bytes are hashed each time, so that it holds
// at most keyHashSlots short keys. The zero value is ready; safe for
// concurrent use.
type keyHashCache struct {
	seedOnce sync.Once
	seed     maphash.Seed
	slots    [keyHashSlots]atomic.Pointer[keyHashEntry]
}

const (
	keyHashSlots = 1024
	maxCachedKey = 128
)

type keyHashEntry struct {
	hasher *KeyHasher
	key    string
	hash   [16]byte // hex
}

// appendKey appends h.Key(key) to b.
func (c *keyHashCache) appendKey(b []byte, h *KeyHasher, key string) []byte {
	if len(key) > maxCachedKey {
		return h.appendKey(b, key)
	}
	c.seedOnce.Do(func() { c.seed = maphash.MakeSeed() })
	slot := &c.slots[maphash.String(c.seed, key)%keyHashSlots]
	if e := slot.Load(); e != nil && e.hasher == h && e.key == key {
		return append(b, e.hash[:]...)
	}
	e := &keyHashEntry{hasher: h, key: key}
	h.appendKey(e.hash[:0], key)
	slot.Store(e)
	return append(b, e.hash[:]...)
}

// stampSecond is the part of a second's timestamps that stays the same
// through the second (appendTimestamp).
type stampSecond struct {
	unix   int64
	loc    *time.Location
	prefix []byte // "2006-01-02T15:04:05."
	zone   []byte // "Z0700"
}

// lastSecond is the second the latest access line was stamped in.
var lastSecond atomic.Pointer[stampSecond]

// appendTimestamp appends t as t.AppendFormat(b,
// "2006-01-02T15:04:05.000Z0700") does (zap's ISO 8601 time encoder),
// formatting the date, time and zone once a second.
func appendTimestamp(b []byte, t time.Time) []byte {
	s := lastSecond.Load()
	if s == nil || s.unix != t.Unix() || s.loc != t.Location() {
		s = &stampSecond{unix: t.Unix(), loc: t.Location(),
			prefix: t.AppendFormat(nil, "2006-01-02T15:04:05."), zone: t.AppendFormat(nil, "Z0700")}
		lastSecond.Store(s)
	}
	ms := t.Nanosecond() / int(time.Millisecond)
	b = append(b, s.prefix...)
	b = append(b, byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10))
	return append(b, s.zone...)
}
