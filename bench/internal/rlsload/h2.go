package rlsload

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Conn is a gRPC connection without TLS (HTTP/2 with prior knowledge)
// that sends ShouldRateLimit calls framed beforehand and reads only
// what a measurement needs of the answers: a load generator's client
// that costs a fraction of what grpc-go's does per call (no goroutine,
// no context, no message decoded). Each call's outcome goes to the
// function its writer gave. Safe for concurrent use.
type Conn struct {
	nc net.Conn
	// The request's header block: the first call's adds its fields to
	// the server's HPACK table, the others' name them there (as a gRPC
	// client, Envoy's included, does).
	hdrFirst, hdr []byte
	sentFirst     bool

	// wmu guards what follows. It is never held while the socket is
	// written or read: the reader, which takes it for each answer, never
	// waits for a write that waits for the server, which may wait for
	// its answers to be read.
	wmu     sync.Mutex
	out     []byte // frames not yet written (fw appends to it)
	spare   []byte // the buffer being written, reused
	writing bool   // a Flush is writing; it writes what is added meanwhile
	fw      *http2.Framer
	nextID  uint32
	sendWin int64 // the server's connection window for our DATA
	winCond *sync.Cond
	streams map[uint32]*call
	queued  []*call // waiting for a stream: the server's bound is reached
	dead    error   // set when the connection failed; every call fails then

	maxStreams uint32 // the server's SETTINGS_MAX_CONCURRENT_STREAMS (0: none seen)
	done       chan struct{}
	kick       chan struct{} // wakes the flusher
}

// call is one call in flight.
type call struct {
	statuses int
	over     bool   // the answer's overall code is OVER_LIMIT
	answered bool   // a message came
	status   string // grpc-status of the trailers
	message  string // grpc-message
	reset    string // the RST_STREAM's error code
	msg      []byte // the request
	partial  []byte // a message split over DATA frames
	tag      int
	end      func(tag, statuses int, over bool, err error)
}

// recvWindow is the window the connection and each stream give the
// server for its answers; the connection's is topped up by as much
// when half is used.
const recvWindow = 1 << 30

// Dial connects to addr's gRPC server (loopback, without TLS) and
// completes the HTTP/2 handshake.
func Dial(addr string) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &Conn{nc: nc, nextID: 1, sendWin: 65535, streams: map[uint32]*call{}, done: make(chan struct{}), kick: make(chan struct{}, 1)}
	c.winCond = sync.NewCond(&c.wmu)
	c.fw = http2.NewFramer((*outWriter)(c), nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := range 2 {
		for _, f := range [][2]string{
			{":method", "POST"}, {":scheme", "http"}, {":path", shouldRateLimit}, {":authority", addr},
			{"content-type", "application/grpc"}, {"te", "trailers"},
		} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if i == 0 {
			c.hdrFirst = bytes.Clone(hb.Bytes())
			hb.Reset()
		}
	}
	// Indexed fields only: the block leaves the server's table as it
	// is, so the same bytes serve every call after the first.
	c.hdr = hb.Bytes()
	c.out = append(c.out, http2.ClientPreface...)
	c.fw.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: recvWindow}, http2.Setting{ID: http2.SettingEnablePush, Val: 0})
	c.fw.WriteWindowUpdate(0, recvWindow)
	if err := c.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	fr := http2.NewFramer(nil, bufio.NewReaderSize(nc, 64<<10))
	fr.SetReuseFrames()
	go c.read(fr)
	go c.flusher()
	return c, nil
}

// Close closes the connection; calls in flight fail.
func (c *Conn) Close() error {
	err := c.nc.Close()
	<-c.done
	return err
}

// errClosed is the error of calls in flight when the connection ends.
var errClosed = errors.New("the connection closed")

// Send writes a call of msg (a gRPC message: Frame's); end(tag, ...) is
// called from the connection's reader when its answer is complete, with
// the number of descriptor statuses and whether the overall code is
// OVER_LIMIT (or from Send at once, or Abandon, on
// failure). It buffers: Flush writes. The server's bounds are respected:
// with its SETTINGS_MAX_CONCURRENT_STREAMS calls in flight, the call
// waits for one to end (its end is written then, by the reader), and
// Send waits for the server's window for data.
func (c *Conn) Send(msg []byte, tag int, end func(tag, statuses int, over bool, err error)) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	s := &call{tag: tag, end: end, msg: msg}
	if c.dead != nil {
		end(tag, 0, false, c.dead)
		return
	}
	if len(c.queued) > 0 || c.maxStreams > 0 && len(c.streams) >= int(c.maxStreams) {
		c.queued = append(c.queued, s)
		return
	}
	c.write(s)
}

// drain writes the queued calls the server's bounds admit now, without
// waiting for its window (the reader calls it, which reads the window's
// updates); c.wmu is held. It reports whether it wrote.
func (c *Conn) drain() bool {
	wrote := false
	for len(c.queued) > 0 && (c.maxStreams == 0 || len(c.streams) < int(c.maxStreams)) && c.sendWin >= int64(len(c.queued[0].msg)) {
		next := c.queued[0]
		c.queued = c.queued[1:]
		c.write(next)
		wrote = true
	}
	return wrote
}

// outWriter is the Framer's destination: c.out, c.wmu held.
type outWriter Conn

func (w *outWriter) Write(p []byte) (int, error) {
	w.out = append(w.out, p...)
	return len(p), nil
}

// write writes s's frames; c.wmu is held.
func (c *Conn) write(s *call) {
	for c.dead == nil && c.sendWin < int64(len(s.msg)) {
		c.flushLater()
		c.winCond.Wait()
	}
	if c.dead != nil {
		s.end(s.tag, 0, false, c.dead)
		return
	}
	id := c.nextID
	c.nextID += 2
	c.streams[id] = s
	hdr := c.hdr
	if !c.sentFirst {
		hdr, c.sentFirst = c.hdrFirst, true
	}
	c.fw.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hdr, EndHeaders: true})
	c.fw.WriteData(id, true, s.msg)
	c.sendWin -= int64(len(s.msg))
}

// Flush writes what Send buffered, unless a Flush is writing already
// (it writes it then).
func (c *Conn) Flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.writing {
		return nil
	}
	c.writing = true
	var err error
	for len(c.out) > 0 && err == nil {
		buf := c.out
		c.out = c.spare[:0]
		c.wmu.Unlock()
		_, err = c.nc.Write(buf)
		c.wmu.Lock()
		c.spare = buf
	}
	c.writing = false
	if err != nil && c.dead == nil {
		c.dead = fmt.Errorf("%w: %v", errClosed, err)
		c.nc.Close() // the reader ends the calls in flight
	}
	return err
}

// flushLater has what is buffered written by the connection's flusher
// (the reader's frames: it never writes itself); c.wmu is held.
func (c *Conn) flushLater() {
	if !c.writing && len(c.out) > 0 {
		select {
		case c.kick <- struct{}{}:
		default: // kicked already
		}
	}
}

// FlushSoon has what Send buffered written by the connection's flusher,
// a goroutine of its own: for a caller that must not wait for the socket
// (an answer's callback, on the reader).
func (c *Conn) FlushSoon() {
	c.wmu.Lock()
	c.flushLater()
	c.wmu.Unlock()
}

// flusher writes what is buffered when kicked, until the connection ends.
func (c *Conn) flusher() {
	for {
		select {
		case <-c.kick:
			c.Flush()
		case <-c.done:
			return
		}
	}
}

// Abandon fails every call in flight with err (their end is called
// now), as at the end of a run whose last answers are past their time;
// an answer that comes later is ignored.
func (c *Conn) Abandon(err error) {
	c.wmu.Lock()
	streams, queued := c.streams, c.queued
	c.streams, c.queued = map[uint32]*call{}, nil
	c.wmu.Unlock()
	for _, s := range streams {
		s.end(s.tag, 0, false, err)
	}
	for _, s := range queued {
		s.end(s.tag, 0, false, err)
	}
}

// InFlight is how many calls are waiting for their answer.
func (c *Conn) InFlight() int {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return len(c.streams) + len(c.queued)
}

// Frame is req as a gRPC message: the 5-byte prefix (uncompressed,
// length) and the protobuf encoding.
func Frame(req *rlsv3.RateLimitRequest) ([]byte, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	msg := make([]byte, 5, 5+len(b))
	binary.BigEndian.PutUint32(msg[1:], uint32(len(b)))
	return append(msg, b...), nil
}

// read is the connection's reader: it answers the server's SETTINGS and
// PINGs, tracks the windows, and ends each call with its answer.
func (c *Conn) read(fr *http2.Framer) {
	defer close(c.done)
	var cur *call // the stream whose header block is being decoded
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if cur == nil {
			return
		}
		switch f.Name {
		case "grpc-status":
			cur.status = f.Value
		case "grpc-message":
			cur.message = f.Value
		}
	})
	received := 0
	var err error
	for {
		var f http2.Frame
		f, err = fr.ReadFrame()
		if err != nil {
			break
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			c.wmu.Lock()
			f.ForeachSetting(func(s http2.Setting) error {
				if s.ID == http2.SettingMaxConcurrentStreams {
					c.maxStreams = s.Val
				}
				return nil
			})
			c.fw.WriteSettingsAck()
			c.drain()
			c.flushLater()
			c.wmu.Unlock()
		case *http2.PingFrame:
			if f.IsAck() {
				continue
			}
			c.wmu.Lock()
			c.fw.WritePing(true, f.Data)
			c.flushLater()
			c.wmu.Unlock()
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.wmu.Lock()
				c.sendWin += int64(f.Increment)
				c.winCond.Broadcast()
				if c.drain() {
					c.flushLater()
				}
				c.wmu.Unlock()
			}
		case *http2.GoAwayFrame:
			err = fmt.Errorf("GOAWAY %v", f.ErrCode)
		case *http2.DataFrame:
			received += int(f.Length)
			if received > recvWindow/2 {
				c.wmu.Lock()
				c.fw.WriteWindowUpdate(0, uint32(received))
				c.flushLater()
				c.wmu.Unlock()
				received = 0
			}
			s := c.stream(f.StreamID)
			if s == nil {
				continue
			}
			s.data(f.Data())
			if f.StreamEnded() {
				c.finish(f.StreamID, s)
			}
		case *http2.HeadersFrame:
			cur = c.stream(f.StreamID)
			if _, err = dec.Write(f.HeaderBlockFragment()); err != nil {
				break
			}
			if f.HeadersEnded() && f.StreamEnded() && cur != nil {
				c.finish(f.StreamID, cur)
			}
		case *http2.ContinuationFrame:
			cur = c.stream(f.StreamID)
			if _, err = dec.Write(f.HeaderBlockFragment()); err != nil {
				break
			}
			if f.HeadersEnded() && cur != nil && cur.status != "" {
				// Trailers end the stream; the HEADERS frame said so.
				c.finish(f.StreamID, cur)
			}
		case *http2.RSTStreamFrame:
			if s := c.stream(f.StreamID); s != nil {
				s.reset = f.ErrCode.String()
				c.finish(f.StreamID, s)
			}
		}
		if err != nil {
			break
		}
	}
	c.wmu.Lock()
	if c.dead == nil {
		c.dead = fmt.Errorf("%w: %v", errClosed, err)
	}
	c.winCond.Broadcast()
	c.wmu.Unlock()
	c.Abandon(c.dead)
	c.nc.Close()
}

// stream is the call in flight on id; nil when none (abandoned).
func (c *Conn) stream(id uint32) *call {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.streams[id]
}

// finish ends s, the call on id, with its outcome.
func (c *Conn) finish(id uint32, s *call) {
	c.wmu.Lock()
	_, ok := c.streams[id]
	delete(c.streams, id)
	if c.drain() {
		c.flushLater()
	}
	c.wmu.Unlock()
	if !ok {
		return
	}
	switch {
	case s.reset != "":
		s.end(s.tag, 0, false, fmt.Errorf("RST_STREAM %s", s.reset))
	case s.status != "0" && s.status != "":
		code, _ := strconv.Atoi(s.status)
		s.end(s.tag, 0, false, fmt.Errorf("grpc-status %s (%s): %s", s.status, codes.Code(code), s.message))
	case s.status == "":
		s.end(s.tag, 0, false, errors.New("an answer without grpc-status"))
	case !s.answered:
		s.end(s.tag, 0, false, errNoStatus)
	default:
		s.end(s.tag, s.statuses, s.over, nil)
	}
}

// data reads the gRPC messages of a DATA frame's payload: the number of
// descriptor statuses of the RateLimitResponse.
func (s *call) data(p []byte) {
	if len(s.partial) > 0 {
		s.partial = append(s.partial, p...)
		p = s.partial
	}
	for len(p) >= 5 {
		n := int(binary.BigEndian.Uint32(p[1:5]))
		if len(p) < 5+n {
			break
		}
		var a answer
		if err := (rawCodec{}).unmarshal(p[5:5+n], &a); err == nil {
			s.answered = true
			s.statuses += a.statuses
			s.over = s.over || a.code == rlsv3.RateLimitResponse_OVER_LIMIT
		}
		p = p[5+n:]
	}
	if len(p) > 0 {
		s.partial = append(s.partial[:0:0], p...)
	} else {
		s.partial = nil
	}
}

// unmarshal is Unmarshal of a whole message.
func (rawCodec) unmarshal(b []byte, a *answer) error {
	*a = answer{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			c, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			a.code = rlsv3.RateLimitResponse_Code(c)
		}
		if num == 2 && typ == protowire.BytesType {
			a.statuses++
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}
