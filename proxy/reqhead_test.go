package proxy

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// headOf returns what writeHead writes for req, or its error.
func headOf(req *http.Request) (string, error) {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	_, err := writeHead(w, req, nil)
	w.Flush()
	return b.String(), err
}

// wantHead returns what (*http.Request).Write writes for req.
func wantHead(req *http.Request) (string, error) {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	err := req.Write(w)
	w.Flush()
	return b.String(), err
}

// checkHead fails t unless writeHead and Request.Write agree on req: the
// same bytes, or both an error.
func checkHead(t *testing.T, req *http.Request) {
	t.Helper()
	got, gerr := headOf(req)
	want, werr := wantHead(req)
	if (gerr != nil) != (werr != nil) || (gerr == nil && got != want) {
		t.Fatalf("%s %q host %q header %q close %v:\nwriteHead     %q (%v)\nRequest.Write %q (%v)",
			req.Method, req.URL.String(), req.Host, req.Header, req.Close, got, gerr, want, werr)
	}
}

func TestWriteHead(t *testing.T) {
	for _, c := range []struct {
		method, url, host string
		header            http.Header
		close             bool
	}{
		{"GET", "http://127.0.0.1:9000/api/x?y=1", "", http.Header{"User-Agent": {""}, "Accept": {"*/*"}}, false},
		{"", "http://a/", "", nil, false}, // no method: GET; no User-Agent key: Go's default
		{"HEAD", "http://a", "b.example:81", http.Header{"X-B": {"2", " spaced \t"}, "X-A": {"1"}}, false},
		{"DELETE", "http://a/x", "", http.Header{"Connection": {"keep-alive"}}, true},
		{"OPTIONS", "http://a/*", "", http.Header{"Connection": {"Close"}}, true},
		{"POST", "http://a/p", "", http.Header{"Content-Length": {"5"}, "Transfer-Encoding": {"chunked"}, "Trailer": {"X"}, "Host": {"h"}}, false},
		{"PROPFIND", "http://a/p?", "", nil, false},
		{"GET", "http://[fe80::1%25eth0]:8080/z", "", nil, false},
		{"GET", "http://a/%2F%20x;p?q=%zz&;", "", nil, false},
		{"GET", "http://a/x", "bücher.example", nil, false},
		{"GET", "http://a/x", "bad host/with space", nil, false},
		{"GET", "http://a/x", "", http.Header{"X-Nl": {"a\r\nb", "\r\nc\n"}, "Bad Name": {"v"}, "User-Agent": {" ua\nx "}}, false},
		{"GET", "http://a/x", "", http.Header{"Empty": {}, "E2": {""}}, false},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		checkHead(t, &http.Request{Method: c.method, URL: u, Host: c.host, Header: c.header, Close: c.close})
	}
	// A control character in the URL fails both.
	checkHead(t, &http.Request{Method: "GET", URL: &url.URL{Scheme: "http", Host: "a", Path: "/x", RawQuery: "a\x01"}, Header: http.Header{}})
	checkHead(t, &http.Request{Method: "GET", URL: &url.URL{Scheme: "http", Host: "a", Opaque: "//o/p\x7f"}, Header: http.Header{}})
	checkHead(t, &http.Request{Method: "GET", URL: &url.URL{Scheme: "http", Host: "a", Opaque: "/o/p", RawQuery: "k=v"}, Header: http.Header{}})
	checkHead(t, &http.Request{Method: "GET", URL: &url.URL{Scheme: "http", Host: "a", Path: "/é x", ForceQuery: true}, Header: http.Header{}})
}

// TestWriteHeadRandom compares the two writers on random requests built
// from pieces that exercise each rule.
func TestWriteHeadRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 15))
	pick := func(s ...string) string { return s[r.IntN(len(s))] }
	for range 20000 {
		u := &url.URL{Scheme: "http", Host: pick("a", "a:80", "[::1]:9", "[fe80::1%eth0]:1", "xn--bcher-kva.example", "bücher.example", "h h")}
		u.Path = pick("", "/", "/a b", "/a%2Fb", "/%zz", "/é", "/x\x01", "/;p")
		if r.IntN(3) == 0 {
			u.RawPath = pick("/a%2Fb", "/a b", "/%41")
		}
		u.RawQuery = pick("", "a=1", "a=%zz;b", "\x7f", "x y")
		u.ForceQuery = r.IntN(4) == 0
		if r.IntN(20) == 0 {
			u.Opaque = pick("//o/p", "/o", "x")
		}
		h := http.Header{}
		for range r.IntN(6) {
			k := pick("Accept", "X-A", "x-lower", "Bad Name", "Host", "User-Agent", "Content-Length", "Transfer-Encoding",
				"Trailer", "Connection", "Te", "X-Forwarded-For", "Ä")
			for range r.IntN(3) {
				h[k] = append(h[k], pick("", "v", " v ", "a\r\nb", "\tt\t", "close", "keep-alive, close", "ü"))
			}
			if r.IntN(5) == 0 {
				h[k] = []string{}
			}
		}
		req := &http.Request{Method: pick("", "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "X-CUSTOM"),
			URL: u, Host: pick("", "", "h.example", "h h", "[fe80::1%25eth0]:8", "ünï.example"), Header: h, Close: r.IntN(3) == 0}
		checkHead(t, req)
		if t.Failed() {
			return
		}
	}
}

// FuzzWriteHead holds writeHead to Request.Write on fuzzed methods, URLs,
// hosts and header lines.
func FuzzWriteHead(f *testing.F) {
	f.Add("GET", "/a?b", "h", "X-A: 1\nUser-Agent: \n", false)
	f.Add("DELETE", "/%2F", "", "Connection: close\nX-B:  x \n", true)
	f.Add("", "//o", "[::1%z]:1", "Bad Name: v\n", false)
	f.Fuzz(func(t *testing.T, method, target, host, lines string, close bool) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return
		}
		u.Scheme, u.Host = "http", "upstream:80"
		h := http.Header{}
		for line := range strings.SplitSeq(lines, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				h[k] = append(h[k], v)
			}
		}
		checkHead(t, &http.Request{Method: method, URL: u, Host: host, Header: h, Close: close})
	})
}
