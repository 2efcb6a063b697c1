package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestEvictionFloodKeepsSpentKey: with max_keys = 1000, a client that has
// used its 10 requests sends 3000 requests under junk API keys, then tries
// its own key again: still 429. (The store evicted its entry, the one
// closest to fresh, and gave it 10 more.)
func TestEvictionFloodKeepsSpentKey(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	src := fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
[admin]
listen = ""
[log]
level = "error"
[store]
max_keys = 1000
[[upstream]]
name = "up"
targets = [%q]
[[policy]]
name = "api"
upstream = "up"
key = ["header:X-API-Key"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 10
  window = "1h"
`, up.URL)
	addr := startServer(t, "evict.toml", src).Proxy.String()
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(key string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/x", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 10 {
		if code := get("victim"); code != http.StatusOK {
			t.Fatalf("request %d of the limit: %d", i+1, code)
		}
	}
	if code := get("victim"); code != http.StatusTooManyRequests {
		t.Fatalf("11th request: %d, want 429", code)
	}
	for i := range 3000 {
		get(fmt.Sprintf("junk-%d", i))
	}
	if code := get("victim"); code != http.StatusTooManyRequests {
		t.Fatalf("after 3000 junk keys, the spent key got %d, want 429", code)
	}
}

// The issue-35 flood, end to end: a table of max_keys = floodMaxKeys
// entries (the issue had 1000; 500 keeps the 20× ratio and each test
// within a few seconds under -race on two cores), a victim that spends its key (a token bucket with a burst of
// 10) with 10 requests of cost 1, then 20 × floodMaxKeys junk keys, each
// spent by one request of cost 10, from floodWorkers connections at once.
// The victim's entry took 10 requests and each junk entry 1, so the junk
// goes first: the victim stays refused. The refill (10 a day) gives back
// nothing during the flood.
const (
	floodMaxKeys = 500
	floodWorkers = 4
)

// floodJunk runs fn(i) for each junk key index i < 20 × floodMaxKeys, on
// floodWorkers goroutines, and stops at the first error.
func floodJunk(t *testing.T, fn func(i int) error) {
	t.Helper()
	var (
		next     atomic.Int64
		failed   atomic.Bool
		once     sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	for range floodWorkers {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= 20*floodMaxKeys {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { firstErr = err })
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
}

// TestEvictionFloodRLS is issue 35 as reported, on the Envoy RLS face
// over real gRPC: the junk calls carry hits_addend = 10.
func TestEvictionFloodRLS(t *testing.T) {
	t.Parallel()
	src := fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
[admin]
listen = ""
[log]
level = "error"
[rls]
listen = "127.0.0.1:0"
[store]
max_keys = %d
[[policy]]
name = "users"
match = { rls_domain = "edge", descriptor = ["user"] }
key = ["descriptor:user"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "10/24h"
  burst = 10
`, floodMaxKeys)
	l := startServer(t, "evict-rls.toml", src)
	cc, err := grpc.NewClient(l.RLS.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := rlsv3.NewRateLimitServiceClient(cc)
	call := func(user string, hits uint32) (rlsv3.RateLimitResponse_Code, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits,
			Descriptors: []*rlscommon.RateLimitDescriptor{desc("user=" + user)}})
		return resp.GetOverallCode(), err
	}
	for i := range 10 {
		if code, err := call("me", 1); err != nil || code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d of the victim: %v %v", i+1, code, err)
		}
	}
	if code, err := call("me", 1); err != nil || code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("11th call of the victim: %v %v, want OVER_LIMIT", code, err)
	}
	floodJunk(t, func(i int) error {
		code, err := call("junk-"+strconv.Itoa(i), 10)
		if err == nil && code != rlsv3.RateLimitResponse_OK {
			err = fmt.Errorf("junk call %d: %v, want OK (a new key)", i, code)
		}
		return err
	})
	if code, err := call("me", 1); err != nil || code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after %d junk keys of hits_addend 10 the victim got %v %v, want OVER_LIMIT", 20*floodMaxKeys, code, err)
	}
}

// TestEvictionFloodHTTP is the same flood over the HTTP face, where the
// client chooses its cost: a cost_from limit whose estimate the client
// declares (estimate_from), and an upstream that reports no cost, so the
// estimate stands.
func TestEvictionFloodHTTP(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	src := fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
[admin]
listen = ""
[log]
level = "error"
access = false
[store]
max_keys = %d
[[upstream]]
name = "up"
targets = [%q]
[[policy]]
name = "api"
upstream = "up"
key = ["header:X-API-Key"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "10/24h"
  burst = 10
  cost_from = "header:X-Cost"
  estimate_from = "header:X-Max-Cost"
`, floodMaxKeys, up.URL)
	addr := startServer(t, "evict-http.toml", src).Proxy.String()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: floodWorkers}}
	defer client.CloseIdleConnections()
	get := func(key string, cost int) (int, error) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/x", nil)
		req.Header.Set("X-API-Key", key)
		req.Header.Set("X-Max-Cost", strconv.Itoa(cost))
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for i := range 10 {
		if code, err := get("me", 1); err != nil || code != http.StatusOK {
			t.Fatalf("request %d of the victim: %d %v", i+1, code, err)
		}
	}
	if code, err := get("me", 1); err != nil || code != http.StatusTooManyRequests {
		t.Fatalf("11th request of the victim: %d %v, want 429", code, err)
	}
	floodJunk(t, func(i int) error {
		code, err := get("junk-"+strconv.Itoa(i), 10)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("junk request %d: %d, want 200 (a new key)", i, code)
		}
		return err
	})
	if code, err := get("me", 1); err != nil || code != http.StatusTooManyRequests {
		t.Fatalf("after %d junk keys of cost 10 the victim got %d %v, want 429", 20*floodMaxKeys, code, err)
	}
}
