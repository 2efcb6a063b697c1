package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/limitproxy/limitproxy/internal/httptoken"
)

// bufferBeforeChunking is what a response may write before its head is
// committed, as net/http's bufferBeforeChunkingSize: a handler that is
// done by then gets a Content-Length rather than chunks.
const bufferBeforeChunking = 2048

// response is the http.ResponseWriter of one request the front serves.
// It writes what net/http's server writes for the same calls (the same
// status line, fields in the same order, the same framing, Date,
// Content-Length and sniffed Content-Type), without net/http's clone of
// the header at WriteHeader: the head is written into the connection's
// buffer then, all but the fields that wait for the body's first bytes.
// Not safe for concurrent use, as no ResponseWriter is.
type response struct {
	c      *conn
	req    *http.Request
	header http.Header

	wroteHeader  bool // a final status is set, and the head (but its last fields) written
	committed    bool // the whole head is in c.out
	status       int
	clen         int64 // the handler's Content-Length; -1: none
	written      int64 // body bytes the handler wrote
	pending      []byte
	chunking     bool
	closeAfter   bool
	head         bool // a HEAD request: the body is eaten
	trailers     []string
	hasType      bool   // a Content-Type field (or none wanted)
	hasCE        bool   // a non-empty Content-Encoding
	hasCLKey     bool   // a Content-Length field, valid or not
	announced    int64  // the handler's valid Content-Length, even if not sent; -1: none
	te           string // the handler's Transfer-Encoding ("": none)
	hasDate      bool
	hasTrailers  bool        // a Trailer field or TrailerPrefix keys
	dropConn     bool        // Connection: close replaces the handler's Connection field
	deferHead    bool        // the head waits for commit (writeHead)
	snapshot     http.Header // and is written from this copy then
	deferredSkip int         // and then leaves these fields out
	protoSwitch  bool        // a 101 with Upgrade and Connection: upgrade
	done         bool        // the handler returned
	err          error
}

func (w *response) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter as net/http's server does:
// 1xx answers (but 101) go out at once, the first other status is the
// answer's, later calls are logged and ignored.
func (w *response) WriteHeader(code int) {
	if w.wroteHeader {
		w.c.srv.logf("http: superfluous response.WriteHeader call (front)")
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		w.c.writeStatusLine(code)
		w.c.writeFields(w.header, func(k string) bool { return k == "Content-Length" || k == "Transfer-Encoding" })
		w.c.out = append(w.c.out, "\r\n"...)
		w.err = w.c.flush()
		return
	}
	w.wroteHeader = true
	w.status = code
	w.writeHead()
}

// Fields that net/http's server may leave out of a head: writeHead
// marks those it leaves out.
const (
	skipContentLength = 1 << iota
	skipTransferEncoding
	skipConnection
	skipContentType
)

// writeHead writes the status line and the handler's fields, as
// net/http's chunkWriter.writeHeader decides them, into c.out; commit
// adds the fields that wait for the body. One pass over the header map
// finds the fields that decide the framing and the names to write.
func (w *response) writeHead() {
	c := w.c
	h := w.header
	keys := c.keys[:0]
	var te, ce, cl, connection, upgrade string
	var connVals []string
	hasCLKey := false
	for k, vv := range h {
		first := ""
		if len(vv) > 0 {
			first = vv[0]
		}
		switch k {
		case "Content-Length":
			cl, hasCLKey = first, true
		case "Transfer-Encoding":
			te = first
		case "Content-Encoding":
			ce = first
		case "Content-Type":
			w.hasType = true
		case "Date":
			w.hasDate = true
		case "Connection":
			connection, connVals = first, vv
		case "Upgrade":
			upgrade = first
		case "Trailer":
			w.hasTrailers = true
			for _, v := range vv {
				// net/http's foreachHeaderElement and declareTrailer:
				// elements trimmed of ASCII space only.
				for _, t := range strings.Split(v, ",") {
					if t = textproto.TrimString(t); t == "" {
						continue
					}
					if t = http.CanonicalHeaderKey(t); httpguts.ValidTrailerHeader(t) {
						w.trailers = append(w.trailers, t)
					}
				}
			}
		default:
			if strings.HasPrefix(k, http.TrailerPrefix) {
				w.hasTrailers = true
				continue // a trailer, never in the head
			}
		}
		keys = append(keys, field{k, vv})
	}
	w.hasCLKey = hasCLKey
	if cl != "" {
		v, err := strconv.ParseInt(cl, 10, 64)
		if err == nil && v >= 0 {
			w.clen, w.announced = v, v
		} else {
			// As net/http: dropped from the handler's map, yet written
			// as the head was when WriteHeader was called (and no
			// Content-Length is computed then).
			c.srv.logf("http: invalid Content-Length of %q", cl)
			defer delete(h, "Content-Length")
		}
	}
	w.te = te
	w.hasCE = ce != ""
	hasCL := w.clen != -1
	noKeepAlive := !c.srv.keepAlives()
	w.closeAfter = w.closeAfter || w.req.Close || connection == "close" || noKeepAlive

	skip := 0
	code := w.status
	if !bodyAllowed(code) {
		skip |= skipContentLength | skipTransferEncoding
		if code == http.StatusNotModified {
			skip |= skipContentType
		}
		w.hasType = true // nothing to sniff
	}
	if hasCL && w.te != "" && te != "identity" {
		c.srv.logf("http: WriteHeader called with both Transfer-Encoding of %q and a Content-Length of %d", te, w.clen)
		skip |= skipContentLength
		w.clen, hasCL = -1, false
	}
	switch {
	case w.head || !bodyAllowed(code):
		skip |= skipTransferEncoding
	case hasCL:
		skip |= skipTransferEncoding
	case te == "identity":
		w.closeAfter = true
		skip |= skipTransferEncoding
	default:
		// Chunked, unless the handler is done within the first
		// bufferBeforeChunking bytes (commit decides).
		if te == "chunked" {
			skip |= skipTransferEncoding
		}
		skip |= skipContentLength
		if _, ok := h["Transfer-Encoding"]; ok && te == "" {
			// An empty Transfer-Encoding field stays in a chunked head
			// but not in one with a computed Content-Length: which
			// one, commit knows. The head waits for it, written from
			// a copy of the map as it is now (net/http's clone; a
			// handler that sets an empty Transfer-Encoding is rare).
			w.deferHead = true
			w.snapshot = h.Clone()
		}
	}
	w.protoSwitch = code == http.StatusSwitchingProtocols && upgrade != "" && httpguts.HeaderValuesContainsToken(connVals, "upgrade")
	w.dropConn = w.closeAfter && (noKeepAlive || !httptoken.Has(connection, "close")) && !w.protoSwitch
	if w.dropConn {
		skip |= skipConnection
	}
	if w.deferHead {
		w.deferredSkip = skip
		return
	}
	w.writeFieldsSkipping(keys, skip)
}

// writeFieldsSkipping writes the status line and the fields of keys but
// those skip leaves out.
func (w *response) writeFieldsSkipping(keys []field, skip int) {
	c := w.c
	c.writeStatusLine(w.status)
	if skip != 0 {
		kept := keys[:0]
		for _, f := range keys {
			switch k := f.key; {
			case k == "Content-Length" && skip&skipContentLength != 0,
				k == "Transfer-Encoding" && skip&skipTransferEncoding != 0,
				k == "Connection" && skip&skipConnection != 0,
				k == "Content-Type" && skip&skipContentType != 0:
				continue
			}
			kept = append(kept, f)
		}
		keys = kept
	}
	c.writeSorted(keys)
}

// commit adds the fields that wait for the body's first bytes p (or the
// handler's end) and the blank line: as net/http, a handler done within
// bufferBeforeChunking bytes gets a Content-Length, one that set no
// Content-Type a sniffed one.
func (w *response) commit(p []byte) {
	w.committed = true
	if w.deferHead {
		skip := w.deferredSkip
		if w.done && !w.hasTrailers && bodyAllowed(w.status) && !w.hasCLKey && (!w.head || len(p) > 0) {
			skip |= skipTransferEncoding // a Content-Length follows
		}
		keys := w.c.keys[:0]
		for k, vv := range w.snapshot {
			if !strings.HasPrefix(k, http.TrailerPrefix) {
				keys = append(keys, field{k, vv})
			}
		}
		w.writeFieldsSkipping(keys, skip)
	}
	code := w.status
	if !w.hasDate {
		w.c.out = append(w.c.out, "Date: "...)
		w.c.out = w.c.srv.date(w.c.out)
		w.c.out = append(w.c.out, "\r\n"...)
	}
	if w.done && !w.hasTrailers && w.te == "" && bodyAllowed(code) && !w.hasCLKey && (!w.head || len(p) > 0) {
		w.clen = int64(len(p))
		w.c.out = append(w.c.out, "Content-Length: "...)
		w.c.out = strconv.AppendInt(w.c.out, w.clen, 10)
		w.c.out = append(w.c.out, "\r\n"...)
	}
	if !w.hasType && !w.hasCE && w.te == "" && len(p) > 0 {
		w.c.out = append(w.c.out, "Content-Type: "...)
		w.c.out = append(w.c.out, http.DetectContentType(p)...)
		w.c.out = append(w.c.out, "\r\n"...)
	}
	w.chunking = !w.head && bodyAllowed(code) && w.clen == -1 && w.te != "identity"
	if w.dropConn {
		w.c.out = append(w.c.out, "Connection: close\r\n"...)
	}
	if w.chunking {
		w.c.out = append(w.c.out, "Transfer-Encoding: chunked\r\n"...)
	}
	w.c.out = append(w.c.out, "\r\n"...)
}

// bodyAllowed is net/http's bodyAllowedForStatus.
func bodyAllowed(code int) bool {
	return !(code >= 100 && code <= 199 || code == http.StatusNoContent || code == http.StatusNotModified)
}

// Write implements http.ResponseWriter.
func (w *response) Write(p []byte) (int, error) {
	if w.c.hijacked {
		return 0, http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.announced != -1 && w.written > w.announced {
		return 0, http.ErrContentLength
	}
	if w.err != nil {
		return 0, w.err
	}
	// net/http's bufio.Writer of bufferBeforeChunking bytes in front of
	// its chunkWriter, whose writes (and so the head's sniffing and the
	// chunks) come in the same pieces here.
	n := len(p)
	for len(p) > bufferBeforeChunking-len(w.pending) && w.err == nil {
		if len(w.pending) == 0 {
			// A large write with nothing held: written whole.
			w.chunk(p)
			return n, w.err
		}
		k := copy(w.pending[len(w.pending):bufferBeforeChunking], p)
		w.pending = w.pending[:len(w.pending)+k]
		p = p[k:]
		w.flushPending()
	}
	w.pending = append(w.pending, p...)
	return n, w.err
}

// flushPending passes what is held on as one chunk (net/http's
// bufio.Writer.Flush into its chunkWriter).
func (w *response) flushPending() {
	if len(w.pending) > 0 {
		w.chunk(w.pending)
		w.pending = w.pending[:0]
	}
}

// chunk is net/http's chunkWriter.Write: the head committed on the
// first bytes, then p as one chunk when chunking.
func (w *response) chunk(p []byte) {
	if !w.committed {
		w.commit(p)
	}
	w.body(p)
}

// commitPending commits the head on what is held and passes that on
// (a flush).
func (w *response) commitPending() {
	w.flushPending()
	if !w.committed {
		w.commit(nil)
	}
}

// body adds p to the body: eaten for HEAD, in a chunk when chunking.
func (w *response) body(p []byte) {
	if w.head || len(p) == 0 || w.err != nil {
		return
	}
	c := w.c
	if w.chunking {
		c.out = strconv.AppendInt(c.out, int64(len(p)), 16)
		c.out = append(c.out, "\r\n"...)
	}
	if len(c.out)+len(p) > cap(c.out) {
		// Large writes go out directly, after what is buffered.
		if w.err = c.flush(); w.err != nil {
			return
		}
		if len(p) > cap(c.out) {
			w.err = c.write(p)
			if w.chunking {
				c.out = append(c.out, "\r\n"...)
			}
			return
		}
	}
	c.out = append(c.out, p...)
	if w.chunking {
		c.out = append(c.out, "\r\n"...)
	}
}

// Flush implements http.Flusher.
func (w *response) Flush() { w.FlushError() }

// FlushError sends the head and what the handler wrote so far; it is
// what http.ResponseController.Flush calls.
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.commitPending()
	if w.err != nil {
		return w.err
	}
	w.err = w.c.flush()
	return w.err
}

// SetReadDeadline and SetWriteDeadline set the connection's deadlines,
// for http.ResponseController.
func (w *response) SetReadDeadline(t time.Time) error  { return w.c.rwc.SetReadDeadline(t) }
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.setWriteDeadline(t) }

// EnableFullDuplex implements http.ResponseController's: the front
// serves no request with a body, so there is nothing to read while
// writing, and nothing to do.
func (w *response) EnableFullDuplex() error { return nil }

// ReadFrom copies src into the body as net/http's response does for
// io.Copy: while the head is not committed, the first 512 bytes through
// Write (a body of fewer is done with as if written: a computed
// Content-Length, or no status yet if none), then the head goes out,
// then the rest, so that a longer body copied in gets no computed
// Content-Length.
func (w *response) ReadFrom(src io.Reader) (n int64, err error) {
	buf := make([]byte, 32<<10)
	if !w.committed {
		n0, err := io.CopyBuffer(writerOnly{w}, io.LimitReader(src, 512), buf)
		n += n0
		if err != nil || n0 < 512 {
			return n, err
		}
	}
	if err := w.FlushError(); err != nil {
		return n, err
	}
	n0, err := io.CopyBuffer(writerOnly{w}, src, buf)
	return n + n0, err
}

// writerOnly hides ReadFrom from io.CopyBuffer.
type writerOnly struct{ io.Writer }

// Hijack implements http.Hijacker: the connection, with what the front
// read of it and did not use, is the handler's; the head written so far
// goes out first.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c := w.c
	if c.hijacked {
		return nil, nil, http.ErrHijacked
	}
	if c.watching {
		c.stopWatch()
	}
	if w.wroteHeader && !w.committed {
		w.commitPending()
	}
	if err := c.flush(); err != nil {
		return nil, nil, err
	}
	c.hijacked = true
	c.rwc.SetDeadline(time.Time{})
	r := bufio.NewReader(io.MultiReader(bytes.NewReader(bytes.Clone(c.buf[c.r:c.w])), c.rwc))
	c.r = c.w
	return c.rwc, bufio.NewReadWriter(r, bufio.NewWriter(c.rwc)), nil
}

// WriteWhole writes a whole answer of status code with body at once,
// from its header fields already written out: the concatenation of
// fields is the handler's header map as net/http writes it, each field
// "Name: value\r\n" (valid names, values with no CR or LF and nothing
// to trim), sorted by name, among them a Content-Type and a
// Content-Length of len(body), and no Date, Connection,
// Transfer-Encoding, Trailer or Content-Encoding field. The map must
// hold those fields still: it is the head net/http would write for it
// (Date, then Connection: close when the connection ends, are added as
// commit adds them), without going through the map. Nothing may be
// written after it.
//
// It reports false, having written nothing, when the answer cannot be
// written so (a status already written, a hijacked connection, a status
// that carries no body, an answer larger than the connection's buffer):
// the handler then writes it with WriteHeader and Write, from the same
// map, to the same bytes. It writes to the buffer alone: the answer
// goes out when the handler returns.
func (w *response) WriteWhole(code int, fields [10]string, body []byte) bool {
	c := w.c
	if w.wroteHeader || c.hijacked || code < 200 || code > 999 || !bodyAllowed(code) {
		return false
	}
	// Nothing goes out before the handler returns, as with WriteHeader
	// and a small body: the whole answer must fit in the buffer (the
	// status line, Date and Connection take less than wholeSlack).
	size := len(body) + wholeSlack
	for _, f := range fields {
		size += len(f)
	}
	if len(c.out)+size > cap(c.out) {
		return false
	}
	w.wroteHeader, w.committed, w.status = true, true, code
	w.hasType, w.hasCLKey = true, true
	w.clen, w.announced = int64(len(body)), int64(len(body))
	// writeHead's decisions for a map with a Content-Length and no
	// Connection or Transfer-Encoding field.
	noKeepAlive := !c.srv.keepAlives()
	w.closeAfter = w.closeAfter || w.req.Close || noKeepAlive
	w.dropConn = w.closeAfter
	c.writeStatusLine(code)
	for _, f := range fields {
		c.out = append(c.out, f...)
	}
	// commit's fields, in its order.
	c.out = append(c.out, "Date: "...)
	c.out = c.srv.date(c.out)
	c.out = append(c.out, "\r\n"...)
	if w.dropConn {
		c.out = append(c.out, "Connection: close\r\n"...)
	}
	c.out = append(c.out, "\r\n"...)
	w.written = int64(len(body))
	w.body(body)
	return true
}

// wholeSlack is room enough for a status line, Date and Connection:
// close, in bytes.
const wholeSlack = 128

// WatchClient has the request's context canceled when the client goes
// away (its connection reads EOF or fails) before the handler returns,
// as net/http's server does for every request with a read in the
// background. The front does that only for the requests of handlers
// that ask, before they wait (for an upstream, a queue, a slot), and
// starts the read d from now (at once for 0): an answer given sooner
// costs no goroutine and no read.
func (w *response) WatchClient(d time.Duration) { w.c.watch(d) }

// finish ends the response once the handler has returned: the head if
// still unwritten, what is pending, the last chunk and trailers. It
// reports whether the connection may serve another request.
func (w *response) finish() bool {
	w.done = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.commitPending()
	if w.err != nil {
		// A write failed: as net/http, whose buffered writers keep their
		// error, nothing more goes out, and above all no last chunk that
		// would end the cut body as if it were whole (the handler may
		// have cleared the write deadline that failed it).
		w.c.out = w.c.out[:0]
		return false
	}
	if w.chunking {
		w.c.out = append(w.c.out, "0\r\n"...)
		w.writeTrailers()
		w.c.out = append(w.c.out, "\r\n"...)
	}
	w.err = w.c.flush()
	if w.closeAfter || w.err != nil {
		return false
	}
	if !w.head && w.announced != -1 && bodyAllowed(w.status) && w.announced != w.written {
		return false // did not write what it announced
	}
	return true
}

// writeTrailers writes the trailers, as net/http's finalTrailers finds
// them: TrailerPrefix keys, then the fields the Trailer field declared.
func (w *response) writeTrailers() {
	var t http.Header
	for k, vv := range w.header {
		if kk, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			if t == nil {
				t = http.Header{}
			}
			t[kk] = vv
		}
	}
	for _, k := range w.trailers {
		for _, v := range w.header[k] {
			if t == nil {
				t = http.Header{}
			}
			t.Add(k, v)
		}
	}
	if t != nil {
		w.c.writeFields(t, nil)
	}
}

// writeStatusLine appends net/http's status line for code.
func (c *conn) writeStatusLine(code int) {
	c.out = append(c.out, "HTTP/1.1 "...)
	if text := http.StatusText(code); text != "" {
		c.out = strconv.AppendInt(c.out, int64(code), 10)
		c.out = append(c.out, ' ')
		c.out = append(c.out, text...)
		c.out = append(c.out, "\r\n"...)
		return
	}
	c.out = fmt.Appendf(c.out, "%03d status code %d\r\n", code, code)
}

// writeFields appends h's fields but those skip names, sorted by name,
// as net/http's Header.WriteSubset writes them: invalid names dropped,
// CR and LF in values turned to spaces, values trimmed.
func (c *conn) writeFields(h http.Header, skip func(string) bool) {
	keys := c.keys[:0]
	for k, vv := range h {
		if skip == nil || !skip(k) {
			keys = append(keys, field{k, vv})
		}
	}
	c.writeSorted(keys)
}

// field is a header field's name and values, as a map's range gives
// them (no second lookup to write them).
type field struct {
	key  string
	vals []string
}

// writeSorted appends fields, which it sorts by name, as writeFields
// does, and keeps their array for the next call.
func (c *conn) writeSorted(fields []field) {
	// Insertion sort, of the fields' indexes when there are few (a
	// byte each, rather than a field of 40 bytes with pointers, which
	// the garbage collector's write barrier may see at each move): a
	// head has a few fields, and this allocates nothing.
	var order [64]uint8
	if len(fields) <= len(order) {
		for i := range fields {
			order[i] = uint8(i)
			for j := i; j > 0 && fields[order[j]].key < fields[order[j-1]].key; j-- {
				order[j], order[j-1] = order[j-1], order[j]
			}
		}
		for _, i := range order[:len(fields)] {
			c.writeField(fields[i])
		}
	} else {
		slices.SortFunc(fields, func(a, b field) int { return strings.Compare(a.key, b.key) })
		for _, f := range fields {
			c.writeField(f)
		}
	}
	clear(fields)
	c.keys = fields[:0]
}

// writeField appends f's lines, one a value, unless its name is not
// valid.
func (c *conn) writeField(f field) {
	if !httpguts.ValidHeaderFieldName(f.key) {
		return
	}
	for _, v := range f.vals {
		c.out = append(c.out, f.key...)
		c.out = append(c.out, ": "...)
		c.out = appendValue(c.out, v)
		c.out = append(c.out, "\r\n"...)
	}
}

// appendValue appends v as net/http writes a field's value: CR and LF
// as spaces (headerNewlineToSpace), then trimmed (textproto.TrimString,
// which trims CR and LF too, so trimming first comes to the same).
func appendValue(b []byte, v string) []byte {
	v = textproto.TrimString(v)
	clean := true
	for i := 0; i < len(v); i++ {
		if v[i] == '\r' || v[i] == '\n' {
			clean = false
			break
		}
	}
	if clean {
		return append(b, v...)
	}
	for i := 0; i < len(v); i++ {
		if v[i] == '\r' || v[i] == '\n' {
			b = append(b, ' ')
		} else {
			b = append(b, v[i])
		}
	}
	return b
}
