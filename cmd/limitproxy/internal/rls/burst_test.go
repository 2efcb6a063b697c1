package rls

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// TestBurstKeptWorkers: with one CPU (GOMAXPROCS 1), a burst of calls
// waiting in the sockets of four connections is served by the workers
// kept for calls, not by a new goroutine per call that a connection's
// reader hands out before any worker has run (StreamWorkers,
// yieldConn): 4 × 200 calls create fewer than 40 goroutines (without the
// yield, about 700).
func TestBurstKeptWorkers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	s := benchService(t, false)
	srv, err := New(Options{Handler: s.h, Config: s.cfg})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go Serve(srv, ln)
	defer srv.Stop()

	const conns, calls = 4, 200
	msg, err := proto.Marshal(benchCalls(1)[0])
	if err != nil {
		t.Fatal(err)
	}
	var cs []net.Conn
	var bursts [][]byte
	for range conns {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The preface and settings, answered before the burst, so that
		// the connection's goroutines are all there before counting.
		var b bytes.Buffer
		b.WriteString(http2.ClientPreface)
		fr := http2.NewFramer(&b, nil)
		fr.WriteSettings()
		fr.WriteSettingsAck()
		if _, err := c.Write(b.Bytes()); err != nil {
			t.Fatal(err)
		}
		rd := http2.NewFramer(nil, c)
		for {
			f, err := rd.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
				break
			}
		}
		cs = append(cs, c)
		bursts = append(bursts, burst(t, msg, calls))
	}
	// Every call's answer, read by a goroutine per connection started
	// before counting.
	done := make(chan error, conns)
	for _, c := range cs {
		go func() { done <- readAnswers(c, calls) }()
	}
	time.Sleep(100 * time.Millisecond) // the readers wait in Read
	before := goroutinesCreated()
	for i, c := range cs {
		if _, err := c.Write(bursts[i]); err != nil {
			t.Fatal(err)
		}
	}
	for range cs {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	n := goroutinesCreated() - before
	t.Logf("%d calls in bursts on %d connections: %d goroutines created", conns*calls, conns, n)
	if n >= 40 {
		t.Errorf("%d calls in bursts created %d goroutines, want fewer than 40", conns*calls, n)
	}
}

// burst returns n calls of msg to ShouldRateLimit, on streams 1, 3, ….
func burst(t *testing.T, msg []byte, n int) []byte {
	t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":authority", "rls"},
		{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	data := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	data = append(data, msg...)
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	for i := range n {
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(id, true, data); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// readAnswers reads frames from c until n streams have ended.
func readAnswers(c net.Conn, n int) error {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	fr := http2.NewFramer(nil, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for ended := 0; ended < n; {
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamEnded() {
			if g := field(h, "grpc-status"); g != "0" {
				return fmt.Errorf("stream %d: grpc-status %q: %s", h.StreamID, g, field(h, "grpc-message"))
			}
			ended++
		}
	}
	return nil
}

// field is h's field name, "" when it has none.
func field(h *http2.MetaHeadersFrame, name string) string {
	for _, f := range h.Fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// goroutinesCreated is the goroutines the process has created so far.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
