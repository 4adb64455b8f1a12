// Package metrics is what an operator scrapes from a daemon at /metrics, in the Prometheus text
// exposition format: the API's requests by operation and status with their latency, the provider's
// operations with their latency and errors, the store's commit latency, and, read at each scrape,
// sandboxes by state, the event log's head and retention, the warm pool, and the process's own
// figures (goroutines, heap, resident memory, open files, CPU time).
//
// The layers it measures know nothing of it: the API, the core and the store each take a plain
// function (httpapi.Config.ObserveRequest, core.Config.ObserveProvider, sqlite.Config.ObserveCommit)
// that Metrics provides, and what is read at a scrape comes through Source. The registry and the text
// format are this package's own (registry.go; docs/design/metrics.md says why).
package metrics

import (
	"context"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

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
	reg            registry
	requests       *family
	requestSeconds *family
	providerOps    *family
	providerErrors *family
	commitSeconds  *family
	class          atomic.Pointer[string] // the provider's runtime class, a label of its operations
	started        time.Time
}

// scrapeTimeout bounds what one scrape reads from the store and the provider.
const scrapeTimeout = 5 * time.Second

// latencyBuckets span a warm create's milliseconds to a cold pull's minute.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// New returns a daemon's metrics, before the daemon has a runtime to read: a store and a core can be
// made with its Observe functions, and Watch then adds what a scrape reads.
func New() *Metrics {
	m := &Metrics{started: time.Now()}
	m.requests = m.reg.add(newFamily("sandboxd_http_requests_total",
		"API requests answered, by operation (method and path template) and status code.",
		"counter", []string{"operation", "code"}, nil))
	m.requestSeconds = m.reg.add(newFamily("sandboxd_http_request_duration_seconds",
		"Time to answer an API request (to its last byte; an event stream until it ends), by operation.",
		"histogram", []string{"operation"}, latencyBuckets))
	m.providerOps = m.reg.add(newFamily("sandboxd_provider_operation_duration_seconds",
		"Time of one provider operation (allocate, exec, release, ...), by operation and runtime class.",
		"histogram", []string{"operation", "runtime_class"}, latencyBuckets))
	m.providerErrors = m.reg.add(newFamily("sandboxd_provider_operation_errors_total",
		"Provider operations that failed, by operation, runtime class and error code.",
		"counter", []string{"operation", "runtime_class", "code"}, nil))
	m.commitSeconds = m.reg.add(newFamily("sandboxd_store_commit_duration_seconds",
		"Time of one store write transaction's commit.", "histogram", nil, latencyBuckets))
	m.reg.collects = append(m.reg.collects, m.collectProcess)
	return m
}

// SetRuntimeClass names the runtime class that labels the provider's operations from now on.
func (m *Metrics) SetRuntimeClass(class string) { m.class.Store(&class) }

// Watch adds what each scrape reads: the sandboxes and event log of src and, when pool is not nil,
// its warm pool. A daemon calls it once.
func (m *Metrics) Watch(src Source, pool sandbox.PoolReporter) {
	c := &scraped{src: src, pool: pool, class: m.runtimeClass()}
	m.reg.mu.Lock()
	m.reg.collects = append(m.reg.collects, c.collect)
	m.reg.mu.Unlock()
}

func (m *Metrics) runtimeClass() string {
	if c := m.class.Load(); c != nil {
		return *c
	}
	return ""
}

// Handler serves the metrics in the Prometheus text format, version 0.0.4.
func (m *Metrics) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_ = m.reg.write(w)
	})
}

// ObserveRequest records one answered API request: httpapi.Config.ObserveRequest.
func (m *Metrics) ObserveRequest(operation string, status int, d time.Duration) {
	m.requests.with(operation, strconv.Itoa(status)).add(1)
	m.requestSeconds.with(operation).observe(latencyBuckets, d.Seconds())
}

// ObserveProvider records one provider operation: core.Config.ObserveProvider.
func (m *Metrics) ObserveProvider(operation string, d time.Duration, err error) {
	class := m.runtimeClass()
	m.providerOps.with(operation, class).observe(latencyBuckets, d.Seconds())
	if err != nil {
		m.providerErrors.with(operation, class, string(sandbox.ClassOf(err).Code)).add(1)
	}
}

// ObserveCommit records one store commit: sqlite.Config.ObserveCommit.
func (m *Metrics) ObserveCommit(d time.Duration) {
	m.commitSeconds.with().observe(latencyBuckets, d.Seconds())
}

// gauge is a family of one scrape, of fixed values.
func gauge(name, help, typ string, labels []string, rows ...fixedSeries) *family {
	f := newFamily(name, help, typ, labels, nil)
	f.fixed = rows
	return f
}

func one(v float64, values ...string) fixedSeries { return fixedSeries{values: values, v: v} }

// collectProcess reports the process's own figures, read at the scrape.
func (m *Metrics) collectProcess(emit func(*family)) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	emit(gauge("go_goroutines", "Goroutines that currently exist.", "gauge", nil, one(float64(runtime.NumGoroutine()))))
	emit(gauge("go_memstats_heap_alloc_bytes", "Bytes of allocated heap objects.", "gauge", nil, one(float64(ms.HeapAlloc))))
	emit(gauge("go_memstats_sys_bytes", "Bytes of memory obtained from the OS.", "gauge", nil, one(float64(ms.Sys))))
	emit(gauge("go_gc_cycles_total", "Completed GC cycles.", "counter", nil, one(float64(ms.NumGC))))
	emit(gauge("process_start_time_seconds", "Start time of the process since the Unix epoch.", "gauge", nil,
		one(float64(m.started.UnixNano())/1e9)))
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		emit(gauge("process_cpu_seconds_total", "User and system CPU time spent.", "counter", nil, one(cpu.Seconds())))
	}
	if raw, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(raw)); len(f) > 1 {
			if pages, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				emit(gauge("process_resident_memory_bytes", "Resident memory size.", "gauge", nil,
					one(float64(pages*int64(os.Getpagesize())))))
			}
		}
	}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		emit(gauge("process_open_fds", "Open file descriptors.", "gauge", nil, one(float64(len(ents)))))
	}
}

// scraped are the daemon's figures read at each scrape.
type scraped struct {
	src   Source
	pool  sandbox.PoolReporter
	class string
}

func (c *scraped) collect(emit func(*family)) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	var failed []fixedSeries
	if list, err := c.src.List(ctx); err != nil {
		failed = append(failed, one(1, "sandboxes"))
	} else {
		provider := ""
		if m, err := c.src.Manifest(ctx); err == nil {
			provider = m.Name
		}
		type key struct{ state, provider string }
		counts := map[key]int{}
		for _, st := range sandbox.States {
			counts[key{string(st), provider}] = 0 // every state of this provider, zero included
		}
		for _, sb := range list {
			counts[key{string(sb.State), sb.Provider}]++
		}
		var rows []fixedSeries
		for k, n := range counts {
			rows = append(rows, one(float64(n), k.state, k.provider, c.class))
		}
		emit(gauge("sandboxd_sandboxes", "Sandboxes by state, provider and runtime class.", "gauge",
			[]string{"state", "provider", "runtime_class"}, rows...))
	}
	if pruned, head, err := c.src.EventLogBounds(ctx); err != nil {
		failed = append(failed, one(1, "event_log"))
	} else {
		emit(gauge("sandboxd_event_log_head_cursor", "The cursor of the newest event.", "gauge", nil, one(float64(head))))
		if pruned >= 0 {
			emit(gauge("sandboxd_event_log_retained_events", "Events the log retains.", "gauge", nil, one(float64(head-pruned))))
			emit(gauge("sandboxd_event_log_pruned_cursor",
				"The cursor up to which the log is pruned: a client behind it gets 410 event_history_unavailable.",
				"gauge", nil, one(float64(pruned))))
		}
	}
	if c.pool != nil {
		s := c.pool.PoolStats()
		class := []string{"runtime_class"}
		emit(gauge("sandboxd_warm_pool_idle", "Started containers waiting in the warm pool.", "gauge", class, one(float64(s.Idle), c.class)))
		emit(gauge("sandboxd_warm_pool_target", "How many the warm pool keeps started.", "gauge", class, one(float64(s.Target), c.class)))
		emit(gauge("sandboxd_warm_pool_hits_total", "Creates that took a warm pool entry.", "counter", class, one(float64(s.Hits), c.class)))
		emit(gauge("sandboxd_warm_pool_misses_total", "Creates the warm pool could have served that found it empty.",
			"counter", class, one(float64(s.Misses), c.class)))
	}
	if len(failed) > 0 {
		emit(gauge("sandboxd_scrape_errors", "Parts of this scrape that could not be read (1 each).", "gauge", []string{"part"}, failed...))
	}
}
