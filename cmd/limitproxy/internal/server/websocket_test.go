package server

import (
	"bufio"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startWebSocketEcho is a WebSocket upstream: it answers the handshake
// (RFC 6455 section 4.2.2) and echoes, unmasked, every frame it reads,
// until the connection ends. It reads from the hijacked connection's
// buffer first, as a server must.
func startWebSocketEcho(t *testing.T) string {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "websocket only", http.StatusBadRequest)
			return
		}
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
			base64.StdEncoding.EncodeToString(sum[:]))
		brw.Flush()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		for {
			op, payload, err := readFrame(brw.Reader)
			if err != nil {
				return
			}
			c.Write(append([]byte{0x80 | op, byte(len(payload))}, payload...))
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// readFrame reads one short (payload under 126 bytes) WebSocket frame,
// unmasking it if masked.
func readFrame(r io.Reader) (op byte, payload []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(h[1] & 0x7f)
	if n >= 126 {
		return 0, nil, fmt.Errorf("frame of %d: too long for this test", n)
	}
	var mask [4]byte
	if h[1]&0x80 != 0 {
		if _, err := io.ReadFull(r, mask[:]); err != nil {
			return 0, nil, err
		}
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	if h[1]&0x80 != 0 {
		for i := range payload {
			payload[i] ^= mask[i%4]
		}
	}
	return h[0] & 0x0f, payload, nil
}

// wsEarlyFrame sends, in one write, a WebSocket upgrade request and a
// first (masked, as a client's must be) text frame, as a client that does
// not wait for the 101 does, and returns the echo it reads back.
func wsEarlyFrame(t *testing.T, c net.Conn, msg string) string {
	t.Helper()
	mask := []byte{1, 2, 3, 4}
	frame := []byte{0x81, 0x80 | byte(len(msg))}
	frame = append(frame, mask...)
	for i := range len(msg) {
		frame = append(frame, msg[i]^mask[i%4])
	}
	req := "GET /chat HTTP/1.1\r\nHost: ws.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(append([]byte(req), frame...)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the handshake's answer: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake answered %d, want 101", resp.StatusCode)
	}
	_, payload, err := readFrame(br)
	if err != nil {
		t.Fatalf("no echo of the frame sent with the upgrade request: %v", err)
	}
	return string(payload)
}

// TestWebSocketEarlyFrame: a WebSocket client may send its first frame
// right behind the upgrade request, in the same packet, without waiting
// for the 101. Those bytes were read by the server with the request head
// and must reach the upstream: nginx forwards them (the reference run), and
// so must limitproxy, over plain HTTP and over TLS.
func TestWebSocketEarlyFrame(t *testing.T) {
	t.Parallel()
	echo := startWebSocketEcho(t)
	const policies = "[[policy]]\nname = \"all\"\nupstream = \"up\"\n  [[policy.limits]]\n  algorithm = \"token_bucket\"\n  rate = \"100/s\"\n  burst = 100\n"
	config := func(extra string) string {
		return "[server]\nlisten = \"127.0.0.1:0\"\n" + extra + "[admin]\nlisten = \"\"\n[log]\nlevel = \"error\"\n" +
			"[[upstream]]\nname = \"up\"\ntargets = [\"http://" + echo + "\"]\n" + policies
	}
	t.Run("nginx", func(t *testing.T) {
		addr := startNginxWebSocket(t, echo)
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := wsEarlyFrame(t, c, "hello"); got != "hello" {
			t.Errorf("echo %q, want %q", got, "hello")
		}
	})
	t.Run("http", func(t *testing.T) {
		addr := startServer(t, "ws.toml", config("")).Proxy.String()
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := wsEarlyFrame(t, c, "hello"); got != "hello" {
			t.Errorf("echo %q, want %q", got, "hello")
		}
	})
	t.Run("tls", func(t *testing.T) {
		dir := t.TempDir()
		certPEM, keyPEM, cert := selfSigned(t, 1)
		certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		os.WriteFile(certFile, certPEM, 0o600)
		os.WriteFile(keyFile, keyPEM, 0o600)
		addr := startServer(t, "ws.toml", config(fmt.Sprintf("[server.tls]\nmode = \"files\"\ncert_file = %q\nkey_file = %q\n", certFile, keyFile))).Proxy.String()
		roots := x509.NewCertPool()
		roots.AddCert(cert)
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := wsEarlyFrame(t, c, "hello"); got != "hello" {
			t.Errorf("echo %q, want %q", got, "hello")
		}
	})
}

// startNginxWebSocket runs nginx proxying WebSocket upgrades to upstream,
// as nginx's documentation configures it.
func startNginxWebSocket(t *testing.T, upstream string) string {
	t.Helper()
	addr := runNginx(t, "127.0.0.1", func(port int) string {
		return fmt.Sprintf(`  server {
    listen 127.0.0.1:%[1]d;
    location / {
      proxy_pass http://%[2]s;
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection "upgrade";
    }
  }
`, port, upstream)
	})
	return addr
}
