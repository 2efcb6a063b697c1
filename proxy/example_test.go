package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// Embed limitproxy in your own server: parse a configuration, compile it
// against a store, and serve the handler (here behind httptest servers;
// in production, http.ListenAndServe(":8080", h)). The third request
// within the minute is answered 429 without reaching the upstream.
func Example() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	defer upstream.Close()

	cfg, err := config.Parse("limits.toml", []byte(`
		[[upstream]]
		name = "app"
		targets = ["`+upstream.URL+`"]
		[[policy]]
		name = "api"
		upstream = "app"
		  [[policy.limits]]
		  algorithm = "fixed_window"
		  limit = 2
		  window = "1m"
	`))
	if err != nil {
		panic(err) // every error, at file:line:col
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		panic(err)
	}
	h := proxy.New(set, proxy.Options{})
	srv := httptest.NewServer(h)
	defer srv.Close()

	for range 3 {
		resp, err := http.Get(srv.URL + "/items")
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			body = nil // a problem+json from the proxy
		}
		fmt.Printf("%d %s\n", resp.StatusCode, body)
	}
	// Output:
	// 200 hello
	// 200 hello
	// 429
}
