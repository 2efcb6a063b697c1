// Command bare429 is the floor of the 429 path: a bare net/http server
// that answers every request with one fixed 429 carrying the header
// fields limitproxy's rejection carries (Retry-After, RateLimit,
// RateLimit-Policy, Content-Type, Content-Length, Cache-Control and an
// X-Request-Id of the same length) and a body of the same size, and does
// nothing else: no matching, no client key, no limiter, no log, no
// metrics. The header map's values are assigned from slices built once
// (net/http only reads them), the cheapest a net/http handler can set
// them. What limitproxy spends above this server is its own.
//
//	bare429 -listen 127.0.0.1:8081
package main

import (
	"flag"
	"log"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// body is the size of limitproxy's problem+json for a policy named
// "bench" (191 bytes with its newline).
var body = []byte(`{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"violated-policies":["bench"]}` + "\n")

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve on")
	flag.Parse()
	fields := []struct {
		name  string
		value []string
	}{
		{"Retry-After", []string{"1"}},
		{"Ratelimit", []string{`"bench";r=0;t=1`}},
		{"Ratelimit-Policy", []string{`"bench";q=1000;w=1`}},
		{"Content-Type", []string{"application/problem+json"}},
		{"Content-Length", []string{strconv.Itoa(len(body))}},
		{"Cache-Control", []string{"no-store"}},
		{"X-Request-Id", []string{strings.Repeat("0", 32)}},
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		for _, f := range fields {
			hd[f.name] = f.value
		}
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write(body)
	})
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
