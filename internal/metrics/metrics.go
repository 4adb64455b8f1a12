// Package metrics is what an operator scrapes from a daemon at /metrics, in the Prometheus text format
// (prometheus/client_golang): the API's requests by operation and status with their latency, the
// provider's operations with their latency and errors, the store's commit latency, and, read at each
// scrape, sandboxes by state, the event log's head and retention and the warm pool.
//
// The layers it measures know nothing of Prometheus: the API, the core and the store each take a plain
// function (httpapi.Config.ObserveRequest, core.Config.ObserveProvider, sqlite.Config.ObserveCommit)
// that this package's Metrics provides, and what is read at a scrape comes through Source. A daemon
// has one Metrics, on a registry of its own (never the process-wide default one).
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandboxd/sandbox"
)

// Source is what a scrape reads from the daemon: its sandboxes, its event log and its provider.
type Source interface {
	List(ctx context.Context) ([]*sandbox.Sandbox, error)
	// EventLogBounds is the cursor the log is pruned up to (-1 when not known) and its newest.
	EventLogBounds(ctx context.Context) (pruned, last int64, err error)
	Manifest(ctx context.Context) (sandbox.Manifest, error)
}

// Metrics holds a daemon's metrics. It is safe for concurrent use.
type Metrics struct {
	reg            *prometheus.Registry
	requests       *prometheus.CounterVec
	requestSeconds *prometheus.HistogramVec
	providerOps    *prometheus.HistogramVec
	providerErrors *prometheus.CounterVec
	commitSeconds  prometheus.Histogram
	class          atomic.Pointer[string] // the provider's runtime class, a label of its operations
}

// scrapeTimeout bounds what one scrape reads from the store and the provider.
const scrapeTimeout = 5 * time.Second

// New returns a daemon's metrics, before the daemon has a runtime to read: a store and a core can be
// made with its Observe functions, and Watch then adds what a scrape reads.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sandboxd", Subsystem: "http", Name: "requests_total",
		Help: "API requests answered, by operation (method and path template) and status code.",
	}, []string{"operation", "code"})
	m.requestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "sandboxd", Subsystem: "http", Name: "request_duration_seconds",
		Help:    "Time to answer an API request (to its last byte; an event stream until it ends), by operation.",
		Buckets: latencyBuckets,
	}, []string{"operation"})
	m.providerOps = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "sandboxd", Subsystem: "provider", Name: "operation_duration_seconds",
		Help:    "Time of one provider operation (allocate, exec, release, ...), by operation and runtime class.",
		Buckets: latencyBuckets,
	}, []string{"operation", "runtime_class"})
	m.providerErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sandboxd", Subsystem: "provider", Name: "operation_errors_total",
		Help: "Provider operations that failed, by operation, runtime class and error code.",
	}, []string{"operation", "runtime_class", "code"})
	m.commitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "sandboxd", Subsystem: "store", Name: "commit_duration_seconds",
		Help:    "Time of one store write transaction's commit.",
		Buckets: latencyBuckets,
	})
	m.reg.MustRegister(m.requests, m.requestSeconds, m.providerOps, m.providerErrors, m.commitSeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// SetRuntimeClass names the runtime class that labels the provider's operations from now on. A daemon
// calls it once it has its provider, before the provider works concurrently.
func (m *Metrics) SetRuntimeClass(class string) { m.class.Store(&class) }

// Watch adds what each scrape reads: the sandboxes and event log of src and, when pool is not nil,
// its warm pool. A daemon calls it once.
func (m *Metrics) Watch(src Source, pool sandbox.PoolReporter) {
	m.reg.MustRegister(&scraped{src: src, pool: pool, class: m.runtimeClass()})
}

func (m *Metrics) runtimeClass() string {
	if c := m.class.Load(); c != nil {
		return *c
	}
	return ""
}

// latencyBuckets span a warm create's milliseconds to a cold pull's minute.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Timeout: scrapeTimeout})
}

// Registry is the registry the metrics are on, for tests and for a daemon that adds its own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveRequest records one answered API request: httpapi.Config.ObserveRequest.
func (m *Metrics) ObserveRequest(operation string, status int, d time.Duration) {
	m.requests.WithLabelValues(operation, strconv.Itoa(status)).Inc()
	m.requestSeconds.WithLabelValues(operation).Observe(d.Seconds())
}

// ObserveProvider records one provider operation: core.Config.ObserveProvider.
func (m *Metrics) ObserveProvider(operation string, d time.Duration, err error) {
	class := m.runtimeClass()
	m.providerOps.WithLabelValues(operation, class).Observe(d.Seconds())
	if err != nil {
		m.providerErrors.WithLabelValues(operation, class, string(sandbox.ClassOf(err).Code)).Inc()
	}
}

// ObserveCommit records one store commit: sqlite.Config.ObserveCommit.
func (m *Metrics) ObserveCommit(d time.Duration) { m.commitSeconds.Observe(d.Seconds()) }

// scraped are the metrics read at each scrape.
type scraped struct {
	src   Source
	pool  sandbox.PoolReporter
	class string
}

var (
	descSandboxes = prometheus.NewDesc("sandboxd_sandboxes", "Sandboxes by state, provider and runtime class.",
		[]string{"state", "provider", "runtime_class"}, nil)
	descEventHead     = prometheus.NewDesc("sandboxd_event_log_head_cursor", "The cursor of the newest event.", nil, nil)
	descEventRetained = prometheus.NewDesc("sandboxd_event_log_retained_events", "Events the log retains.", nil, nil)
	descEventPruned   = prometheus.NewDesc("sandboxd_event_log_pruned_cursor",
		"The cursor up to which the log is pruned: a client behind it gets 410 event_history_unavailable.", nil, nil)
	descPoolIdle   = prometheus.NewDesc("sandboxd_warm_pool_idle", "Started containers waiting in the warm pool.", []string{"runtime_class"}, nil)
	descPoolTarget = prometheus.NewDesc("sandboxd_warm_pool_target", "How many the warm pool keeps started.", []string{"runtime_class"}, nil)
	descPoolHits   = prometheus.NewDesc("sandboxd_warm_pool_hits_total", "Creates that took a warm pool entry.", []string{"runtime_class"}, nil)
	descPoolMisses = prometheus.NewDesc("sandboxd_warm_pool_misses_total",
		"Creates the warm pool could have served that found it empty.", []string{"runtime_class"}, nil)
	descScrapeErr = prometheus.NewDesc("sandboxd_scrape_errors", "Parts of this scrape that could not be read (1 each).", []string{"part"}, nil)
)

func (c *scraped) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSandboxes, descEventHead, descEventRetained, descEventPruned, descPoolIdle, descPoolTarget, descPoolHits, descPoolMisses, descScrapeErr} {
		ch <- d
	}
}

func (c *scraped) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	failed := func(part string) {
		ch <- prometheus.MustNewConstMetric(descScrapeErr, prometheus.GaugeValue, 1, part)
	}
	if list, err := c.src.List(ctx); err != nil {
		failed("sandboxes")
	} else {
		type key struct{ state, provider string }
		counts := map[key]int{}
		for _, st := range sandbox.States {
			counts[key{string(st), ""}] = 0
		}
		for _, sb := range list {
			counts[key{string(sb.State), sb.Provider}]++
		}
		provider := ""
		if m, err := c.src.Manifest(ctx); err == nil {
			provider = m.Name
		}
		for k, n := range counts {
			if k.provider == "" {
				if counts[key{k.state, provider}] != 0 {
					continue
				}
				k.provider = provider // every state is reported, zero included
			}
			ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, float64(n), k.state, k.provider, c.class)
		}
	}
	if pruned, head, err := c.src.EventLogBounds(ctx); err != nil {
		failed("event_log")
	} else {
		ch <- prometheus.MustNewConstMetric(descEventHead, prometheus.GaugeValue, float64(head))
		if pruned >= 0 {
			ch <- prometheus.MustNewConstMetric(descEventRetained, prometheus.GaugeValue, float64(head-pruned))
			ch <- prometheus.MustNewConstMetric(descEventPruned, prometheus.GaugeValue, float64(pruned))
		}
	}
	if c.pool != nil {
		s := c.pool.PoolStats()
		ch <- prometheus.MustNewConstMetric(descPoolIdle, prometheus.GaugeValue, float64(s.Idle), c.class)
		ch <- prometheus.MustNewConstMetric(descPoolTarget, prometheus.GaugeValue, float64(s.Target), c.class)
		ch <- prometheus.MustNewConstMetric(descPoolHits, prometheus.CounterValue, float64(s.Hits), c.class)
		ch <- prometheus.MustNewConstMetric(descPoolMisses, prometheus.CounterValue, float64(s.Misses), c.class)
	}
}
