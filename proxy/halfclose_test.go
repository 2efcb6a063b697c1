package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestHalfClosedClientGetsNoAnswer: a client that sends its request and
// shuts down its side of the connection (printf … | nc -N) is a client
// gone, as net/http reports it: the upstream's request is cancelled and
// the access log says 499. It must then get no answer at all, the
// connection closed, not an empty 200 carrying the RateLimit fields.
func TestHalfClosedClientGetsNoAnswer(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		io.WriteString(w, "late")
	})
	cfg, err := config.Parse("half.toml", fmt.Appendf(nil, `[[upstream]]
name = "app"
targets = [%q]
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "100/s"
`, up.URL))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(set, Options{}))
	t.Cleanup(srv.Close)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("read: %v (got %q)", err, got)
	}
	if len(got) != 0 {
		t.Fatalf("a half-closed client got an answer:\n%s\nwant the connection closed without one", got)
	}
}

// TestHalfClosedPipelineAnswered: through the HTTP/1.1 front, a client
// that writes a request the upstream takes 150 ms over (long past the 10
// ms after which the proxy watches its client) and two pipelined ones,
// then half-closes (printf … | nc -N), has finished sending, not gone:
// the three reach the upstream once each and are answered in order, none
// canceled, under a token bucket and under a leaky bucket whose queue
// delays the second and the third.
func TestHalfClosedPipelineAnswered(t *testing.T) {
	for _, tc := range []struct{ name, limit string }{
		{"token-bucket", "algorithm = \"token_bucket\"\n  rate = \"100/s\""},
		{"leaky-bucket", "algorithm = \"leaky_bucket\"\n  rate = \"10/s\"\n  queue = 5\n  max_wait = \"5s\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var seen, canceled []string
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = append(seen, r.URL.Path)
				mu.Unlock()
				wait := time.Duration(0)
				if r.URL.Path == "/slow" {
					wait = 150 * time.Millisecond
				}
				select {
				case <-r.Context().Done():
					mu.Lock()
					canceled = append(canceled, r.URL.Path)
					mu.Unlock()
					return
				case <-time.After(wait):
				}
				io.WriteString(w, "up"+r.URL.Path)
			})
			cfg, err := config.Parse("half.toml", fmt.Appendf(nil, `[[upstream]]
name = "app"
targets = [%q]
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  %s
`, up.URL, tc.limit))
			if err != nil {
				t.Fatal(err)
			}
			set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			addr, _ := serveFrontLog(t, New(set, Options{}))
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\nGET /three HTTP/1.1\r\nHost: a\r\n\r\n")
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			for _, want := range []string{"/slow", "/two", "/three"} {
				resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
				if err != nil {
					t.Fatalf("the answer for %s: %v", want, err)
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK || string(body) != "up"+want {
					t.Fatalf("the answer for %s: %d %q", want, resp.StatusCode, body)
				}
			}
			if rest, _ := io.ReadAll(br); len(rest) != 0 {
				t.Errorf("after the three answers: %q, want the connection closed", rest)
			}
			mu.Lock()
			defer mu.Unlock()
			if strings.Join(seen, " ") != "/slow /two /three" || len(canceled) != 0 {
				t.Errorf("the upstream saw %q, canceled %q; want each once, none canceled", seen, canceled)
			}
		})
	}
}
