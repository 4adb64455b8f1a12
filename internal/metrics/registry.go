package metrics

import (
	"bufio"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// A registry of counters, gauges and histograms written in the Prometheus text exposition format,
// version 0.0.4. It is this package's own, not prometheus/client_golang's: the daemon's binary is
// also every sandbox's agent, and client_golang's package initialisation (its default registry's Go
// and process collectors, protobuf's descriptors) runs at every sandbox start, 1.1-2.2 ms measured
// here, for metrics only the daemon serves (docs/design/metrics.md). The format is small and stable;
// the tests parse what this writes with Prometheus's own parser.

// registry holds metric families, written in name order.
type registry struct {
	mu       sync.Mutex
	families []*family
	collects []func(emit func(f *family)) // families made at each scrape (collect.go)
}

// family is one metric name with its help, type and label names, and its series by label values.
type family struct {
	name, help, typ string
	labels          []string
	buckets         []float64 // a histogram's upper bounds, ascending, without +Inf

	series sync.Map // label values joined by 0xff -> *series
	// fixed holds a scrape's own series (a gauge read at collect time): label values and value.
	fixed []fixedSeries
}

type fixedSeries struct {
	values []string
	v      float64
}

// series is one counter, gauge or histogram. Every field is updated atomically: an observation on
// the request path takes no lock once its series exists.
type series struct {
	values []string
	bits   atomic.Uint64   // counter or gauge: a float64's bits
	counts []atomic.Uint64 // histogram: per bucket, not cumulative; the last is +Inf
	count  atomic.Uint64
	sum    atomic.Uint64 // histogram: a float64's bits
}

func (r *registry) add(f *family) *family {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.families = append(r.families, f)
	return f
}

func newFamily(name, help, typ string, labels []string, buckets []float64) *family {
	return &family{name: name, help: help, typ: typ, labels: labels, buckets: buckets}
}

// with returns the series of the label values, made on first use.
func (f *family) with(values ...string) *series {
	key := strings.Join(values, "\xff")
	if s, ok := f.series.Load(key); ok {
		return s.(*series)
	}
	s := &series{values: slices.Clone(values)}
	if f.typ == "histogram" {
		s.counts = make([]atomic.Uint64, len(f.buckets)+1)
	}
	got, _ := f.series.LoadOrStore(key, s)
	return got.(*series)
}

// add adds d to a counter or gauge.
func (s *series) add(d float64) {
	for {
		old := s.bits.Load()
		if s.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// observe records one value of a histogram whose upper bounds are buckets.
func (s *series) observe(buckets []float64, v float64) {
	i, _ := slices.BinarySearch(buckets, v) // the first bound ≥ v; len(buckets) is +Inf
	s.counts[i].Add(1)
	s.count.Add(1)
	for {
		old := s.sum.Load()
		if s.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// write writes every family in the text format, in name order, each family's series in the order of
// their label values.
func (r *registry) write(w io.Writer) error {
	r.mu.Lock()
	fams := slices.Clone(r.families)
	collects := slices.Clone(r.collects)
	r.mu.Unlock()
	for _, c := range collects {
		c(func(f *family) { fams = append(fams, f) })
	}
	slices.SortFunc(fams, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	bw := bufio.NewWriter(w)
	for _, f := range fams {
		f.write(bw)
	}
	return bw.Flush()
}

func (f *family) write(w *bufio.Writer) {
	type row struct {
		values []string
		s      *series
		v      float64
	}
	var rows []row
	f.series.Range(func(_, v any) bool {
		s := v.(*series)
		rows = append(rows, row{values: s.values, s: s})
		return true
	})
	for _, fs := range f.fixed {
		rows = append(rows, row{values: fs.values, v: fs.v})
	}
	if len(rows) == 0 {
		return
	}
	slices.SortFunc(rows, func(a, b row) int { return slices.Compare(a.values, b.values) })
	w.WriteString("# HELP " + f.name + " " + escapeHelp(f.help) + "\n")
	w.WriteString("# TYPE " + f.name + " " + f.typ + "\n")
	for _, r := range rows {
		if r.s == nil {
			writeSample(w, f.name, f.labels, r.values, "", "", r.v)
			continue
		}
		if f.typ != "histogram" {
			writeSample(w, f.name, f.labels, r.values, "", "", math.Float64frombits(r.s.bits.Load()))
			continue
		}
		// Read the buckets first and the count after: a concurrent observation then shows in the
		// count no earlier than in its bucket, and +Inf is the sum of what was read.
		var cum uint64
		for i, b := range f.buckets {
			cum += r.s.counts[i].Load()
			writeSample(w, f.name+"_bucket", f.labels, r.values, "le", formatFloat(b), float64(cum))
		}
		cum += r.s.counts[len(f.buckets)].Load()
		writeSample(w, f.name+"_bucket", f.labels, r.values, "le", "+Inf", float64(cum))
		writeSample(w, f.name+"_sum", f.labels, r.values, "", "", math.Float64frombits(r.s.sum.Load()))
		writeSample(w, f.name+"_count", f.labels, r.values, "", "", float64(cum))
	}
}

func writeSample(w *bufio.Writer, name string, labels, values []string, extraName, extraValue string, v float64) {
	w.WriteString(name)
	if len(labels) > 0 || extraName != "" {
		w.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString(l + `="` + escapeLabel(values[i]) + `"`)
		}
		if extraName != "" {
			if len(labels) > 0 {
				w.WriteByte(',')
			}
			w.WriteString(extraName + `="` + extraValue + `"`)
		}
		w.WriteByte('}')
	}
	w.WriteByte(' ')
	w.WriteString(formatFloat(v))
	w.WriteByte('\n')
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// escapeLabel escapes a label value as the text format says: backslash, double quote and line feed.
var escapeLabel = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace

// escapeHelp escapes a help text: backslash and line feed.
var escapeHelp = strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace
