package proxy

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the data path's metrics of docs/metrics.md. Labels are policy and
// upstream names, decisions and status codes: never a client key, so their
// number is bounded by the configuration. Safe for concurrent use; a nil
// *Metrics records nothing.
type Metrics struct {
	requests  *prometheus.CounterVec   // policy, decision
	queue     *prometheus.GaugeVec     // policy
	queueWait *prometheus.HistogramVec // policy
	upstream  *prometheus.HistogramVec // upstream, code

	// The children of each label set met so far, so that a request looks
	// its metrics up in one sync.Map read rather than hashing its label
	// values under the vector's lock (and formatting a status code). They
	// are as many as the label sets: bounded by the configuration.
	children sync.Map // childKey → prometheus.Counter, Gauge or Observer
}

// childKey names one child: the metric, and its label values.
type childKey struct {
	metric uint8
	a, b   string
	code   int
}

// The metrics of childKey.metric.
const (
	mRequests uint8 = iota
	mQueue
	mQueueWait
	mUpstream
)

// child returns the child of k, creating it with newChild the first time.
func child[T any](m *Metrics, k childKey, newChild func() T) T {
	if c, ok := m.children.Load(k); ok {
		return c.(T)
	}
	c, _ := m.children.LoadOrStore(k, newChild())
	return c.(T)
}

// NewMetrics registers the data path's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitproxy_requests_total",
			Help: "Requests by policy and decision (allowed, rejected, queued, shadow_rejected, unmatched, invalid).",
		}, []string{"policy", "decision"}),
		queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "limitproxy_queue_depth",
			Help: "Requests waiting in a policy's leaky-bucket queues.",
		}, []string{"policy"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "limitproxy_queue_wait_seconds",
			Help:    "Time requests waited in a leaky-bucket queue.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"policy"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "limitproxy_upstream_duration_seconds",
			Help:    "Time from forwarding a request to its response's end, by upstream and status code.",
			Buckets: prometheus.DefBuckets,
		}, []string{"upstream", "code"}),
	}
	reg.MustRegister(m.requests, m.queue, m.queueWait, m.upstream)
	return m
}

// decision counts a request under docs/metrics.md's decisions: a request forwarded
// without limiting (on_missing = "skip", the ACME challenge path) counts as
// allowed.
func (m *Metrics) decision(policy, d string) {
	if m == nil {
		return
	}
	switch d {
	case Skipped:
		d = Allowed
	}
	child(m, childKey{metric: mRequests, a: policy, b: d}, func() prometheus.Counter {
		return m.requests.WithLabelValues(policy, d)
	}).Inc()
}

func (m *Metrics) queued(policy string, delta float64) {
	if m != nil {
		child(m, childKey{metric: mQueue, a: policy}, func() prometheus.Gauge {
			return m.queue.WithLabelValues(policy)
		}).Add(delta)
	}
}

func (m *Metrics) waited(policy string, d time.Duration) {
	if m != nil {
		child(m, childKey{metric: mQueueWait, a: policy}, func() prometheus.Observer {
			return m.queueWait.WithLabelValues(policy)
		}).Observe(d.Seconds())
	}
}

func (m *Metrics) forwarded(upstream string, code int, d time.Duration) {
	if m != nil {
		child(m, childKey{metric: mUpstream, a: upstream, code: code}, func() prometheus.Observer {
			return m.upstream.WithLabelValues(upstream, strconv.Itoa(code))
		}).Observe(d.Seconds())
	}
}
