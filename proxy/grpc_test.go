package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

func TestIsGRPC(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/grpc":               true,
		"application/grpc+proto":         true,
		"application/grpc+raw":           true,
		"application/grpc; charset=utf8": true,
		"application/grpc-web":           false,
		"application/grpc-web+proto":     false,
		"application/json":               false,
		"":                               false,
		"application/grpcx":              false,
	} {
		r := &http.Request{ProtoMajor: 2, Header: http.Header{"Content-Type": {ct}}}
		if got := isGRPC(r); got != want {
			t.Errorf("isGRPC(%q) = %v, want %v", ct, got, want)
		}
		// gRPC is HTTP/2: over HTTP/1.1 the label makes no gRPC call.
		r.ProtoMajor = 1
		if isGRPC(r) {
			t.Errorf("isGRPC(%q) over HTTP/1.1 = true", ct)
		}
	}
}

// TestGRPCMessage: grpc-message percent-encodes every byte outside
// printable ASCII, and '%' (the gRPC HTTP/2 protocol's Percent-Encoded).
func TestGRPCMessage(t *testing.T) {
	for in, want := range map[string]string{
		"quota exceeded: policy api": "quota exceeded: policy api",
		"100% used":                  "100%25 used",
		"line\nbreak":                "line%0Abreak",
		"café":                       "caf%C3%A9",
		"":                           "",
	} {
		if got := grpcMessage(in); got != want {
			t.Errorf("grpcMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestGRPCAnswers: what limitproxy answers a gRPC call itself is a
// trailers-only gRPC response — HTTP 200, Content-Type application/grpc,
// grpc-status and grpc-message, no body — with docs/responses.md's
// mapping: a rate-limit rejection RESOURCE_EXHAUSTED (whatever the
// policy's reject status) with grpc-retry-pushback-ms and the RateLimit
// fields, the proxy's own failures the codes gRPC gives their HTTP
// statuses. The same requests without the gRPC Content-Type get the HTTP
// answers.
func TestGRPCAnswers(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(2500 * time.Millisecond) // past the upstream's timeout
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "0")
	}))
	t.Cleanup(up.Close)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String()
	dead.Close()
	src := fmt.Sprintf(`[server]
client_body_timeout = "200ms"
[[upstream]]
name = "live"
targets = [%[1]q]
max_body_bytes = 10
# Generous: a first call under the race detector on a loaded machine
# took more than 100 ms, and /slow sleeps well past it.
timeout = "1s"
[[upstream]]
name = "dead"
targets = [%[2]q]
max_fails = 0
[[policy]]
name = "limited"
upstream = "live"
key = []
match = { path = "/limited" }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/h"
  burst = 1
  [policy.reject]
  status = 503
[[policy]]
name = "dead"
upstream = "dead"
match = { path = "/dead" }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000/s"
[[policy]]
name = "live"
upstream = "live"
match = { path_prefix = "/" , methods = ["GET", "POST", "TRACE"] }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000/s"
`, up.URL, deadURL)
	cfg, err := config.Parse("grpc.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + newTestServer(t, New(set, Options{}))

	// call sends a request, a gRPC call unless ct says otherwise, and
	// returns the response with its body read.
	var h2c http.Protocols // gRPC calls are HTTP/2: h2c to the test server
	h2c.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &h2c}}
	call := func(method, path, ct string, body io.Reader) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, addr+path, body)
		req.Header.Set("Content-Type", ct)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	const grpcCT = "application/grpc+proto"

	if resp, _ := call("POST", "/limited", grpcCT, strings.NewReader("msg")); resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "0" {
		t.Fatalf("first call: %d %v, want the upstream's OK", resp.StatusCode, resp.Header)
	}
	stalled, stall := io.Pipe()
	defer stall.Close()
	for _, c := range []struct {
		name, method, path string
		body               io.Reader
		code               string // grpc-status
		msg                string // in grpc-message
	}{
		{"rejected", "POST", "/limited", strings.NewReader("msg"), "8", "quota exceeded: policy limited"},
		{"upstream down (502)", "POST", "/dead", nil, "14", "Bad Gateway"},
		{"upstream timeout (504)", "POST", "/slow", nil, "14", "Gateway Timeout"},
		{"body over max_body_bytes (413)", "POST", "/x", strings.NewReader("0123456789A"), "8", "max_body_bytes"},
		{"body stalled (408)", "POST", "/x", stalled, "4", "client_body_timeout"},
		{"no policy (404)", "PUT", "/x", nil, "12", "Not Found"},
		{"TRACE not allowed (405)", "TRACE", "/x", nil, "12", "Method Not Allowed"},
		{"malformed (400)", "post", "/x", nil, "13", "Bad Request"},
	} {
		resp, body := call(c.method, c.path, grpcCT, c.body)
		h := resp.Header
		if resp.StatusCode != 200 || h.Get("Content-Type") != "application/grpc" || body != "" ||
			h.Get("Grpc-Status") != c.code || !strings.Contains(h.Get("Grpc-Message"), c.msg) {
			t.Errorf("%s: %d %v %q, want 200 with grpc-status %s and a message with %q, no body", c.name, resp.StatusCode, h, body, c.code, c.msg)
		}
		if c.name != "rejected" {
			continue
		}
		// One token an hour: the pushback is about an hour, in ms.
		if ms, _ := strconv.Atoi(h.Get("Grpc-Retry-Pushback-Ms")); ms < 3_590_000 || ms > 3_600_000 {
			t.Errorf("grpc-retry-pushback-ms %q, want about 3600000", h.Get("Grpc-Retry-Pushback-Ms"))
		}
		if h.Get("Ratelimit") == "" || h.Get("Ratelimit-Policy") != `"limited";q=1;w=3600` {
			t.Errorf("RateLimit fields: %q, %q", h.Get("Ratelimit"), h.Get("Ratelimit-Policy"))
		}
	}

	// Not gRPC (gRPC-Web has its own framing): the HTTP answers.
	for _, c := range []struct {
		path, ct string
		status   int
	}{{"/limited", "application/grpc-web", 503}, {"/dead", "application/json", 502}} {
		if resp, body := call("POST", c.path, c.ct, nil); resp.StatusCode != c.status || resp.Header.Get("Grpc-Status") != "" ||
			!strings.Contains(body, `"status":`) {
			t.Errorf("%s as %s: %d %v %q, want %d with a problem body", c.path, c.ct, resp.StatusCode, resp.Header, body, c.status)
		}
	}
}
