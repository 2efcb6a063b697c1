package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

const burstBanConfig = `
[[upstream]]
name = "app"
targets = [%q]
[[policy]]
name = "api"
upstream = "app"
key = ["header:X-Key"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "5/s"
  burst = 5
  [policy.ban]
  duration = "30s"
  escalation = 2
  max_duration = "1h"
`

// TestBanBurstOneLevel, over loopback on both stores (on Redis, two
// instances sharing it, the burst split between them): 20 requests of a
// fresh key at once against 5/s burst 5 with a 30 s ban escalating ×2.
// The 5 in the burst are forwarded, the 15 others are refused with a
// Retry-After of the first ban, 30 s, and the key ends at level 1:
// the rejections of one burst, decided before the first ban was seen, are
// one offence's worth, not fifteen escalations (which reached a one-hour
// ban on Redis); and limitproxy_bans_total counts that one ban, not the
// offences made while it ran.
func TestBanBurstOneLevel(t *testing.T) {
	for _, kind := range rlStores {
		t.Run(kind, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			t.Cleanup(srv.Close)
			b := newRLBackend(t, kind, time.Now)
			envs := []*rlEnv{newRLEnv(t, burstBanConfig, srv.URL, b, time.Now)}
			if kind == "redis" {
				envs = append(envs, newRLEnv(t, burstBanConfig, srv.URL, newRedisBackend(t, b.addr, time.Now), time.Now))
			}
			const n = 20
			codes := make([]int, n)
			retry := make([]int, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-start
					code, h := send(t, "GET", envs[i%len(envs)].addr+"/x", "X-Key", "fresh")
					codes[i] = code
					retry[i], _ = strconv.Atoi(h.Get("Retry-After"))
				})
			}
			close(start)
			wg.Wait()
			admitted, longest := 0, 0
			for i := range n {
				if codes[i] == 200 {
					admitted++
				}
				longest = max(longest, retry[i])
			}
			t.Logf("statuses %v, Retry-After %v", codes, retry)
			if admitted != 5 {
				t.Errorf("%d of %d admitted, want the burst's 5", admitted, n)
			}
			// 31: a request refused by the ban that another, a moment
			// later, began (the instants of concurrent requests cross).
			if longest > 31 {
				t.Errorf("a Retry-After of %d s after one burst: want the first ban's 30 s (31 rounding up)", longest)
			}
			var bans float64
			for _, e := range envs {
				bans += testutil.ToFloat64(e.m.bans.WithLabelValues("api"))
			}
			if bans != 1 {
				t.Errorf("limitproxy_bans_total %v after one burst (%d rejections), want 1 ban", bans, n-admitted)
			}
			list, err := b.bans.List(context.Background(), "api", time.Now(), 10)
			if err != nil || len(list) != 1 || list[0].Level != 1 {
				t.Fatalf("bans after one burst: %+v, %v; want one at level 1", list, err)
			}
		})
	}
}
