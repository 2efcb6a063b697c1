package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy/internal/concurrency"
)

// Response buffering, as nginx's proxy_buffering: an upstream's answer is
// read as fast as the upstream sends it — into memory, in 32 KiB buffers
// up to the upstream's response_buffer_memory, then into an unlinked file
// in temp_dir up to response_buffer_file — while the client is given it as
// fast as it takes it. The upstream's connection goes back to its pool,
// and the request's slot of [upstream.concurrency] is given back, when the
// upstream has sent its answer, not when a slow client has read it.
//
// Past both bounds the buffer stops reading, and the rest of the answer
// passes from the upstream to the client as the client takes it (nginx
// does the same past proxy_max_temp_file_size): the connection and the
// slot are then held until the client has it all.
//
// A small answer (a Content-Length under 32 KiB) is read whole, on the
// handler's goroutine, into one pooled buffer; a larger one, or one of
// unknown length, is read by a goroutine of its own that starts when the
// answer's head has been written, and is passed on as it arrives (a long
// poll or a chunked stream is not held back). Answers that must stream —
// server-sent events, gRPC, a switch of protocols (WebSocket) — and those
// of an upstream with response_buffering = false are never buffered and
// hold their slot to the end, as before.

// respBuffers is what every buffered answer of a handler shares: the
// memory budget ([server] response_buffer_budget), the buffers, and the
// directory files are made in. Safe for concurrent use.
type respBuffers struct {
	chunks *bufferPool
	dir    string
	budget int64        // bytes of memory all buffered answers may hold at once
	used   atomic.Int64 // bytes held now, in copyBufferSize buffers
	disk   int64        // bytes all spool files may hold at once
	onDisk atomic.Int64 // bytes spool files hold now, or are reserved for a read
	files  atomic.Int64 // spool files open now
	log    *zap.Logger
}

func newRespBuffers(chunks *bufferPool, dir string, budget, disk int64, log *zap.Logger) *respBuffers {
	return &respBuffers{chunks: chunks, dir: dir, budget: budget, disk: disk, log: log}
}

// reserveDisk reserves up to want bytes of spool file within the disk
// budget and returns how many it got (0: the budget is spent).
func (b *respBuffers) reserveDisk(want int64) int64 {
	for {
		u := b.onDisk.Load()
		got := min(want, b.disk-u)
		if got <= 0 {
			return 0
		}
		if b.onDisk.CompareAndSwap(u, u+got) {
			return got
		}
	}
}

type chunk = [copyBufferSize]byte

// take returns a buffer if the budget allows one more, counted until give.
func (b *respBuffers) take() (*chunk, bool) {
	for {
		u := b.used.Load()
		if u+copyBufferSize > b.budget {
			return nil, false
		}
		if b.used.CompareAndSwap(u, u+copyBufferSize) {
			return b.chunks.p.Get().(*chunk), true
		}
	}
}

func (b *respBuffers) give(c *chunk) {
	b.chunks.p.Put(c)
	b.used.Add(-copyBufferSize)
}

// createTemp makes an unlinked file in b.dir: it goes with its
// descriptor, whatever happens to the process.
func (b *respBuffers) createTemp() (*os.File, error) {
	f, err := os.CreateTemp(b.dir, "limitproxy-resp-*")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	b.files.Add(1)
	return f, nil
}

func (b *respBuffers) closeTemp(f *os.File) {
	f.Close()
	b.files.Add(-1)
}

// CheckTempDir reports whether dir can hold limitproxy's spool files: it
// makes one there and removes it. The server calls it at start with
// [server] temp_dir.
func CheckTempDir(dir string) error {
	f, err := os.CreateTemp(dir, "limitproxy-check-*")
	if err != nil {
		return fmt.Errorf("server.temp_dir %s: %w (request bodies and answers that do not fit in memory are spooled there)", dir, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write([]byte{0}); err != nil {
		return fmt.Errorf("server.temp_dir %s: %w", dir, err)
	}
	return nil
}

// slotHold is a request's slot of [upstream.concurrency], given back once:
// by the response buffer when the upstream has answered, or by forward
// when the exchange ends.
type slotHold struct {
	ticket concurrency.Ticket
	held   uint32 // 1 while held; atomic
}

func (s *slotHold) hold(t concurrency.Ticket) {
	s.ticket = t
	atomic.StoreUint32(&s.held, 1)
}

func (s *slotHold) release(o concurrency.Outcome, latency time.Duration) {
	if s != nil && atomic.CompareAndSwapUint32(&s.held, 1, 0) {
		s.ticket.Release(o, latency)
	}
}

// answerOutcome is upstreamOutcome for an answer of the upstream's own,
// read whole.
func answerOutcome(code int) concurrency.Outcome {
	switch {
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout:
		return concurrency.Overload
	case code >= 500:
		return concurrency.Neutral
	}
	return concurrency.Good
}

// buffers reports whether resp, an answer of an upstream with
// response_buffering, is buffered: it has a body, and it is not one that
// must stream.
func buffers(resp *http.Response) bool {
	switch {
	case resp.Body == nil || resp.Body == http.NoBody || resp.ContentLength == 0:
		return false
	case resp.StatusCode < 200 || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified:
		return false
	case resp.Request != nil && (resp.Request.Method == http.MethodHead || isGRPC(resp.Request)):
		return false
	}
	// The media type, without parameters, compared without allocating.
	mt, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	mt = strings.TrimSpace(mt)
	const grpc = "application/grpc"
	return !strings.EqualFold(mt, "text/event-stream") && !(len(mt) >= len(grpc) && strings.EqualFold(mt[:len(grpc)], grpc))
}

// buffer makes resp's body a buffered one (ModifyResponse of an upstream
// with response_buffering). A small answer is read whole here: an error
// reading it is the upstream's, answered 502 by the ErrorHandler.
func (b *respBuffers) buffer(resp *http.Response, cfg *config.Upstream) error {
	if !buffers(resp) {
		return nil
	}
	var (
		hold    *slotHold
		outcome concurrency.Outcome
		latency time.Duration
	)
	if x := exchangeOf(resp.Request); x != nil && x.w.clock != nil {
		// Under the upstream's concurrency limit (forward set the clock).
		hold = &x.rec.slot
		outcome = answerOutcome(resp.StatusCode)
		latency = x.w.clock().Sub(x.rec.sentAt)
	}
	maxChunks := int((cfg.ResponseBufferMemory + copyBufferSize - 1) / copyBufferSize)
	if n := resp.ContentLength; n > 0 && n < copyBufferSize && maxChunks > 0 {
		if c, ok := b.take(); ok {
			got, err := readWhole(resp.Body, c[:n+1])
			if err == nil && int64(got) != n {
				err = io.ErrUnexpectedEOF
			}
			if err != nil {
				b.give(c)
				return fmt.Errorf("reading the answer: %w", err)
			}
			resp.Body.Close()
			hold.release(outcome, latency)
			var m *memBody
			if sb, ok := resp.Body.(*syncBody); ok {
				m = &sb.mem // closed, never reused: its room saves an allocation
			} else {
				m = new(memBody)
			}
			*m = memBody{b: b, c: c, n: got}
			resp.Body = m
			return nil
		}
	}
	s := &spool{b: b, up: resp.Body, ctx: resp.Request.Context(), maxChunks: maxChunks, fileMax: cfg.ResponseBufferFile,
		hold: hold, outcome: outcome, latency: latency}
	s.cond.L = &s.mu
	resp.Body = s
	return nil
}

// readWhole reads r into p until EOF, which it reports as nil; a body that
// fills p has not ended and is an error.
func readWhole(r io.Reader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := r.Read(p[n:])
		n += m
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, errors.New("longer than its Content-Length")
}

// memBody is a small answer read whole into one buffer.
type memBody struct {
	b   *respBuffers
	c   *chunk // nil once closed
	off int
	n   int
}

func (m *memBody) Read(p []byte) (int, error) {
	if m.c == nil {
		return 0, errSpoolClosed
	}
	if m.off == m.n {
		return 0, io.EOF
	}
	k := copy(p, m.c[m.off:m.n])
	m.off += k
	if m.off == m.n {
		// The last bytes come with io.EOF (as net/http's bodies give
		// them): the copy to the client ends without one more Read.
		return k, io.EOF
	}
	return k, nil
}

func (m *memBody) Close() error {
	if m.c != nil {
		m.b.give(m.c)
		m.c = nil
	}
	return nil
}

var errSpoolClosed = errors.New("read from a closed response buffer")

// spool is a buffered answer's body: fill, on a goroutine of its own,
// reads the upstream's body into segments (memory buffers, then ranges of
// a file); Read hands them out in order and frees each once read.
type spool struct {
	b         *respBuffers
	up        io.ReadCloser   // the upstream's body
	ctx       context.Context // the request's; ends when the client has gone
	maxChunks int             // memory buffers this answer may hold
	fileMax   int64           // bytes it may write to its file
	hold      *slotHold       // the upstream slot to give back; nil: none
	outcome   concurrency.Outcome
	latency   time.Duration

	mu      sync.Mutex
	cond    sync.Cond // signalled when fill adds data or stops
	segs    []spoolSeg
	chunks  int      // memory buffers held
	f       *os.File // nil until the memory is full
	fileEnd int64    // bytes written to f
	state   spoolState
	err     error // why the upstream's body ended, if not at its end
	closed  bool
}

type spoolState uint8

const (
	spoolIdle    spoolState = iota // not read yet: fill not started
	spoolFilling                   // fill runs
	spoolDone                      // the upstream's body has ended (err says how); up is closed
	spoolPass                      // past both bounds: Read reads up itself once the segments are read
)

// spoolSeg is a run of the answer: in a memory buffer (c[off:end]) or in
// the file (bytes off to end).
type spoolSeg struct {
	c        *chunk // nil: in the file
	off, end int64
}

// fill reads the upstream's body until it ends, both bounds are reached,
// or the reader has closed.
func (s *spool) fill() {
	scratch := s.b.chunks.p.Get().(*chunk) // the file's copy buffer, as ReverseProxy's own
	defer s.b.chunks.p.Put(scratch)
	for {
		s.mu.Lock()
		if s.closed {
			s.stopLocked(errSpoolClosed)
			return
		}
		var dst []byte
		toFile := false
		if k := len(s.segs) - 1; k >= 0 && s.segs[k].c != nil && s.segs[k].end < copyBufferSize {
			dst = s.segs[k].c[s.segs[k].end:]
		} else if s.chunks < s.maxChunks {
			if c, ok := s.b.take(); ok {
				s.chunks++
				s.segs = append(s.segs, spoolSeg{c: c})
				dst = c[:]
			}
		}
		if dst == nil {
			room := s.b.reserveDisk(min(s.fileMax-s.fileEnd, copyBufferSize))
			if room <= 0 {
				// Past both bounds: the rest goes as the client takes it.
				s.state = spoolPass
				s.cond.Broadcast()
				s.mu.Unlock()
				return
			}
			toFile = true
			dst = scratch[:room]
		}
		s.mu.Unlock()

		if toFile && s.f == nil {
			f, err := s.b.createTemp()
			if err != nil {
				s.b.log.Error("cannot buffer an answer on disk; it streams", zap.String("temp_dir", s.b.dir), zap.Error(err))
				s.b.onDisk.Add(-int64(len(dst)))
				s.mu.Lock()
				s.fileMax = 0
				s.mu.Unlock()
				continue
			}
			s.mu.Lock()
			s.f = f
			s.mu.Unlock()
		}
		n, err := s.up.Read(dst)
		if toFile && n > 0 {
			if _, werr := s.f.WriteAt(dst[:n], s.fileEnd); werr != nil {
				s.b.log.Error("cannot write a buffered answer to disk; it is cut short", zap.String("temp_dir", s.b.dir), zap.Error(werr))
				n, err = 0, werr
			}
		}
		if toFile {
			// Keep what the file now holds; give back the rest.
			s.b.onDisk.Add(int64(n - len(dst)))
		}
		s.mu.Lock()
		if n > 0 {
			k := len(s.segs) - 1
			switch {
			case !toFile:
				s.segs[k].end += int64(n)
			case k >= 0 && s.segs[k].c == nil && s.segs[k].end == s.fileEnd:
				s.segs[k].end += int64(n)
			default:
				s.segs = append(s.segs, spoolSeg{off: s.fileEnd, end: s.fileEnd + int64(n)})
			}
			if toFile {
				s.fileEnd += int64(n)
			}
			s.cond.Broadcast()
		}
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			s.stopLocked(err)
			return
		}
		s.mu.Unlock()
	}
}

// stopLocked ends fill (s.mu held, and released): the upstream's body is
// closed — its connection goes back to its pool if it was read to its end
// — and the slot given back; if the reader has gone, everything is freed.
func (s *spool) stopLocked(err error) {
	s.state, s.err = spoolDone, err
	closed := s.closed
	if closed {
		s.freeLocked()
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	s.up.Close()
	o := s.outcome
	if err != nil {
		// Cut short: the upstream's failure, unless the client left.
		o = concurrency.Overload
		if closed || s.ctx.Err() != nil {
			o = concurrency.Neutral
		}
	}
	s.hold.release(o, s.latency)
}

// freeLocked gives back the memory and the file.
func (s *spool) freeLocked() {
	for _, sg := range s.segs {
		if sg.c != nil {
			s.b.give(sg.c)
		}
	}
	s.segs, s.chunks = nil, 0
	if s.f != nil {
		s.b.closeTemp(s.f)
		s.b.onDisk.Add(-s.fileEnd)
		s.f = nil
	}
}

// dropReadLocked frees the segments read, but for one fill may still be
// writing into.
func (s *spool) dropReadLocked() {
	for len(s.segs) > 0 {
		sg := s.segs[0]
		if sg.off < sg.end || len(s.segs) == 1 && s.state == spoolFilling && sg.c != nil && sg.end < copyBufferSize {
			return
		}
		if sg.c != nil {
			s.b.give(sg.c)
			s.chunks--
		}
		s.segs[0] = spoolSeg{}
		s.segs = s.segs[1:]
	}
}

// Read implements io.Reader. The first call starts fill.
func (s *spool) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	if s.state == spoolIdle {
		// Started only now: ReverseProxy has read the answer's trailer
		// announcement, and fill, reading the body to its end, may fill
		// in the trailers.
		s.state = spoolFilling
		go s.fill()
	}
	for {
		if s.closed {
			s.mu.Unlock()
			return 0, errSpoolClosed
		}
		if len(s.segs) > 0 && s.segs[0].off < s.segs[0].end {
			sg := s.segs[0]
			f := s.f
			s.mu.Unlock()
			var (
				n   int
				err error
			)
			if sg.c != nil {
				n = copy(p, sg.c[sg.off:sg.end])
			} else {
				n, err = f.ReadAt(p[:min(int64(len(p)), sg.end-sg.off)], sg.off)
			}
			s.mu.Lock()
			s.segs[0].off += int64(n)
			s.dropReadLocked()
			s.mu.Unlock()
			if err != nil && n == 0 {
				return 0, err
			}
			return n, nil
		}
		switch s.state {
		case spoolDone:
			err := s.err
			s.mu.Unlock()
			if err == nil {
				err = io.EOF
			}
			return 0, err
		case spoolPass:
			s.mu.Unlock()
			return s.up.Read(p)
		}
		s.cond.Wait()
	}
}

// Close implements io.Closer: what is buffered is freed; a fill still
// running stops at its next read (the request's context, ended when the
// handler returns, ends a read the upstream stalls).
func (s *spool) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	state := s.state
	if state != spoolFilling {
		s.freeLocked()
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	if state == spoolIdle || state == spoolPass {
		s.up.Close()
	}
	return nil
}
