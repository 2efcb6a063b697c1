package server

import (
	"cmp"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/rlqs"
	"github.com/limitproxy/limitproxy/proxy"
)

// metrics are the process's registries: docs/metrics.md's metrics (the
// data path's from proxy.Metrics, in a registry of their own; the store's
// and the reloads' read from their sources at each scrape), Go runtime
// and process metrics, and a counter of refused admin requests; and the
// dashboard's history of the data path's.
type metrics struct {
	reg          *prometheus.Registry
	data         *prometheus.Registry // proxy's: what history samples, without reading /proc
	proxy        *proxy.Metrics
	unauthorized prometheus.Counter
	history      *history
}

// gatherer is every metric, as GET /metrics serves them.
func (m *metrics) gatherer() prometheus.Gatherer { return prometheus.Gatherers{m.reg, m.data} }

func newMetrics(st *stores, reload func() *reloadStatus, backend string, access *accessWriter, version string) *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "limitproxy_build_info",
		Help:        "1, labelled with the version, the Go version and the source revision the binary was built from.",
		ConstLabels: prometheus.Labels{"version": cmp.Or(version, "dev"), "goversion": runtime.Version(), "revision": revision()},
	}, func() float64 { return 1 }))
	data := prometheus.NewRegistry()
	m := &metrics{reg: reg, data: data, proxy: proxy.NewMetrics(data), history: newHistory(data)}
	m.unauthorized = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "limitproxy_admin_unauthorized_total",
		Help: "Admin API requests refused for a missing or wrong bearer token.",
	})
	labels := prometheus.Labels{"backend": backend}
	reg.MustRegister(m.unauthorized,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitproxy_access_log_dropped_total",
			Help: "Access-log lines dropped because stderr did not take them fast enough (4 MiB were waiting)."},
			func() float64 { return float64(access.Dropped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitproxy_store_errors_total", ConstLabels: labels,
			Help: "Decisions the store failed to make in time (they followed on_error)."}, func() float64 {
			if st.redis == nil {
				return 0
			}
			return float64(st.redis.Errors())
		}),
		newLeasesCollector(st),
		&degradedCollector{st: st, desc: prometheus.NewDesc("limitproxy_store_degraded",
			"1 while a Redis node's circuit breaker is open: decisions on the keys it holds follow on_error; 0 while it decides.",
			[]string{"node"}, labels)},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "limitproxy_store_keys", ConstLabels: labels,
			Help: "Client keys tracked in memory (the memory store, or Redis's on_error fallback)."}, func() float64 {
			return float64(st.memory.Len())
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitproxy_store_evictions_total", ConstLabels: labels,
			Help: "Keys dropped before their state was fresh, to stay within max_keys."}, func() float64 {
			return float64(st.memory.Evictions())
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitproxy_store_spent_evictions_total", ConstLabels: labels,
			Help: "Of the evictions, keys that had used up their limit: each gave a client its whole limit back."}, func() float64 {
			return float64(st.memory.SpentEvictions())
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitproxy_config_reloads_total", ConstLabels: prometheus.Labels{"result": "success"},
			Help: "Configuration reloads, by result."}, func() float64 { return float64(reload().Successes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitproxy_config_reloads_total", ConstLabels: prometheus.Labels{"result": "failure"},
			Help: "Configuration reloads, by result."}, func() float64 { return float64(reload().Failures) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "limitproxy_config_last_reload_successful",
			Help: "1 if the last reload attempt succeeded (or none was made), else 0."}, func() float64 {
			if reload().LastError != nil {
				return 0
			}
			return 1
		}),
	)
	return m
}

// leasesCollector reports the global tier's metrics (limitproxy_leases_*),
// none with the memory store.
type leasesCollector struct {
	st                                  *stores
	decisions, calls, units, held, keys *prometheus.Desc
	overshoot, bound                    *prometheus.Desc
}

func newLeasesCollector(st *stores) *leasesCollector {
	return &leasesCollector{st: st,
		decisions: prometheus.NewDesc("limitproxy_leases_decisions_total",
			"Decisions of limits with accuracy \"bounded\", by where they were made: local (from a lease, or a local refusal) or redis.", []string{"where"}, nil),
		calls: prometheus.NewDesc("limitproxy_leases_calls_total",
			"Lease requests sent to Redis, by result: granted, refused (nothing left), error (Redis failed or answered degraded).", []string{"result"}, nil),
		units: prometheus.NewDesc("limitproxy_leases_units_total",
			"Units (requests of weight 1) of the leases Redis granted.", nil, nil),
		held: prometheus.NewDesc("limitproxy_leases_held_units",
			"Units of the leases this instance holds unused, all keys together, in the limits' units.", nil, nil),
		keys: prometheus.NewDesc("limitproxy_leases_held_keys",
			"Keys this instance holds a lease of.", nil, nil),
		overshoot: prometheus.NewDesc("limitproxy_leases_overshoot_ratio",
			"The largest share of its quota one key holds in leases on this instance: summed over the instances, what a key could be admitted beyond an exact decision now.", nil, nil),
		bound: prometheus.NewDesc("limitproxy_leases_bound_ratio",
			"This instance's part of the documented bound, 1.5 × max_share: summed over the instances, N × 1.5 × max_share.", nil, nil),
	}
}

func (c *leasesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.decisions, c.calls, c.units, c.held, c.keys, c.overshoot, c.bound} {
		ch <- d
	}
}

func (c *leasesCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.st.leases
	if l == nil {
		return
	}
	s := l.Stats()
	h := l.Holding(c.st.clock())
	ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(s.Local), "local")
	ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(s.Shared), "redis")
	ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(s.LeasesGranted), "granted")
	ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(s.LeaseCalls-s.LeasesGranted-s.LeaseErrors), "refused")
	ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(s.LeaseErrors), "error")
	ch <- prometheus.MustNewConstMetric(c.units, prometheus.CounterValue, float64(s.LeasedUnits))
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(h.Units))
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(h.Keys))
	ch <- prometheus.MustNewConstMetric(c.overshoot, prometheus.GaugeValue, h.MaxRatio)
	ch <- prometheus.MustNewConstMetric(c.bound, prometheus.GaugeValue, 1.5*l.MaxShare())
}

// rlqsCollector reports Envoy's rate limit quota service's metrics
// (limitproxy_rlqs_*), none while it is off.
type rlqsCollector struct {
	svc                                  func() *rlqs.Service
	streams, streamsTotal, refused       *prometheus.Desc
	reports, buckets, assignments, units *prometheus.Desc
}

func newRLQSCollector(svc func() *rlqs.Service) *rlqsCollector {
	return &rlqsCollector{svc: svc,
		streams:      prometheus.NewDesc("limitproxy_rlqs_streams", "Envoy streams open on the rate limit quota service.", nil, nil),
		streamsTotal: prometheus.NewDesc("limitproxy_rlqs_streams_total", "Envoy streams opened on the rate limit quota service.", nil, nil),
		refused:      prometheus.NewDesc("limitproxy_rlqs_streams_refused_total", "Streams refused (RESOURCE_EXHAUSTED) past rlqs.max_streams.", nil, nil),
		reports:      prometheus.NewDesc("limitproxy_rlqs_reports_total", "Usage reports received from Envoys.", nil, nil),
		buckets:      prometheus.NewDesc("limitproxy_rlqs_bucket_reports_total", "Bucket usages the reports carried.", nil, nil),
		assignments: prometheus.NewDesc("limitproxy_rlqs_assignments_total",
			"Bucket assignments answered, by kind: token_bucket (a lease), deny_all (nothing left), allow_all_unmatched, allow_all_unlimited, deny_all_unsupported (a leaky bucket), error (no action: the store could not lease).", []string{"kind"}, nil),
		units: prometheus.NewDesc("limitproxy_rlqs_leased_units_total", "Units (requests of weight 1) of the token buckets assigned, each leased from the store first.", nil, nil),
	}
}

func (c *rlqsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.streams, c.streamsTotal, c.refused, c.reports, c.buckets, c.assignments, c.units} {
		ch <- d
	}
}

func (c *rlqsCollector) Collect(ch chan<- prometheus.Metric) {
	svc := c.svc()
	if svc == nil {
		return
	}
	s := svc.Stats()
	ch <- prometheus.MustNewConstMetric(c.streams, prometheus.GaugeValue, float64(s.Streams))
	ch <- prometheus.MustNewConstMetric(c.streamsTotal, prometheus.CounterValue, float64(s.StreamsTotal))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.Refused))
	ch <- prometheus.MustNewConstMetric(c.reports, prometheus.CounterValue, float64(s.Reports))
	ch <- prometheus.MustNewConstMetric(c.buckets, prometheus.CounterValue, float64(s.Buckets))
	for k, n := range s.Assignments {
		ch <- prometheus.MustNewConstMetric(c.assignments, prometheus.CounterValue, float64(n), rlqs.Kind(k).String())
	}
	ch <- prometheus.MustNewConstMetric(c.units, prometheus.CounterValue, float64(s.LeasedUnits))
}

// degradedCollector reports limitproxy_store_degraded, one series per
// Redis node the decisions used within the last 10s (on Cluster one per
// master; a master replaced in a failover drops out), none with the
// memory store.
type degradedCollector struct {
	st   *stores
	desc *prometheus.Desc
}

func (c *degradedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *degradedCollector) Collect(ch chan<- prometheus.Metric) {
	if c.st.redis == nil {
		return
	}
	for _, n := range c.st.redis.Nodes() {
		v := 0.0
		if n.Open {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, n.Node)
	}
}

// revision is the source revision the binary was built from (the build
// info's vcs.revision), or "unknown".
func revision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}
