// Command bareproxy is the benchmark's baseline: a bare
// httputil.ReverseProxy with the Transport limitproxy uses, and nothing
// else (no matching, no limits, no logging).
//
//	bareproxy -listen 127.0.0.1:8081 -target http://127.0.0.1:9000
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve on")
	target := flag.String("target", "http://127.0.0.1:9000", "upstream URL")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil {
		log.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.SetXForwarded()
		},
		Transport: proxy.NewTransport(config.Upstream{Timeout: 30 * time.Second}),
		ErrorLog:  log.New(io.Discard, "", 0), // wrk cancels requests as it stops
	}
	srv := &http.Server{Addr: *listen, Handler: rp, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
