package metrics

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sandboxd/sandbox"
)

// TestExpositionParses: what the registry writes, under concurrent observations, is read by
// Prometheus's own text parser as the same families: counters and histograms with their label values
// (escaped where the format says), cumulative buckets that end in +Inf at the count, and the
// scrape's own gauges.
func TestExpositionParses(t *testing.T) {
	m := New()
	m.SetRuntimeClass("runc")
	m.Watch(fakeSource{}, poolStats{Idle: 2, Target: 4, Hits: 7, Misses: 1})
	odd := "GET /v1/x\"\\\nweird"
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				m.ObserveRequest("POST /v1/sandboxes", 201, time.Duration(i)*time.Millisecond)
				m.ObserveProvider("allocate", time.Millisecond, nil)
				if g == 0 && i%100 == 0 {
					m.ObserveRequest(odd, 404, time.Microsecond)
					m.ObserveProvider("exec", time.Second, sandbox.ErrProviderUnavailable)
				}
			}
		}()
	}
	// Scrapes while the observations go on parse too.
	for range 5 {
		parse(t, m)
	}
	wg.Wait()
	fams := parse(t, m)
	req := fams["sandboxd_http_requests_total"]
	if req == nil || len(req.Metric) != 2 {
		t.Fatalf("requests: %v", req)
	}
	for _, s := range req.Metric {
		labels := map[string]string{}
		for _, l := range s.Label {
			labels[l.GetName()] = l.GetValue()
		}
		want := map[string]float64{"POST /v1/sandboxes": 4000, odd: 5}[labels["operation"]]
		if s.GetCounter().GetValue() != want {
			t.Errorf("%q %s: %v, want %v", labels["operation"], labels["code"], s.GetCounter().GetValue(), want)
		}
	}
	for _, s := range fams["sandboxd_http_request_duration_seconds"].Metric {
		h := s.GetHistogram()
		var last uint64
		for _, b := range h.Bucket {
			if b.GetCumulativeCount() < last {
				t.Fatalf("buckets not cumulative: %v", h.Bucket)
			}
			last = b.GetCumulativeCount()
		}
		if last > h.GetSampleCount() {
			t.Errorf("last bucket %d over the count %d", last, h.GetSampleCount())
		}
	}
	errs := fams["sandboxd_provider_operation_errors_total"]
	if errs == nil || errs.Metric[0].GetCounter().GetValue() != 5 {
		t.Errorf("provider errors: %v", errs)
	}
	if g := fams["sandboxd_warm_pool_idle"]; g == nil || g.Metric[0].GetGauge().GetValue() != 2 {
		t.Errorf("warm pool: %v", g)
	}
	if g := fams["sandboxd_sandboxes"]; g == nil || len(g.Metric) != len(sandbox.States) {
		t.Errorf("sandboxes by state: %v", g)
	}
	if g := fams["sandboxd_event_log_retained_events"]; g == nil || g.Metric[0].GetGauge().GetValue() != 90 {
		t.Errorf("retained events: %v", g)
	}
	if fams["process_resident_memory_bytes"] == nil || fams["go_goroutines"] == nil {
		t.Error("no process figures")
	}
}

// TestScrapeErrorsAreSaid: a part of a scrape that cannot be read is reported as such, and the rest
// is written.
func TestScrapeErrorsAreSaid(t *testing.T) {
	m := New()
	m.Watch(fakeSource{fail: true}, nil)
	fams := parse(t, m)
	if g := fams["sandboxd_scrape_errors"]; g == nil || len(g.Metric) != 2 {
		t.Fatalf("scrape errors: %v", g)
	}
	if fams["go_goroutines"] == nil {
		t.Error("the rest of the scrape is missing")
	}
}

func parse(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	var buf bytes.Buffer
	if err := m.reg.write(&buf); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	return fams
}

func BenchmarkObserveRequest(b *testing.B) {
	m := New()
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveRequest("POST /v1/sandboxes/{sandboxId}/commands", 200, time.Millisecond)
	}
}

type fakeSource struct{ fail bool }

func (f fakeSource) List(context.Context) ([]*sandbox.Sandbox, error) {
	if f.fail {
		return nil, errors.New("store closed")
	}
	return []*sandbox.Sandbox{{State: sandbox.StateReady, Provider: "oci"}}, nil
}

func (f fakeSource) EventLogBounds(context.Context) (int64, int64, error) {
	if f.fail {
		return 0, 0, errors.New("store closed")
	}
	return 10, 100, nil
}

func (fakeSource) Manifest(context.Context) (sandbox.Manifest, error) {
	return sandbox.Manifest{Name: "oci"}, nil
}

type poolStats sandbox.PoolStats

func (p poolStats) PoolStats() sandbox.PoolStats { return sandbox.PoolStats(p) }
