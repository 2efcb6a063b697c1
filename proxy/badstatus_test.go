package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/limitproxy/limitproxy/policy/config"
)

// TestMalformedStatus502 (issue 35): an upstream status outside 100–999
// is a malformed answer, whichever path forwards it: the client gets 502,
// logged and counted as any malformed answer ("upstream error" at warn,
// the access line's 502, limitproxy_upstream_duration_seconds' code
// "502"), and nothing panics. net/http's HTTP/1.1 client reads 000 to
// 099 (and "+99") as a final status, its HTTP/2 client any integer, and
// a status net/http's server cannot write made the handler panic: the
// client got no answer, the server logged a stack trace. Statuses the
// HTTP/1.1 client refuses itself (1000, -1) and one that is no number
// (2x0, the control) were 502 already. The test recovers nothing: a
// panic is the server's, seen in its error log and by the client.
func TestMalformedStatus502(t *testing.T) {
	t.Parallel()
	h1Answers := []string{
		"HTTP/1.1 000 OK\r\n\r\n",
		"HTTP/1.1 099 X\r\n\r\n",
		"HTTP/1.1 099 X\r\nContent-Length: 2\r\n\r\nok", // of known length
		"HTTP/1.1 +99 X\r\n\r\n",
		"HTTP/1.1 1000 X\r\n\r\n",
		"HTTP/1.1 -1 X\r\n\r\n",
		"HTTP/1.1 2x0 Nope\r\n\r\n", // the control: malformed as net/http reads it
	}
	h2Statuses := []string{"000", "099", "+99", "1000", "-1", "2x0"}
	streamed := func(c *config.Config) { c.Upstreams[0].Buffering = false }
	h2c := func(c *config.Config) { c.Upstreams[0].Protocol = config.ProtocolH2C }
	get := "GET /s HTTP/1.1\r\nHost: h\r\n\r\n"
	post := "POST /s HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
	paths := []struct {
		name    string
		h2c     bool
		edit    func(*config.Config)
		request string
	}{
		{"get", false, nil, get},
		{"get/unbuffered-response", false, func(c *config.Config) { c.Upstreams[0].ResponseBuffering = false }, get},
		{"buffered-body", false, nil, post},
		{"streamed-body", false, streamed, post},
		{"h2c", true, h2c, get},
		{"h2c/buffered-body", true, h2c, post},
		{"h2c/streamed-body", true, func(c *config.Config) { h2c(c); streamed(c) }, post},
	}
	for _, p := range paths {
		answers := h1Answers
		if p.h2c {
			answers = h2Statuses
		}
		for _, answer := range answers {
			first, _, _ := strings.Cut(answer, "\r\n")
			t.Run(fmt.Sprintf("%s/%q", p.name, first), func(t *testing.T) {
				t.Parallel()
				var up string
				if p.h2c {
					up, _ = startRawH2CUpstream(t, answer, "", true)
				} else {
					u := startRawUpstream(t, func(*http.Request) (string, bool) { return answer, true })
					up = u.ln.Addr().String()
				}
				checkMalformedAnswer(t, up, p.edit, p.request)
			})
		}
	}
}

// checkMalformedAnswer sends request through a proxy in front of up,
// which answers it malformed, and checks what the client, the logs and
// the metrics see.
func checkMalformedAnswer(t *testing.T, up string, edit func(*config.Config), request string) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	m := NewMetrics(prometheus.NewRegistry())
	h := forwardHandler(t, up, "rate = \"1000000/s\"\nburst = 1000000", edit)
	// As forwardHandler's, with a logger, the access log and metrics.
	h = New(h.snap.Load().set, Options{Logger: zap.New(core), AccessLog: true, Metrics: m, Now: h.now})
	addr, errLog := serveFrontLog(t, h)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, request)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Errorf("the client got no answer (%v); want 502", err)
	} else {
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("the client got %d, want 502", resp.StatusCode)
		}
	}

	lines := waitLines(t, logs, 1) // written once the handler has returned
	if s := errLog.String(); s != "" {
		t.Errorf("the server logged: %.300s", s)
	}
	if st := fmt.Sprint(lines[0]["status"]); st != "502" {
		t.Errorf("the access line's status is %s, want 502", st)
	}
	warns := logs.FilterMessage("upstream error").All()
	if len(warns) != 1 || warns[0].Level != zapcore.WarnLevel || fmt.Sprint(warns[0].ContextMap()["status"]) != "502" ||
		!strings.Contains(fmt.Sprint(warns[0].ContextMap()["error"]), "malformed") {
		t.Errorf("logged %v; want one \"upstream error\" at warn with status 502 and a malformed answer's error", warns)
	}
	if n := testutil.CollectAndCount(m.upstream); n != 1 {
		t.Errorf("limitproxy_upstream_duration_seconds has %d series, want 1 (code 502)", n)
	}
	var d dto.Metric
	if err := m.upstream.WithLabelValues("app", "502").(prometheus.Metric).Write(&d); err != nil || d.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("limitproxy_upstream_duration_seconds{code=\"502\"} counted %d (%v), want 1", d.GetHistogram().GetSampleCount(), err)
	}
}

// TestInformationalStatuses: the statuses 100–199 but 101 are
// informational on every path, as net/http's client has them: read past
// to the final answer (the sync transport skips them; ReverseProxy over
// http.Transport passes them on to the client first), whatever the
// number, and an answer of informational ones alone, cut by the close,
// is a malformed one (502). Only statuses outside 100–999 are refused
// (TestMalformedStatus502).
func TestInformationalStatuses(t *testing.T) {
	t.Parallel()
	get := "GET /i HTTP/1.1\r\nHost: h\r\n\r\n"
	post := "POST /i HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
	for _, c := range []struct {
		name, answer string
		want         int
	}{
		{"150-then-200", "HTTP/1.1 150 X\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200},
		{"199-then-404", "HTTP/1.1 199\r\nX-A: 1\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno", 404},
		{"100-103-then-999", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 999 X\r\nContent-Length: 2\r\n\r\nok", 999},
		{"150-then-close", "HTTP/1.1 150 X\r\n\r\n", 502},
	} {
		for _, p := range []struct {
			name    string
			request string
		}{{"get", get}, {"body", post}} {
			t.Run(c.name+"/"+p.name, func(t *testing.T) {
				t.Parallel()
				u := startRawUpstream(t, func(*http.Request) (string, bool) { return c.answer, true })
				h := forwardHandler(t, u.ln.Addr().String(), "rate = \"1000000/s\"\nburst = 1000000", nil)
				addr, errLog := serveFrontLog(t, h)
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				io.WriteString(conn, p.request)
				br := bufio.NewReader(conn)
				for {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatalf("the client got no answer (%v); want %d (server log: %s)", err, c.want, errLog)
					}
					if resp.StatusCode >= 100 && resp.StatusCode <= 199 {
						continue // passed on: informational as well
					}
					io.Copy(io.Discard, resp.Body)
					if resp.StatusCode != c.want {
						t.Errorf("the client got %d, want %d", resp.StatusCode, c.want)
					}
					break
				}
			})
		}
	}
}
