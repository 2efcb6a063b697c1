package server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/policy/config"
)

// The PROXY protocol tests speak to the proxy over raw loopback sockets:
// the headers are written byte for byte, as a load balancer sends them.

// ppServer is a limitproxy with one policy keyed by ip (a token bucket of
// burst 2 that refills once an hour), in front of an upstream that records
// the X-Forwarded-For of every request it receives.
type ppServer struct {
	addr string
	mu   sync.Mutex
	xff  []string // X-Forwarded-For of each request the upstream received
}

// startProxyProto runs the proxy with serverKeys added to [server] and
// tlsTable (a [server.tls] table, or "") after it.
func startProxyProto(t *testing.T, serverKeys, tlsTable string) *ppServer {
	t.Helper()
	s := &ppServer{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.xff = append(s.xff, r.Header.Get("X-Forwarded-For"))
		s.mu.Unlock()
		io.WriteString(w, "upstream")
	}))
	t.Cleanup(up.Close)
	src := fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
%s
%s
[admin]
listen = ""
[log]
level = "error"
access = false
[[upstream]]
name = "app"
targets = [%q]
[[policy]]
name = "all"
upstream = "app"
key = ["ip"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/h"
  burst = 2
`, serverKeys, tlsTable, up.URL)
	s.addr = startServer(t, "proxyproto.toml", src).Proxy.String()
	return s
}

// seen returns the X-Forwarded-For of each request the upstream received.
func (s *ppServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.xff)
}

// ppRequest is the request sent after a header: with an X-Forwarded-For of
// its own, which only a trusted peer's would be believed.
const ppRequest = "GET /x HTTP/1.1\r\nHost: api.example.com\r\nX-Forwarded-For: 198.51.100.1\r\nConnection: close\r\n\r\n"

// send opens a connection to the proxy, writes header (a PROXY header, or
// nothing) and, in the same write, the request, and returns the response's
// status; 0 when the connection was closed with nothing written.
func (s *ppServer) send(t *testing.T, header []byte) int {
	t.Helper()
	return s.sendRaw(t, header, ppRequest)
}

// sendRaw is send with request instead of ppRequest.
func (s *ppServer) sendRaw(t *testing.T, header []byte, request string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(append(slices.Clip(header), request...)); err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(c)
	if len(raw) == 0 {
		if err != nil && !isClosed(err) {
			t.Fatalf("reading the answer: %v", err)
		}
		return 0
	}
	return status(t, raw)
}

// sendTLS writes header on a new connection, then shakes hands over TLS
// and sends the request. It returns the response's status, or 0 when the
// connection was closed before a response (the handshake failing included).
func (s *ppServer) sendTLS(t *testing.T, header []byte, conf *tls.Config) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if len(header) > 0 {
		if _, err := c.Write(header); err != nil {
			t.Fatal(err)
		}
	}
	tc := tls.Client(c, conf)
	if err := tc.Handshake(); err != nil {
		return 0
	}
	if _, err := io.WriteString(tc, ppRequest); err != nil {
		return 0
	}
	raw, _ := io.ReadAll(tc)
	if len(raw) == 0 {
		return 0
	}
	return status(t, raw)
}

func status(t *testing.T, raw []byte) int {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// isClosed reports whether err is the peer closing or resetting.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "connection reset")
}

// v1 is a PROXY protocol v1 header for TCP over IPv4 from src to
// 127.0.0.1:80.
func v1(src string) []byte {
	return []byte("PROXY TCP4 " + src + " 127.0.0.1 5555 80\r\n")
}

// v2 is a PROXY protocol v2 header, built by hand: the signature, the
// version and command (0x21 PROXY, 0x20 LOCAL), the address family and
// protocol (0x11 TCP over IPv4, 0x21 over IPv6, 0x12 UDP over IPv4, 0x00
// unspecified), the length, then the addresses and ports (none when src is
// not valid).
func v2(cmd, family byte, src, dst netip.AddrPort) []byte {
	b := []byte("\r\n\r\n\x00\r\nQUIT\n")
	b = append(b, cmd, family)
	var block []byte
	if src.IsValid() {
		block = append(block, src.Addr().AsSlice()...)
		block = append(block, dst.Addr().AsSlice()...)
		block = binary.BigEndian.AppendUint16(block, src.Port())
		block = binary.BigEndian.AppendUint16(block, dst.Port())
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(block)))
	return append(b, block...)
}

var (
	ppDst4 = netip.MustParseAddrPort("127.0.0.1:80")
	ppDst6 = netip.MustParseAddrPort("[::1]:80")
)

// checkLimitPerAddress sends, for two carried client addresses a and b,
// two requests each (each address has its own burst of 2), then a third
// from a (429), and checks that the upstream saw exactly the carried
// addresses in X-Forwarded-For, the client's own being ignored.
func checkLimitPerAddress(t *testing.T, s *ppServer, send func(header []byte) int, header func(addr string) []byte, a, b string) {
	t.Helper()
	before := len(s.seen())
	for i, c := range []struct {
		addr string
		want int
	}{{a, 200}, {a, 200}, {b, 200}, {b, 200}, {a, 429}} {
		if got := send(header(c.addr)); got != c.want {
			t.Errorf("request %d, carried address %s: %d, want %d", i+1, c.addr, got, c.want)
		}
	}
	if got, want := s.seen()[before:], []string{a, a, b, b}; !slices.Equal(got, want) {
		t.Errorf("the upstream saw X-Forwarded-For %q, want %q", got, want)
	}
}

// TestProxyProtoV1: a trusted peer's v1 header makes the carried address
// the client: each address has its own limit, and the upstream sees it.
func TestProxyProtoV1(t *testing.T) {
	t.Parallel()
	s := startProxyProto(t, "proxy_protocol = true\ntrusted_proxies = [\"127.0.0.1/32\"]", "")
	checkLimitPerAddress(t, s, func(h []byte) int { return s.send(t, h) }, func(a string) []byte { return v1(a) }, "203.0.113.7", "203.0.113.8")
}

// TestProxyProtoV2: the same with binary v2 headers, TCP over IPv4 and over
// IPv6 (two addresses in different /64s, since ipv6_prefix groups by 64).
func TestProxyProtoV2(t *testing.T) {
	t.Parallel()
	s := startProxyProto(t, "proxy_protocol = true\ntrusted_proxies = [\"127.0.0.1/32\"]", "")
	send := func(h []byte) int { return s.send(t, h) }
	t.Run("ipv4", func(t *testing.T) {
		checkLimitPerAddress(t, s, send, func(a string) []byte {
			return v2(0x21, 0x11, netip.AddrPortFrom(netip.MustParseAddr(a), 5555), ppDst4)
		}, "203.0.113.17", "203.0.113.18")
	})
	t.Run("ipv6", func(t *testing.T) {
		checkLimitPerAddress(t, s, send, func(a string) []byte {
			return v2(0x21, 0x21, netip.AddrPortFrom(netip.MustParseAddr(a), 5555), ppDst6)
		}, "2001:db8:1::7", "2001:db8:2::7")
	})
}

// TestProxyProtoLocal: a LOCAL header (a load balancer's own health
// check: v2 LOCAL, with or without addresses, or v1 UNKNOWN) is served as
// the real peer, and although that peer is in trusted_proxies no
// forwarding header of the connection is believed: a client that sends a
// new X-Forwarded-For each time is keyed by the balancer (127.0.0.1), and
// the upstream is told the balancer alone.
func TestProxyProtoLocal(t *testing.T) {
	t.Parallel()
	s := startProxyProto(t, "proxy_protocol = true\ntrusted_proxies = [\"127.0.0.1/32\"]", "")
	local := v2(0x20, 0x00, netip.AddrPort{}, netip.AddrPort{})
	withAddrs := v2(0x20, 0x11, netip.MustParseAddrPort("203.0.113.99:5555"), ppDst4)
	unknown := []byte("PROXY UNKNOWN\r\n")
	unknownAddrs := []byte("PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n")
	for i, c := range []struct {
		header []byte
		want   int
	}{{local, 200}, {unknown, 200}, {withAddrs, 429}, {unknownAddrs, 429}, {local, 429}} {
		req := strings.Replace(ppRequest, "198.51.100.1", fmt.Sprintf("10.9.8.%d, 198.51.100.%d", i, i), 1)
		if got := s.sendRaw(t, c.header, req); got != c.want {
			t.Errorf("LOCAL request %d: %d, want %d", i+1, got, c.want)
		}
	}
	if got, want := s.seen(), []string{"127.0.0.1", "127.0.0.1"}; !slices.Equal(got, want) {
		t.Errorf("the upstream saw X-Forwarded-For %q, want %q", got, want)
	}
}

// TestProxyProtoFrom: proxy_protocol_from, not trusted_proxies, says who
// may send a PROXY header. A listed sender that is not a trusted proxy
// has its header's address believed, and the X-Forwarded-For of that
// (untrusted) client not; a carried address that is a trusted proxy has
// its X-Forwarded-For believed; a trusted proxy that is not a listed
// sender is refused a header, and served without one.
func TestProxyProtoFrom(t *testing.T) {
	t.Parallel()
	t.Run("sender not trusted", func(t *testing.T) {
		t.Parallel()
		s := startProxyProto(t, "proxy_protocol = true\nproxy_protocol_from = [\"127.0.0.1/32\"]\ntrusted_proxies = [\"10.0.0.0/8\"]", "")
		if got := s.send(t, v1("203.0.113.7")); got != 200 {
			t.Errorf("header from a listed sender: %d, want 200", got)
		}
		if got := s.send(t, v1("10.1.1.1")); got != 200 {
			t.Errorf("header carrying a trusted proxy: %d, want 200", got)
		}
		if got, want := s.seen(), []string{"203.0.113.7", "198.51.100.1, 10.1.1.1"}; !slices.Equal(got, want) {
			t.Errorf("the upstream saw X-Forwarded-For %q, want %q", got, want)
		}
	})
	t.Run("trusted not sender", func(t *testing.T) {
		t.Parallel()
		s := startProxyProto(t, "proxy_protocol = true\nproxy_protocol_from = [\"10.0.0.0/8\"]\ntrusted_proxies = [\"127.0.0.1/32\"]", "")
		if got := s.send(t, v1("203.0.113.7")); got != 0 {
			t.Errorf("header from a peer not in proxy_protocol_from: answered %d, want the connection closed", got)
		}
		if got := s.send(t, nil); got != 200 {
			t.Errorf("no header from a trusted proxy: %d, want 200", got)
		}
		if got, want := s.seen(), []string{"198.51.100.1, 127.0.0.1"}; !slices.Equal(got, want) {
			t.Errorf("the upstream saw X-Forwarded-For %q, want %q", got, want)
		}
	})
}

// TestProxyProtoTrustedNeedsHeader: a trusted peer must send a valid
// header: without one, or with a malformed one, or with one that carries
// no TCP address, the connection is closed with nothing written and
// nothing reaches the upstream.
func TestProxyProtoTrustedNeedsHeader(t *testing.T) {
	t.Parallel()
	s := startProxyProto(t, "proxy_protocol = true\ntrusted_proxies = [\"127.0.0.1/32\"]", "")
	for name, h := range map[string][]byte{
		"no header":   nil,
		"v1 bad":      []byte("PROXY TCP4 203.0.113.7\r\n"),
		"v1 too long": []byte("PROXY TCP4 " + strings.Repeat("1", 120) + "\r\n"),
		"v2 udp":      v2(0x21, 0x12, netip.MustParseAddrPort("203.0.113.7:5555"), ppDst4),
		"v2 bad cmd":  v2(0x22, 0x11, netip.MustParseAddrPort("203.0.113.7:5555"), ppDst4),
	} {
		if got := s.send(t, h); got != 0 {
			t.Errorf("%s: answered %d, want the connection closed", name, got)
		}
	}
	if got := s.seen(); len(got) != 0 {
		t.Errorf("%d requests reached the upstream", len(got))
	}
}

// TestProxyProtoUntrusted: a peer outside trusted_proxies may not send a
// header (refused, nothing reaches the upstream); without one it is served
// as it is.
func TestProxyProtoUntrusted(t *testing.T) {
	t.Parallel()
	s := startProxyProto(t, "proxy_protocol = true\ntrusted_proxies = [\"10.0.0.0/8\"]", "")
	for name, h := range map[string][]byte{
		"v1":       v1("203.0.113.7"),
		"v2 ipv4":  v2(0x21, 0x11, netip.MustParseAddrPort("203.0.113.7:5555"), ppDst4),
		"v2 ipv6":  v2(0x21, 0x21, netip.MustParseAddrPort("[2001:db8::7]:5555"), ppDst6),
		"v2 local": v2(0x20, 0x00, netip.AddrPort{}, netip.AddrPort{}),
	} {
		if got := s.send(t, h); got != 0 {
			t.Errorf("%s header from an untrusted peer: answered %d, want the connection closed", name, got)
		}
	}
	if got := s.seen(); len(got) != 0 {
		t.Fatalf("%d requests reached the upstream: %q", len(got), got)
	}
	if got := s.send(t, nil); got != 200 {
		t.Errorf("no header from an untrusted peer: %d, want 200", got)
	}
	// Its own X-Forwarded-For is not believed: the chain starts afresh.
	if got, want := s.seen(), []string{"127.0.0.1"}; !slices.Equal(got, want) {
		t.Errorf("the upstream saw X-Forwarded-For %q, want %q", got, want)
	}
}

// TestProxyProtoSilentPeer: trusted peers that connect and send nothing
// are closed after read_header_timeout with nothing written, and hold
// neither the listener nor anyone else meanwhile: a connection with a
// header is served while they wait.
func TestProxyProtoSilentPeer(t *testing.T) {
	t.Parallel()
	// A second: a request with a header served behind 5 silent peers
	// one after another would wait 5 s; one served beside them, at
	// once. 3 s tells the two apart on a loaded machine (300 ms did
	// not: 2 s seen while benchmarks ran beside the tests).
	const timeout = time.Second
	s := startProxyProto(t, fmt.Sprintf("proxy_protocol = true\ntrusted_proxies = [\"127.0.0.1/32\"]\nread_header_timeout = %q", timeout), "")
	type closed struct {
		after time.Duration
		n     int
		err   error
	}
	results := make(chan closed, 5)
	begin := time.Now()
	for range cap(results) {
		c, err := net.DialTimeout("tcp", s.addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		go func() {
			dialed := time.Now()
			n, err := io.Copy(io.Discard, c)
			results <- closed{time.Since(dialed), int(n), err}
		}()
	}
	if got := s.send(t, v1("203.0.113.7")); got != 200 {
		t.Errorf("with silent peers waiting, a request with a header: %d, want 200", got)
	}
	if took := time.Since(begin); took > 3*timeout {
		t.Errorf("with 5 silent peers waiting, a request with a header took %v", took)
	}
	for range cap(results) {
		r := <-results
		switch {
		case r.err != nil && !isClosed(r.err):
			t.Errorf("a silent peer was not closed: %v after %v", r.err, r.after)
		case r.n != 0:
			t.Errorf("a silent peer was sent %d bytes", r.n)
		case r.after < timeout*2/3 || r.after > 5*time.Second:
			t.Errorf("a silent peer was closed after %v; read_header_timeout is %v", r.after, timeout)
		}
	}
}

// TestProxyProtoTLS: the header comes before the TLS handshake; with it,
// HTTPS is keyed and forwarded by the carried address; a trusted peer
// without it gets no handshake.
func TestProxyProtoTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	certPEM, keyPEM, cert := selfSigned(t, 1)
	os.WriteFile(certFile, certPEM, 0o600)
	os.WriteFile(keyFile, keyPEM, 0o600)
	s := startProxyProto(t, "proxy_protocol = true\ntrusted_proxies = [\"127.0.0.1/32\"]",
		fmt.Sprintf("[server.tls]\nmode = \"files\"\ncert_file = %q\nkey_file = %q\n", certFile, keyFile))
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	conf := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
	send := func(h []byte) int { return s.sendTLS(t, h, conf) }
	t.Run("v1", func(t *testing.T) {
		checkLimitPerAddress(t, s, send, func(a string) []byte { return v1(a) }, "203.0.113.27", "203.0.113.28")
	})
	t.Run("v2", func(t *testing.T) {
		checkLimitPerAddress(t, s, send, func(a string) []byte {
			return v2(0x21, 0x21, netip.AddrPortFrom(netip.MustParseAddr(a), 5555), ppDst6)
		}, "2001:db8:3::7", "2001:db8:4::7")
	})
	t.Run("local", func(t *testing.T) {
		// Under TLS too, a LOCAL connection's X-Forwarded-For is not
		// believed.
		before := len(s.seen())
		if got := send(v2(0x20, 0x00, netip.AddrPort{}, netip.AddrPort{})); got != 200 {
			t.Errorf("LOCAL over TLS: %d, want 200", got)
		}
		if got, want := s.seen()[before:], []string{"127.0.0.1"}; !slices.Equal(got, want) {
			t.Errorf("the upstream saw X-Forwarded-For %q, want %q", got, want)
		}
	})
	t.Run("no header", func(t *testing.T) {
		before := len(s.seen())
		if got := send(nil); got != 0 {
			t.Errorf("a trusted peer without a header: %d, want no handshake", got)
		}
		if got := s.seen()[before:]; len(got) != 0 {
			t.Errorf("%d requests reached the upstream", len(got))
		}
	})
}

// TestProxyProtoConfig: proxy_protocol is off by default; on, it needs
// trusted_proxies (an error at the key's position otherwise); and a reload
// that changes it is reported as needing a restart.
func TestProxyProtoConfig(t *testing.T) {
	t.Parallel()
	const rest = "[[upstream]]\nname = \"app\"\ntargets = [\"http://127.0.0.1:1\"]\n" +
		"[[policy]]\nname = \"all\"\nupstream = \"app\"\n  [[policy.limits]]\n  algorithm = \"token_bucket\"\n  rate = \"1/s\"\n"
	parse := func(server string) (*config.Config, error) {
		return config.Parse("pp.toml", []byte("[server]\nlisten = \"127.0.0.1:0\"\n"+server+rest))
	}
	off, err := parse("")
	if err != nil {
		t.Fatal(err)
	}
	if off.Server.ProxyProtocol {
		t.Error("proxy_protocol is on by default")
	}
	for _, c := range []struct {
		server    string
		line, col int
	}{
		{"proxy_protocol = true\n", 3, 1},
		{"trusted_proxies = []\n  proxy_protocol = true\n", 4, 3},
	} {
		_, err = parse(c.server)
		var es config.Errors
		if !errors.As(err, &es) || len(es) != 1 {
			t.Fatalf("proxy_protocol without trusted_proxies: %v, want one error", err)
		}
		e := es[0]
		if e.Key != "server.proxy_protocol" || e.Line != c.line || e.Col != c.col || !strings.Contains(e.Msg, "trusted_proxies") {
			t.Errorf("proxy_protocol without trusted_proxies: %q (key %q at %d:%d), want server.proxy_protocol at %d:%d naming trusted_proxies",
				err, e.Key, e.Line, e.Col, c.line, c.col)
		}
		if want := fmt.Sprintf("pp.toml:%d:%d: server.proxy_protocol: ", c.line, c.col); !strings.HasPrefix(err.Error(), want) {
			t.Errorf("error %q, want it to start with %q", err, want)
		}
	}
	on, err := parse("proxy_protocol = true\ntrusted_proxies = [\"10.0.0.0/8\"]\n")
	if err != nil {
		t.Fatal(err)
	}
	if !on.Server.ProxyProtocol {
		t.Error("proxy_protocol = true is off")
	}
	if got := restartOnly(off, on); !slices.Equal(got, []string{"server.proxy_protocol"}) {
		t.Errorf("a reload turning proxy_protocol on needs restarting %v, want [server.proxy_protocol]", got)
	}
}
