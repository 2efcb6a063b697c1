package proxy

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/proxy/internal/concurrency"
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
	bans      *prometheus.CounterVec   // policy
	charges   *prometheus.CounterVec   // policy, result

	// The children of each label set met so far, so that a request looks
	// its metrics up in one sync.Map read rather than hashing its label
	// values under the vector's lock (and formatting a status code). They
	// are as many as the label sets: bounded by the configuration.
	children sync.Map // childKey → prometheus.Counter, Gauge or Observer

	// The handler whose upstreams' concurrency limits are read at each
	// scrape (concurrencyCollector); nil until one is built.
	handler atomic.Pointer[Handler]
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
	mBans
	mCharges
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
			Help: "Requests by policy and decision (allowed, rejected, queued, shadow_rejected, shed, banned, shadow_banned, unmatched, invalid).",
		}, []string{"policy", "decision"}),
		queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "limitproxy_queue_depth",
			Help: "Requests waiting in a policy's queues: its leaky-bucket queues and its [policy.concurrency] queues.",
		}, []string{"policy"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "limitproxy_queue_wait_seconds",
			Help:    "Time requests waited in a policy's leaky-bucket queue or [policy.concurrency] queue.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"policy"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "limitproxy_upstream_duration_seconds",
			Help:    "Time from forwarding a request to its response's end, by upstream and status code.",
			Buckets: prometheus.DefBuckets,
		}, []string{"upstream", "code"}),
		bans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitproxy_bans_total",
			Help: "Offences that put a client key in a policy's penalty box ([policy.ban]).",
		}, []string{"policy"}),
		charges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitproxy_response_charges_total",
			Help: "Answers settled by limits that read them (count, cost_from), by result: charged, not_counted (a count that did not match), estimate (no cost reported).",
		}, []string{"policy", "result"}),
	}
	reg.MustRegister(m.requests, m.queue, m.queueWait, m.upstream, m.bans, m.charges, concurrencyCollector{m})
	return m
}

// The concurrency limits' metrics, read from each upstream's limiter when
// scraped.
var (
	descConcLimit = prometheus.NewDesc("limitproxy_upstream_concurrency_limit",
		"The requests in flight an upstream's concurrency limit allows (adaptive: as learned; a probe lowers it for a moment, see limitproxy_upstream_concurrency_probing).", []string{"upstream"}, nil)
	descProbing = prometheus.NewDesc("limitproxy_upstream_concurrency_probing",
		"1 while an adaptive concurrency limit's probe halves the limit to measure the upstream's unloaded latency, else 0.", []string{"upstream"}, nil)
	descInFlight = prometheus.NewDesc("limitproxy_upstream_in_flight",
		"Requests in flight to an upstream under a concurrency limit.", []string{"upstream"}, nil)
	descConcQueue = prometheus.NewDesc("limitproxy_upstream_queue_depth",
		"Requests waiting for a slot of an upstream's concurrency limit.", []string{"upstream"}, nil)
	descBaseline = prometheus.NewDesc("limitproxy_upstream_latency_baseline_seconds",
		"An adaptive concurrency limit's baseline: the upstream's time to response headers unloaded.", []string{"upstream"}, nil)
	descShed = prometheus.NewDesc("limitproxy_upstream_shed_total",
		"Requests an upstream's concurrency limit turned away with 503, by reason (queue_full, wait, timeout).", []string{"upstream", "reason"}, nil)
	descShadowShed = prometheus.NewDesc("limitproxy_upstream_shadow_shed_total",
		"Requests a shadow concurrency limit would have turned away, by reason.", []string{"upstream", "reason"}, nil)
	descClassInFlight = prometheus.NewDesc("limitproxy_upstream_class_in_flight",
		"Requests in flight to an upstream under a concurrency limit, by priority class (upstreams with classes only).", []string{"upstream", "class"}, nil)
	descClassQueue = prometheus.NewDesc("limitproxy_upstream_class_queue_depth",
		"Requests waiting for a slot of an upstream's concurrency limit, by priority class.", []string{"upstream", "class"}, nil)
	descClassReserved = prometheus.NewDesc("limitproxy_upstream_class_reserved",
		"Slots of an upstream's concurrency limit kept for a priority class: floor(reserve x the limit in force).", []string{"upstream", "class"}, nil)
	descClassShed = prometheus.NewDesc("limitproxy_upstream_class_shed_total",
		"Requests an upstream's concurrency limit turned away with 503, by priority class and reason.", []string{"upstream", "class", "reason"}, nil)
	descClassShadowShed = prometheus.NewDesc("limitproxy_upstream_class_shadow_shed_total",
		"Requests a shadow concurrency limit would have turned away, by priority class and reason.", []string{"upstream", "class", "reason"}, nil)
	descWaited = prometheus.NewDesc("limitproxy_upstream_queued_total",
		"Requests that waited for a slot of an upstream's concurrency limit and got one (shadow: would have waited).", []string{"upstream"}, nil)
)

// reasons are the shed reasons, in the metrics' order.
var reasons = []concurrency.Reason{concurrency.ReasonQueueFull, concurrency.ReasonWait, concurrency.ReasonTimeout}

// concurrencyCollector collects the concurrency limits' metrics.
type concurrencyCollector struct{ m *Metrics }

func (concurrencyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConcLimit, descProbing, descInFlight, descConcQueue, descBaseline, descShed, descShadowShed, descWaited,
		descClassInFlight, descClassQueue, descClassReserved, descClassShed, descClassShadowShed} {
		ch <- d
	}
}

func (c concurrencyCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.m.handler.Load()
	if h == nil {
		return
	}
	for name, p := range h.snap.Load().pools {
		if p.conc == nil {
			continue
		}
		s := p.conc.Stats()
		ch <- prometheus.MustNewConstMetric(descConcLimit, prometheus.GaugeValue, float64(s.Learned), name)
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(s.InFlight), name)
		ch <- prometheus.MustNewConstMetric(descConcQueue, prometheus.GaugeValue, float64(s.Queued), name)
		if p.conc.Params().Adaptive {
			ch <- prometheus.MustNewConstMetric(descBaseline, prometheus.GaugeValue, s.Baseline.Seconds(), name)
			probing := 0.0
			if s.Probing {
				probing = 1
			}
			ch <- prometheus.MustNewConstMetric(descProbing, prometheus.GaugeValue, probing, name)
		}
		shed, classShed := descShed, descClassShed
		if p.conc.Params().Shadow {
			shed, classShed = descShadowShed, descClassShadowShed
		}
		for _, r := range reasons {
			ch <- prometheus.MustNewConstMetric(shed, prometheus.CounterValue, float64(s.Shed[r]), name, string(r))
		}
		for _, cs := range s.Classes {
			ch <- prometheus.MustNewConstMetric(descClassInFlight, prometheus.GaugeValue, float64(cs.InFlight), name, cs.Name)
			ch <- prometheus.MustNewConstMetric(descClassQueue, prometheus.GaugeValue, float64(cs.Queued), name, cs.Name)
			ch <- prometheus.MustNewConstMetric(descClassReserved, prometheus.GaugeValue, float64(cs.Reserved), name, cs.Name)
			for _, r := range reasons {
				ch <- prometheus.MustNewConstMetric(classShed, prometheus.CounterValue, float64(cs.Shed[r]), name, cs.Name, string(r))
			}
		}
		ch <- prometheus.MustNewConstMetric(descWaited, prometheus.CounterValue, float64(s.Waited), name)
	}
}

// decision counts a request under docs/metrics.md's decisions: a request forwarded
// without limiting (on_missing = "skip", the ACME challenge path) counts as
// allowed.
func (m *Metrics) decision(policy string, d Decision) {
	if m == nil {
		return
	}
	if d == Skipped {
		d = Allowed
	}
	m.requestsCounter(policy, d).Inc()
}

// requestsCounter returns limitproxy_requests_total's child of policy
// and d.
func (m *Metrics) requestsCounter(policy string, d Decision) prometheus.Counter {
	label := d.String()
	return child(m, childKey{metric: mRequests, a: policy, b: label}, func() prometheus.Counter {
		return m.requests.WithLabelValues(policy, label)
	})
}

// declareQueues exports limitproxy_queue_depth (at 0) and
// limitproxy_queue_wait_seconds (empty) for each policy of set that can
// queue a request (a leaky bucket, a [policy.concurrency] queue), so that
// they exist before the first request queues and alerts on them have a
// series to read. A policy a reload removes keeps its series, as every
// per-policy series does.
func (m *Metrics) declareQueues(set *policy.Set) {
	if m == nil {
		return
	}
	for _, p := range set.Policies {
		if hasQueue(p) {
			m.queued(p.Name, 0)
			child(m, childKey{metric: mQueueWait, a: p.Name}, func() prometheus.Observer {
				return m.queueWait.WithLabelValues(p.Name)
			})
		}
	}
}

// hasQueue reports whether requests of p can wait in a queue.
func hasQueue(p *policy.Policy) bool {
	if p.Concurrency != nil && p.Concurrency.Queue > 0 {
		return true
	}
	for _, l := range p.Limits {
		if l.Algorithm() == limiter.LeakyBucket {
			return true
		}
	}
	return false
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

// The results of limitproxy_response_charges_total.
const (
	chargeCharged    = "charged"
	chargeNotCounted = "not_counted"
	chargeEstimate   = "estimate"
)

func (m *Metrics) responseCharge(policy, result string) {
	if m != nil {
		child(m, childKey{metric: mCharges, a: policy, b: result}, func() prometheus.Counter {
			return m.charges.WithLabelValues(policy, result)
		}).Inc()
	}
}

func (m *Metrics) banned(policy string) {
	if m != nil {
		child(m, childKey{metric: mBans, a: policy}, func() prometheus.Counter {
			return m.bans.WithLabelValues(policy)
		}).Inc()
	}
}
