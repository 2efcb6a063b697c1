package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/limitproxy/limitproxy/policy/config"
)

// The gRPC tests run grpc-go on both sides of limitproxy over loopback: a
// grpc-go server as the upstream (spoken to in h2c), and grpc-go clients
// in h2c (the listener's h2c) and over TLS. The services are grpc-go's
// health service (Check is unary, Watch server-streaming) and a
// bidirectional echo registered by hand with a raw codec, so that no
// generated code is needed.

// rawCodec passes messages as raw bytes (content-subtype "raw": the calls
// go out as application/grpc+raw).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "raw" }

func init() { encoding.RegisterCodec(rawCodec{}) }

// echoDesc is a bidirectional stream that sends each message back at once.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName: "Chat", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, s grpc.ServerStream) error {
			for {
				var m []byte
				if err := s.RecvMsg(&m); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
				if err := s.SendMsg(&m); err != nil {
					return err
				}
			}
		},
	}},
}

// grpcUpstream is a grpc-go server on loopback with the health and echo
// services; calls counts the calls that reached it.
type grpcUpstream struct {
	addr   string
	health *health.Server
	calls  atomic.Int64
}

func startGRPCUpstream(t *testing.T) *grpcUpstream {
	t.Helper()
	u := &grpcUpstream{health: health.NewServer()}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			u.calls.Add(1)
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			u.calls.Add(1)
			return h(srv, ss)
		}))
	healthpb.RegisterHealthServer(srv, u.health)
	srv.RegisterService(&echoDesc, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	u.addr = ln.Addr().String()
	return u
}

// grpcProxy is a running limitproxy for the gRPC tests.
type grpcProxy struct {
	addr, admin string
}

// startGRPCProxy runs limitproxy in front of up with tlsTable (a
// [server.tls] table, or "" for h2c on a plain listener), and a
// send_timeout of a second. Policies: Check is limited to 2 an hour (one
// shared key), "/paced." to 2 a second with a burst of 1, the echo and
// Watch are not limited in practice, "/down." goes to an upstream nobody
// listens on, and /plain (HTTP/1) is limited to 1. The "grpc" upstream
// buffers request bodies (the default: unary and server-streaming calls
// work so); the echo's bidirectional stream goes to "grpcstream", the same
// server marked as taking streamed bodies (request_buffering = false).
func startGRPCProxy(t *testing.T, up *grpcUpstream, tlsTable string) *grpcProxy {
	t.Helper()
	src := fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
h2c = true
send_timeout = "1s"
%[1]s
[admin]
listen = "127.0.0.1:0"
[log]
level = "error"
access = false
[[upstream]]
name = "grpc"
targets = ["http://%[2]s"]
protocol = "h2c"
[[upstream]]
name = "grpcstream"
targets = ["http://%[2]s"]
protocol = "h2c"
request_buffering = false
[[upstream]]
name = "down"
targets = ["http://127.0.0.1:%[3]d"]
protocol = "h2c"
max_fails = 0
[[policy]]
name = "check"
upstream = "grpc"
key = []
match = { path = "/grpc.health.v1.Health/Check" }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/h"
  burst = 2
[[policy]]
name = "paced"
upstream = "grpc"
key = []
match = { path_prefix = "/paced." }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "2/s"
  burst = 1
[[policy]]
name = "down"
upstream = "down"
match = { path_prefix = "/down." }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000/s"
[[policy]]
name = "plain"
upstream = "grpc"
match = { path = "/plain" }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/h"
  burst = 1
[[policy]]
name = "echo"
upstream = "grpcstream"
match = { path_prefix = "/test.Echo/" }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000/s"
[[policy]]
name = "rest"
upstream = "grpc"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000/s"
`, tlsTable, up.addr, freePort(t))
	l := startServer(t, "grpc.toml", src)
	return &grpcProxy{addr: l.Proxy.String(), admin: l.Admin.String()}
}

// decisions returns limitproxy_requests_total for policy and decision.
func (p *grpcProxy) decisions(t *testing.T, policy, decision string) int {
	t.Helper()
	re := regexp.MustCompile(`(?m)^limitproxy_requests_total\{decision="` + decision + `",policy="` + policy + `"\} (\d+)`)
	m := re.FindStringSubmatch(scrape(t, p.admin))
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// checkLimited makes three Check calls on cc: two pass, the third is
// RESOURCE_EXHAUSTED with the pushback and the RateLimit fields as
// metadata.
func checkLimited(t *testing.T, cc *grpc.ClientConn) {
	t.Helper()
	client := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 2 {
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("call %d: %v, %v", i, resp, err)
		}
	}
	var hdr, trl metadata.MD
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
	st := grpcstatus.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "check") {
		t.Fatalf("third call: %v, want RESOURCE_EXHAUSTED naming the policy", err)
	}
	md := metadata.Join(hdr, trl)
	pushback, _ := strconv.Atoi(first(md, "grpc-retry-pushback-ms"))
	// One token an hour: the next one in (just under) 3,600,000 ms.
	if pushback < 3_500_000 || pushback > 3_600_000 {
		t.Errorf("grpc-retry-pushback-ms %q, want about an hour", first(md, "grpc-retry-pushback-ms"))
	}
	if rl := first(md, "ratelimit"); !strings.HasPrefix(rl, `"check";r=0;t=`) {
		t.Errorf("ratelimit metadata %q", rl)
	}
	if pol := first(md, "ratelimit-policy"); pol != `"check";q=2;w=7200` {
		t.Errorf("ratelimit-policy metadata %q", pol)
	}
}

// watchFlows opens a Watch through cc and has it deliver three statuses,
// changing the service's status on up each time the previous message has
// arrived and idle has passed: each message arrives while the stream
// stays open, so the proxy passes it on at once, not at the stream's end.
func watchFlows(t *testing.T, cc *grpc.ClientConn, up *grpcUpstream, idle time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second+3*idle)
	defer cancel()
	// The status is set before the Watch opens, so that its first message
	// is SERVING however soon the upstream's handler runs.
	up.health.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
	w, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING} {
		if i > 0 {
			time.Sleep(idle) // a real stream idle on the real clock that the proxy's send_timeout runs on: the scenario
			up.health.SetServingStatus("svc", s)
		}
		resp, err := w.Recv()
		if err != nil || resp.Status != s {
			t.Fatalf("watch message %d: %v, %v, want %v", i, resp, err, s)
		}
	}
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// TestGRPCh2c: grpc-go through limitproxy in h2c on both sides: unary
// calls pass and are limited with RESOURCE_EXHAUSTED; a server stream
// and a bidirectional stream flow message by message; an upstream that is
// down is UNAVAILABLE; HTTP/1 requests still get 429 and problem+json.
func TestGRPCh2c(t *testing.T) {
	t.Parallel()
	up := startGRPCUpstream(t)
	p := startGRPCProxy(t, up, "")
	cc := dial(t, p.addr)

	checkLimited(t, cc)
	if n := up.calls.Load(); n != 2 {
		t.Errorf("the upstream got %d calls, want the 2 admitted", n)
	}

	watchFlows(t, cc, up, 0)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Bidirectional: each message comes back before the next is sent.
	chat, err := cc.NewStream(ctx, &echoDesc.Streams[0], "/test.Echo/Chat", grpc.CallContentSubtype("raw"))
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"one", "two", "three"} {
		b := []byte(msg)
		if err := chat.SendMsg(&b); err != nil {
			t.Fatal(err)
		}
		var got []byte
		if err := chat.RecvMsg(&got); err != nil || string(got) != msg {
			t.Fatalf("echo of %q: %q, %v", msg, got, err)
		}
	}
	chat.CloseSend()
	var rest []byte
	if err := chat.RecvMsg(&rest); err != io.EOF {
		t.Fatalf("end of the echo stream: %v, want io.EOF", err)
	}

	// The upstream is down: UNAVAILABLE, with the proxy's message.
	var out healthpb.HealthCheckResponse
	err = cc.Invoke(ctx, "/down.Service/Method", &healthpb.HealthCheckRequest{}, &out)
	if st := grpcstatus.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "did not answer") {
		t.Errorf("call to a dead upstream: %v, want UNAVAILABLE from the proxy", err)
	}

	// HTTP/1, not gRPC: the usual 429 and problem+json.
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		resp, err := http.Post("http://"+p.addr+"/plain", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		// The upstream is a gRPC server: HTTP/1 gets its own error, never 429.
		if i == 0 && resp.StatusCode == http.StatusTooManyRequests || i == 1 && (resp.StatusCode != want || body["status"] != float64(429)) {
			t.Errorf("HTTP/1 request %d: %d %v", i, resp.StatusCode, body)
		}
	}
}

// TestGRPCRetryPolicy: under a retry policy that retries UNAVAILABLE (and
// even RESOURCE_EXHAUSTED), a call rejected by a limit reaches the proxy
// once — RESOURCE_EXHAUSTED with an hour's pushback is not retried within
// the call's deadline — while a call to a dead upstream, UNAVAILABLE, is
// retried up to the policy's 5 attempts, as it should be; and a short
// pushback is waited out, the retry admitted.
func TestGRPCRetryPolicy(t *testing.T) {
	t.Parallel()
	up := startGRPCUpstream(t)
	p := startGRPCProxy(t, up, "")
	const svc = `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}, {"service": "down.Service"}, {"service": "paced.Service"}],
	  "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.05s", "backoffMultiplier": 2,
	    "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]}`
	cc := dial(t, p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(svc))
	client := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	_, err := client.Check(short, &healthpb.HealthCheckRequest{})
	cancelShort()
	if c := grpcstatus.Code(err); c != codes.ResourceExhausted && c != codes.DeadlineExceeded {
		t.Fatalf("limited call: %v", err)
	}
	if n := p.decisions(t, "check", "rejected"); n != 1 {
		t.Errorf("the limited call reached the proxy %d times, want once", n)
	}
	var out healthpb.HealthCheckResponse
	err = cc.Invoke(ctx, "/down.Service/Method", &healthpb.HealthCheckRequest{}, &out)
	if grpcstatus.Code(err) != codes.Unavailable {
		t.Fatalf("call to a dead upstream: %v", err)
	}
	if n := p.decisions(t, "down", "allowed"); n != 5 {
		t.Errorf("the UNAVAILABLE call was tried %d times, want the policy's 5", n)
	}

	// The pushback is honoured: at 2 a second with a burst of 1, a second
	// call at once is rejected with a pushback of up to 500 ms, and its
	// retry, that long later, is admitted and reaches the upstream (which
	// does not serve paced.Service: UNIMPLEMENTED). Retried on grpc-go's
	// own backoff instead (10 to 50 ms), it would be rejected again and
	// again, up to the 5 attempts.
	for i := range 2 {
		err := cc.Invoke(ctx, "/paced.Service/Method", &healthpb.HealthCheckRequest{}, &out)
		if grpcstatus.Code(err) != codes.Unimplemented {
			t.Fatalf("paced call %d: %v, want the upstream's UNIMPLEMENTED", i, err)
		}
	}
	if r, a := p.decisions(t, "paced", "rejected"), p.decisions(t, "paced", "allowed"); r != 1 || a != 2 {
		t.Errorf("paced calls: %d rejected and %d admitted attempts, want 1 and 2 (one retry after the pushback)", r, a)
	}
}

// TestGRPCIdleStream: a server stream that waits longer than send_timeout
// (a second here) for its upstream's next message lives on: on HTTP/2 a
// write deadline left in place would reset the stream when it passes.
func TestGRPCIdleStream(t *testing.T) {
	t.Parallel()
	up := startGRPCUpstream(t)
	p := startGRPCProxy(t, up, "")
	watchFlows(t, dial(t, p.addr), up, 1500*time.Millisecond)
}

// TestH2CRestartOnly: [server] h2c is read when the listener starts, so a
// reload that changes it reports that it needs a restart.
func TestH2CRestartOnly(t *testing.T) {
	parse := func(h2c bool) *config.Config {
		cfg, err := config.Parse("h2c.toml", fmt.Appendf(nil, `[server]
h2c = %v
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:9000"]
protocol = "h2c"
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "10/s"
`, h2c))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	off, on := parse(false), parse(true)
	if !on.Server.H2C || off.Server.H2C || on.Upstreams[0].Protocol != config.ProtocolH2C {
		t.Fatalf("parsed h2c = %v and %v, protocol %q", off.Server.H2C, on.Server.H2C, on.Upstreams[0].Protocol)
	}
	if got := restartOnly(off, on); len(got) != 1 || got[0] != "server.h2c" {
		t.Errorf("restartOnly = %v, want [server.h2c]", got)
	}
	if got := restartOnly(on, parse(true)); len(got) != 0 {
		t.Errorf("restartOnly of the same settings = %v", got)
	}
}

// TestGRPCTLS: the same over TLS (HTTP/2 by ALPN), to an h2c upstream:
// unary calls limited with RESOURCE_EXHAUSTED, a server stream that flows.
func TestGRPCTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certPEM, keyPEM, cert := selfSigned(t, 7)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, certPEM, 0o600)
	os.WriteFile(keyFile, keyPEM, 0o600)
	up := startGRPCUpstream(t)
	p := startGRPCProxy(t, up, fmt.Sprintf("[server.tls]\nmode = \"files\"\ncert_file = %q\nkey_file = %q\n", certFile, keyFile))
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	cc := dial(t, p.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "localhost"})))
	checkLimited(t, cc)
	if n := up.calls.Load(); n != 2 {
		t.Errorf("the upstream got %d calls, want the 2 admitted", n)
	}
	watchFlows(t, cc, up, 0)
}
