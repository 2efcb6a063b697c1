// Command h2floor is the floor of any unary gRPC server written in Go on
// this machine: it reads HTTP/2 frames with x/net/http2's Framer (HPACK
// decoded, SETTINGS and PING acknowledged, the connection's window
// replenished) and answers every call that ends with one fixed
// RateLimitResponse (OK, one OK status), in HEADERS, DATA and trailers,
// on one goroutine per connection that flushes its answers when nothing
// more is buffered to read. No gRPC library, no protobuf decoding, no
// deadlines, no stream flow control, no decision: not a server to run,
// a measurement of what the kernel, the Go runtime and HTTP/2 framing
// cost before anything else (bench/rls.sh's "HTTP/2 framing alone" row).
//
//	h2floor -listen 127.0.0.1:8081
package main

import (
	"bufio"
	"bytes"
	"flag"
	"io"
	"log"
	"net"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// msg is the answer's gRPC message: uncompressed, 6 bytes, overall_code
// OK and one status OK.
var msg = []byte{0, 0, 0, 0, 6, 0x08, 0x01, 0x12, 0x02, 0x08, 0x01}

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve on")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c)
	}
}

// serve answers c's calls until it fails or closes.
func serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 16<<10)
	bw := bufio.NewWriterSize(c, 16<<10)
	pre := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(br, pre); err != nil || string(pre) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(bw, br)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.SetReuseFrames()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1000})
	fr.WriteWindowUpdate(0, 1<<20)
	bw.Flush()
	var unacked uint32
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				respond(fr, &hb, enc, f.StreamID)
			}
		case *http2.DataFrame:
			unacked += uint32(len(f.Data()))
			if f.StreamEnded() {
				respond(fr, &hb, enc, f.StreamID)
			}
			if unacked > 1<<18 {
				fr.WriteWindowUpdate(0, unacked)
				unacked = 0
			}
		}
		if br.Buffered() == 0 {
			if bw.Flush() != nil {
				return
			}
		}
	}
}

// respond writes stream id's answer to fr's buffer.
func respond(fr *http2.Framer, hb *bytes.Buffer, enc *hpack.Encoder, id uint32) {
	hb.Reset()
	enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
	fr.WriteData(id, false, msg)
	hb.Reset()
	enc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: "0"})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: true})
}
