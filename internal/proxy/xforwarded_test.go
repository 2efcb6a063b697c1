package proxy

import (
	"crypto/tls"
	"net/http"
	"net/http/httputil"
	"reflect"
	"testing"
)

// TestSetXForwarded holds setXForwarded to httputil's SetXForwarded: the
// same header for peers with and without a port, with and without a
// chain kept, over TLS and not.
func TestSetXForwarded(t *testing.T) {
	for _, remote := range []string{"203.0.113.7:4000", "[2001:db8::1]:4000", "203.0.113.7", ""} {
		for _, prior := range [][]string{nil, {"198.51.100.1"}, {"198.51.100.1, 10.0.0.1", "10.0.0.2"}} {
			for _, tlsOn := range []bool{false, true} {
				in := &http.Request{RemoteAddr: remote, Host: "api.example:8080", Header: http.Header{}}
				if tlsOn {
					in.TLS = &tls.ConnectionState{}
				}
				out := func() *http.Request {
					h := http.Header{"Accept": {"*/*"}}
					if prior != nil {
						h["X-Forwarded-For"] = prior
					}
					return &http.Request{Header: h}
				}
				want := &httputil.ProxyRequest{In: in, Out: out()}
				want.SetXForwarded()
				got := &httputil.ProxyRequest{In: in, Out: out()}
				setXForwarded(got)
				if !reflect.DeepEqual(got.Out.Header, want.Out.Header) {
					t.Errorf("remote %q prior %q tls %v: %v, SetXForwarded %v", remote, prior, tlsOn, got.Out.Header, want.Out.Header)
				}
			}
		}
	}
}
