package proxy

import (
	"regexp"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/policy/config"
)

// Findings of the review of the rejection written whole that are not
// the front's: each holds for net/http's server as for the front, and
// writeWhole keeps them as they are.

var bytesSent = regexp.MustCompile(`"method":"([A-Z]+)"[^\n]*"status":(\d+)[^\n]*"bytes_sent":(\d+)`)

// TestRejectHeadBytesSent: the access log's bytes_sent is "bytes of
// response body sent to the client" (docs/metrics.md), and a forwarded
// HEAD's answer logs 0; a HEAD the proxy refuses itself logs the length
// of the body it would have sent (189), which nobody sent: reject's
// Write (and writeWhole, which adds len(body) as the Write it stands
// for) counts what the server's Write returns, the whole body for HEAD.
//
// Found in review, fixed: the recorder counts no body bytes for HEAD.
func TestRejectHeadBytesSent(t *testing.T) {
	t.Parallel()
	up := startScriptUpstream(t, map[string]string{"p": "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"}).ln.Addr().String()
	for _, via := range []wholeVia{viaFront, viaNetHTTP} {
		rig := startWholeRig(t, via, up, wholeCfg, nil, nil)
		readAll(t, rig.addr, "HEAD /r/p HTTP/1.1\r\nHost: a\r\n\r\n") // forwarded
		readAll(t, rig.addr, "HEAD /r/p HTTP/1.1\r\nHost: a\r\n\r\n") // refused
		ms := bytesSent.FindAllStringSubmatch(rig.access.String(), -1)
		if len(ms) != 2 || ms[0][2] != "200" || ms[1][2] != "429" {
			t.Fatalf("%v: access log %q", via, rig.access.String())
		}
		for _, m := range ms {
			if m[3] != "0" {
				t.Errorf("%v: HEAD answered %s logged bytes_sent %s; nothing of a body is sent to HEAD", via, m[2], m[3])
			}
		}
	}
}

// TestRejectEmptyBodyContentType: [policy.reject] body = "" was taken
// as a custom body (content_type defaulting to "text/plain;
// charset=utf-8"), while rejectionBody takes "" for "the problem+json
// one": the answer was problem+json labelled text/plain, which a client
// that looks for application/problem+json (docs/responses.md) does not
// recognise.
//
// Found in review, fixed: the configuration refuses an empty body, at
// its position, and says to leave it out.
func TestRejectEmptyBodyContentType(t *testing.T) {
	_, err := config.Parse("empty.toml", []byte(`
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:1"]
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/s"
  burst = 1
  [policy.reject]
  body = ""
`))
	const want = `empty.toml:13:3: policy[0].reject.body: is empty: leave body out for the problem+json body`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("body = \"\": %v; want %s", err, want)
	}
}
