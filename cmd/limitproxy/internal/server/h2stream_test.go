package server

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestH2StreamIdle: an event stream over HTTP/2 (h2c) whose upstream is
// quiet for longer than send_timeout between two events is not cut —
// over HTTP/2 a write deadline passing resets the stream even with no
// write pending, so the proxy lifts it after each flush.
func TestH2StreamIdle(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 2 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(500 * time.Millisecond) // quiet past send_timeout on a real connection: the time is the test
		}
	}))
	defer up.Close()
	l := startServer(t, "sse.toml", fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
h2c = true
send_timeout = "300ms"
[admin]
listen = ""
[log]
level = "error"
access = false
[[upstream]]
name = "up"
targets = [%q]
[[policy]]
name = "all"
upstream = "up"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "10/s"
`, up.URL))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + l.Proxy.String() + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("spoke %s, want HTTP/2", resp.Proto)
	}
	body, err := io.ReadAll(bufio.NewReader(resp.Body))
	if err != nil || strings.Count(string(body), "data:") != 2 {
		t.Fatalf("events %q, %v: want both, the stream not cut after send_timeout", body, err)
	}
}
