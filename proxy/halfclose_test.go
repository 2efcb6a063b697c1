package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
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
