package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

const queuesConfig = `
[[upstream]]
name = "up"
targets = ["http://127.0.0.1:1"]

[[policy]]
name = "leaky"
upstream = "up"
match = { path_prefix = "/l" }
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "1/s"
  queue = 5

[[policy]]
name = "slots"
upstream = "up"
match = { path_prefix = "/s" }
  [policy.concurrency]
  limit = 1
  queue = 3

[[policy]]
name = "plain"
upstream = "up"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/s"
`

// TestQueueMetricsBeforeTraffic: limitproxy_queue_depth and
// limitproxy_queue_wait_seconds exist, at zero, from the start for every
// policy that can queue (a leaky bucket, a [policy.concurrency] queue),
// for none other; a reload adds those of a new policy.
func TestQueueMetricsBeforeTraffic(t *testing.T) {
	compile := func(src string) *policy.Set {
		cfg, err := config.Parse("q.toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	h := New(compile(queuesConfig), Options{Metrics: m})
	want := `
# HELP limitproxy_queue_depth Requests waiting in a policy's queues: its leaky-bucket queues and its [policy.concurrency] queues.
# TYPE limitproxy_queue_depth gauge
limitproxy_queue_depth{policy="leaky"} 0
limitproxy_queue_depth{policy="slots"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "limitproxy_queue_depth"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "limitproxy_queue_wait_seconds"); err != nil || n != 2 {
		t.Errorf("limitproxy_queue_wait_seconds: %d series (%v), want 2", n, err)
	}
	h.Swap(compile(strings.Replace(queuesConfig, "[[policy]]\nname = \"plain\"", `
[[policy]]
name = "later"
upstream = "up"
match = { path_prefix = "/later" }
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "1/s"

[[policy]]
name = "plain"`, 1)))
	if n, _ := testutil.GatherAndCount(reg, "limitproxy_queue_depth"); n != 3 {
		t.Errorf("after a reload that adds a leaky bucket: %d limitproxy_queue_depth series, want 3", n)
	}
}
