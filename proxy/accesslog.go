package proxy

import (
	"hash/maphash"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
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
	fields := [...]zap.Field{
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
		zap.String("request_id", x.req.id[0]),
		zap.String("error", rec.err),
		{}, // cost
	}
	n := len(fields) - 1
	if rec.err == "" {
		n-- // no error field on a line that has none
	}
	if o != nil && o.cost >= 0 {
		fields[n] = zap.Int64("cost", o.cost)
		n++
	}
	if rec.replay != nil {
		ce.Write(rec.replay.fields(fields[:n])...)
		return
	}
	ce.Write(fields[:n]...)
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

// accessBufs are the buffers access lines are encoded in
// (writeAccessJSON): a line is encoded and written without allocating.
var accessBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledLine bounds the buffers accessBufs keeps, in bytes: a line as
// long as a long path or host makes is encoded once, not kept.
const maxPooledLine = 16 << 10

// writeAccessJSON writes logAccess's line to Options.AccessJSON as the
// server's JSON access logger encodes it (zap's JSON encoder: level, ts
// in ISO 8601 with milliseconds, logger "access", msg, then the fields in
// logAccess's order, strings escaped as zap escapes them, durations in
// seconds), byte for byte, but appended into a pooled buffer and written
// in one Write, without building zap fields.
func (h *Handler) writeAccessJSON(x *exchange, p *policy.Policy, decision Decision, wait time.Duration, o *owed, level zapcore.Level) {
	bp := accessBufs.Get().(*[]byte)
	b := appendAccessJSON((*bp)[:0], h, x, time.Now(), h.now().Sub(x.req.start), p, decision, wait, o, level)
	h.accJSON.Write(b)
	if cap(b) <= maxPooledLine {
		*bp = b
		accessBufs.Put(bp)
	}
}

// appendAccessJSON appends the access line, stamped ts, to b.
func appendAccessJSON(b []byte, h *Handler, x *exchange, ts time.Time, duration time.Duration, p *policy.Policy, decision Decision, wait time.Duration, o *owed, level zapcore.Level) []byte {
	r, rec, w := x.req.r, &x.rec, &x.w
	b = append(b, `{"level":"`...)
	b = append(b, level.String()...)
	b = append(b, `","ts":"`...)
	b = appendTimestamp(b, ts)
	b = append(b, `","logger":"access","msg":"request","method":`...)
	b = appendJSONString(b, r.Method)
	b = append(b, `,"host":`...)
	b = appendJSONString(b, r.Host)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, r.URL.Path)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(w.statusCode()), 10)
	b = append(b, `,"duration":`...)
	b = appendSeconds(b, duration)
	b = append(b, `,"policy":`...)
	if p != nil {
		b = appendJSONString(b, p.Name)
	} else {
		b = append(b, `""`...)
	}
	b = append(b, `,"decision":`...)
	b = appendJSONString(b, decision.String())
	b = append(b, `,"upstream":`...)
	b = appendJSONString(b, rec.upstream)
	b = append(b, `,"queue_wait":`...)
	b = appendSeconds(b, wait)
	b = append(b, `,"client":`...)
	b = h.appendLoggedClient(b, x)
	b = append(b, `,"key":"`...)
	if rec.key != "" && h.hasher != nil {
		b = h.keyHashes.appendKey(b, h.hasher, rec.key)
	}
	b = append(b, `","bytes_sent":`...)
	b = strconv.AppendInt(b, w.sent, 10)
	b = append(b, `,"bytes_received":`...)
	var received int64
	if rec.readBody != nil {
		received = rec.readBody.read.Load()
	}
	b = strconv.AppendInt(b, received, 10)
	b = append(b, `,"user_agent":`...)
	ua := r.Header.Get("User-Agent")
	if len(ua) > maxLoggedUserAgent {
		ua = ua[:maxLoggedUserAgent]
	}
	b = appendJSONString(b, ua)
	b = append(b, `,"request_id":`...)
	b = appendJSONString(b, x.req.id[0])
	if rec.err != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, rec.err)
	}
	if o != nil && o.cost >= 0 {
		b = append(b, `,"cost":`...)
		b = strconv.AppendInt(b, o.cost, 10)
	}
	return append(b, "}\n"...)
}

// appendLoggedClient appends loggedClient's value as a JSON string,
// without allocating for a full or masked address.
func (h *Handler) appendLoggedClient(b []byte, x *exchange) []byte {
	if !x.req.client.OK {
		return append(b, `""`...)
	}
	a := x.req.client.Addr
	var scratch [64]byte
	var text []byte
	switch x.req.snap.set.Config.Log.ClientAddress {
	case config.ClientMasked:
		text = maskAddr(a).AppendTo(scratch[:0])
	case config.ClientHashed:
		if h.hasher == nil {
			return append(b, `""`...)
		}
		return appendJSONString(b, h.hasher.Addr(a))
	default:
		text = a.AppendTo(scratch[:0])
	}
	return appendJSONString(b, text)
}

// appendSeconds appends d in seconds, as zap's SecondsDurationEncoder
// (the shortest decimal of float64(d)/1e9 that reads back as that float).
// Under exactBound that decimal is d's own, in nanoseconds: d has at
// most 15 significant digits, so float64(d)/1e9, the quotient rounded
// once, reads back from no other decimal of 15 digits or fewer (float64
// keeps every decimal of 15 digits apart). It is written from integers
// then: seconds, and the nanoseconds without their trailing zeros.
func appendSeconds(b []byte, d time.Duration) []byte {
	if d < 0 || d >= exactBound {
		return strconv.AppendFloat(b, float64(d)/float64(time.Second), 'f', -1, 64)
	}
	b = strconv.AppendInt(b, int64(d/time.Second), 10)
	ns := int64(d % time.Second)
	if ns == 0 {
		return b
	}
	var frac [10]byte
	frac[0] = '.'
	for i := 9; i > 0; i-- {
		frac[i] = byte('0' + ns%10)
		ns /= 10
	}
	n := len(frac)
	for frac[n-1] == '0' {
		n--
	}
	return append(b, frac[:n]...)
}

// jsonPlain holds the bytes appendJSONString copies as they are
// without a closer look: printable ASCII but the backslash and the quote.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '\\' && c != '"'
	}
	return t
}()

// exactBound bounds the durations appendSeconds writes from integers:
// 10^15 ns (about 11.6 days), the first of 16 significant digits.
const exactBound = time.Duration(1e15)

// appendJSONString appends s as a JSON string escaped as zap's JSON
// encoder escapes it: \\, \" and \n, \r, \t by their escapes, other
// bytes below 0x20 as \u00XX, a byte that is not UTF-8 as \ufffd, the
// rest as is.
func appendJSONString[S []byte | string](b []byte, s S) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	// Most strings are printable ASCII with nothing to escape: found so
	// with one table lookup a byte, and copied at once.
	i := 0
	for i < len(s) && jsonPlain[s[i]] {
		i++
	}
	if i == len(s) {
		b = append(b, s...)
		return append(b, '"')
	}
	last := 0
	for i < len(s) {
		c := s[i]
		if c >= utf8.RuneSelf {
			var r rune
			var size int
			switch v := any(s).(type) {
			case string:
				r, size = utf8.DecodeRuneInString(v[i:])
			case []byte:
				r, size = utf8.DecodeRune(v[i:])
			}
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			b = append(b, s[last:i]...)
			b = append(b, `\ufffd`...)
			i++
			last = i
			continue
		}
		if c >= 0x20 && c != '\\' && c != '"' {
			i++
			continue
		}
		b = append(b, s[last:i]...)
		switch c {
		case '\\', '"':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		last = i
	}
	b = append(b, s[last:]...)
	return append(b, '"')
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
