package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The client-address tests send hand-written requests over raw loopback
// sockets, from chosen source addresses (127.0.0.2 plays the trusted
// balancer, 127.0.0.3 the client), so that every forwarding header reaches
// the proxy exactly as written.

// seenHeaders are the client-address headers of one request the upstream
// received.
type seenHeaders struct {
	XFF, Forwarded, RealIP, Named string
}

// cipServer is a limitproxy in front of an upstream that records what it
// is told about each request's client, with one policy keyed by ip: 2
// requests an hour, then a 15-minute ban answered 403.
type cipServer struct {
	addr string
	mu   sync.Mutex
	seen []seenHeaders
}

// startClientIP runs the proxy on 127.0.0.1 with serverKeys added to
// [server]; named is a header the upstream also records.
func startClientIP(t *testing.T, serverKeys, named string) *cipServer {
	t.Helper()
	s := &cipServer{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, seenHeaders{
			XFF: strings.Join(r.Header.Values("X-Forwarded-For"), " | "), Forwarded: strings.Join(r.Header.Values("Forwarded"), " | "),
			RealIP: strings.Join(r.Header.Values("X-Real-Ip"), " | "), Named: strings.Join(r.Header.Values(named), " | "),
		})
		s.mu.Unlock()
		io.WriteString(w, "upstream")
	}))
	t.Cleanup(up.Close)
	src := fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
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
  rate = "2/h"
  burst = 2
  [policy.ban]
  duration = "15m"
  status = 403
`, serverKeys, up.URL)
	s.addr = startServer(t, "clientip.toml", src).Proxy.String()
	return s
}

func (s *cipServer) received() []seenHeaders {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// sendFrom sends one raw request from the loopback address from to addr
// and returns the response's status.
func sendFrom(t *testing.T, from, addr, request string) int {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// rawRequest is a GET with the given header lines.
func rawRequest(lines ...string) string {
	var b strings.Builder
	b.WriteString("GET /x HTTP/1.1\r\nHost: api.example.com\r\n")
	for _, l := range lines {
		b.WriteString(l + "\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	return b.String()
}

// wantStatuses checks that n requests made by send(i) get 200, 200, then
// 403: the rejection bans the key at once.
func wantStatuses(t *testing.T, n int, send func(i int) int) {
	t.Helper()
	var got []int
	for i := range n {
		got = append(got, send(i))
	}
	want := []int{200, 200}
	for len(want) < n {
		want = append(want, 403)
	}
	if !slices.Equal(got, want) {
		t.Errorf("statuses %v, want %v: the client must not make itself fresh keys", got, want)
	}
}

// wantSeen checks what the upstream was told of each request it got.
func wantSeen(t *testing.T, s *cipServer, want seenHeaders) {
	t.Helper()
	got := s.received()
	if len(got) != 2 {
		t.Fatalf("the upstream received %d requests, want 2", len(got))
	}
	for i, g := range got {
		if g != want {
			t.Errorf("upstream request %d: %+v, want %+v", i+1, g, want)
		}
	}
}

// loopbackPort returns a free port on the loopback address host.
func loopbackPort(t *testing.T, host string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startNginxBalancer runs nginx on 127.0.0.2 as a load balancer in front
// of backend (connecting from 127.0.0.2 too), configured as nginx's
// documentation has it: the stock X-Forwarded-For line, everything else
// the client sent passed through.
func startNginxBalancer(t *testing.T, backend string) string {
	t.Helper()
	addr := runNginx(t, "127.0.0.2", func(port int) string {
		return fmt.Sprintf(`  server {
    listen 127.0.0.2:%[1]d;
    location / {
      proxy_pass http://%[2]s;
      proxy_bind 127.0.0.2;
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }
  }
`, port, backend)
	})
	return addr
}

// TestClientIPBehindNginx is the hostile-client probe: behind a real nginx
// that appends to X-Forwarded-For and passes the rest through, a client
// that sends a new Forwarded, X-Forwarded-For and X-Real-IP with each
// request is still one client: 2 requests admitted at 2/h, then the
// policy's ban. The upstream is told that same client in every header.
func TestClientIPBehindNginx(t *testing.T) {
	t.Parallel()
	s := startClientIP(t, `trusted_proxies = ["127.0.0.2/32"]`, "True-Client-Ip")
	lb := startNginxBalancer(t, s.addr)
	wantStatuses(t, 6, func(i int) int {
		return sendFrom(t, "127.0.0.3", lb, rawRequest(
			fmt.Sprintf("Forwarded: for=10.9.8.%d", i),
			fmt.Sprintf("X-Forwarded-For: 10.9.7.%d", i),
			fmt.Sprintf("X-Forwarded-For: [2001:db8::%d]:4711, unknown", i),
			fmt.Sprintf("X-Real-IP: 10.9.6.%d", i),
			fmt.Sprintf("True-Client-IP: 10.9.5.%d", i)))
	})
	wantSeen(t, s, seenHeaders{XFF: "127.0.0.3, 127.0.0.2", Forwarded: "for=127.0.0.3, for=127.0.0.2", RealIP: "127.0.0.3", Named: "127.0.0.3"})
}

// TestClientIPTrustedBalancerXFF: a trusted balancer's X-Forwarded-For,
// whatever the client put on its left: repeated lines, garbage, unknown
// and obfuscated elements, IPv6 with brackets and ports. The key is the
// rightmost address not trusted (or the trusted hop that reported an
// unparseable one), and the upstream's chain starts with it.
func TestClientIPTrustedBalancerXFF(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		lines func(i int) []string
		xff   string
	}{
		{"repeated lines", func(i int) []string {
			return []string{fmt.Sprintf("X-Forwarded-For: 10.9.8.%d", i), "X-Forwarded-For: 203.0.113.7", "X-Forwarded-For: 127.0.0.2"}
		}, "203.0.113.7, 127.0.0.2, 127.0.0.2"},
		{"garbage on the left", func(i int) []string {
			return []string{fmt.Sprintf("X-Forwarded-For: <%d>, 1.2.3.4.5, _hidden%d,, 203.0.113.7", i, i)}
		}, "203.0.113.7, 127.0.0.2"},
		{"unknown hop", func(i int) []string {
			return []string{fmt.Sprintf("X-Forwarded-For: 10.9.8.%d, unknown", i)}
		}, "127.0.0.2"},
		{"ipv6 brackets ports", func(i int) []string {
			return []string{fmt.Sprintf("X-Forwarded-For: 10.9.8.%d, [2001:db8::1]:%d", i, 4000+i)}
		}, "2001:db8::1, 127.0.0.2"},
		{"ipv6 /64", func(i int) []string {
			return []string{fmt.Sprintf("X-Forwarded-For: 2001:db8:0:0:%x::1", i+1)}
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := startClientIP(t, `trusted_proxies = ["127.0.0.2/32"]`, "")
			wantStatuses(t, 4, func(i int) int {
				return sendFrom(t, "127.0.0.2", s.addr, rawRequest(append(c.lines(i), fmt.Sprintf("Forwarded: for=10.9.9.%d", i))...))
			})
			if c.xff == "" {
				return
			}
			wantSeen(t, s, seenHeaders{XFF: c.xff, Forwarded: strings.ReplaceAll("for="+strings.ReplaceAll(c.xff, ", ", ", for="), "for=2001:db8::1", `for="[2001:db8::1]"`)})
		})
	}
}

// TestClientIPForwardedConfigured: with client_ip_header = "Forwarded",
// its quoted IPv6 for= with a port is the client, and X-Forwarded-For
// changes nothing.
func TestClientIPForwardedConfigured(t *testing.T) {
	t.Parallel()
	s := startClientIP(t, "trusted_proxies = [\"127.0.0.2/32\"]\nclient_ip_header = \"Forwarded\"", "")
	wantStatuses(t, 4, func(i int) int {
		return sendFrom(t, "127.0.0.2", s.addr, rawRequest(
			fmt.Sprintf(`Forwarded: for=10.9.8.%d;proto=https, for="[2001:db8::1]:4711"`, i),
			fmt.Sprintf("X-Forwarded-For: 10.9.7.%d", i),
			fmt.Sprintf("X-Real-IP: 10.9.6.%d", i)))
	})
	wantSeen(t, s, seenHeaders{XFF: "2001:db8::1, 127.0.0.2", Forwarded: `for="[2001:db8::1]", for=127.0.0.2`, RealIP: "2001:db8::1"})
}

// TestClientIPNamedHeader: with a CDN's header configured, it is the
// client; X-Forwarded-For and Forwarded change nothing.
func TestClientIPNamedHeader(t *testing.T) {
	t.Parallel()
	s := startClientIP(t, "trusted_proxies = [\"127.0.0.2/32\"]\nclient_ip_header = \"CF-Connecting-IP\"", "Cf-Connecting-Ip")
	wantStatuses(t, 4, func(i int) int {
		return sendFrom(t, "127.0.0.2", s.addr, rawRequest(
			"CF-Connecting-IP: 203.0.113.7",
			fmt.Sprintf("X-Forwarded-For: 10.9.7.%d", i),
			fmt.Sprintf("Forwarded: for=10.9.8.%d", i)))
	})
	wantSeen(t, s, seenHeaders{XFF: "203.0.113.7, 127.0.0.2", Forwarded: "for=203.0.113.7, for=127.0.0.2", Named: "203.0.113.7"})
}

// TestClientIPTrustedHops: a cloud balancer whose address is not known in
// advance (any of 127.0.0.0/8 here) appends the client to
// X-Forwarded-For; trusted_hops = 1 takes the rightmost element, whatever
// the client wrote on its left, from whichever balancer address.
func TestClientIPTrustedHops(t *testing.T) {
	t.Parallel()
	s := startClientIP(t, "trusted_proxies = [\"127.0.0.0/8\"]\ntrusted_hops = 1", "")
	wantStatuses(t, 4, func(i int) int {
		return sendFrom(t, fmt.Sprintf("127.0.0.%d", 5+i), s.addr, rawRequest(fmt.Sprintf("X-Forwarded-For: 10.9.8.%d, 198.51.100.7", i)))
	})
	got := s.received()
	if len(got) != 2 || got[0].XFF != "198.51.100.7, 127.0.0.5" || got[1].XFF != "198.51.100.7, 127.0.0.6" {
		t.Errorf("the upstream saw %+v, want X-Forwarded-For 198.51.100.7 then each balancer", got)
	}
}
