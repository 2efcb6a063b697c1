package server

import (
	"cmp"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

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
