package proxy

import (
	"regexp"
	"testing"
)

// A finding of the review of the rejection written whole that was not
// the front's: it held for net/http's server as for the front. (The
// review's findings in the configuration are policy/config's
// reject_review_test.go.)

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
