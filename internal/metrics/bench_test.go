package metrics_test

import (
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/internal/metrics"
	teststack "github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/host"
	"github.com/sandboxd/sandbox/store/sqlite"
)

// BenchmarkExecMetricsCost is what metrics and the audit line cost a command: the same exec of `true`
// through the real stack (HTTP, core, store, host provider), alternated between a stack without
// metrics (the floor) and one with every hook the daemon wires, each first every other time, timed
// apart in the same run. It
// reports both medians and their ratio (goal: under 1.02).
func BenchmarkExecMetricsCost(b *testing.B) {
	bare := benchStack(b, nil)
	m := metrics.New()
	metered := benchStack(b, m)
	var tb, tm []time.Duration
	for i := 0; b.Loop(); i++ {
		// Each goes first every other time: neither gains from following the other.
		if i%2 == 0 {
			tb = append(tb, execOnce(b, bare))
			tm = append(tm, execOnce(b, metered))
		} else {
			tm = append(tm, execOnce(b, metered))
			tb = append(tb, execOnce(b, bare))
		}
	}
	fb, fm := median(tb), median(tm)
	b.ReportMetric(float64(fb.Microseconds()), "bare-µs/exec")
	b.ReportMetric(float64(fm.Microseconds()), "metrics-µs/exec")
	b.ReportMetric(float64(fm)/float64(fb), "ratio")
}

type benchSandbox struct {
	c  *client.Client
	sb *sandbox.Sandbox
}

func benchStack(b *testing.B, m *metrics.Metrics) benchSandbox {
	dir := b.TempDir()
	prov, err := host.New(host.Config{Dir: filepath.Join(dir, "host"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	var opts []teststack.Option
	if m != nil {
		opts = append(opts,
			teststack.StoreConfig(func(c *sqlite.Config) { c.ObserveCommit = m.ObserveCommit }),
			teststack.Core(func(c *core.Config) { c.ObserveProvider = m.ObserveProvider }),
			teststack.API(func(c *httpapi.Config) {
				c.ObserveRequest, c.Metrics = m.ObserveRequest, m.Handler()
				c.Audit = slog.New(slog.NewTextHandler(discard{}, nil)) // formatted, as the daemon's is
			}))
	}
	st := teststack.New(b, prov, opts...)
	if m != nil {
		m.SetRuntimeClass("host")
		m.Watch(st.Runtime, nil)
	}
	c, err := client.New(st.URL)
	if err != nil {
		b.Fatal(err)
	}
	sb, err := c.Create(b.Context(), sandbox.Spec{ClientRequestID: string(sandbox.NewID())})
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for sb.State != sandbox.StateReady {
		if time.Now().After(deadline) {
			b.Fatalf("sandbox is %s", sb.State)
		}
		time.Sleep(5 * time.Millisecond)
		if sb, err = c.Get(b.Context(), sb.ID); err != nil {
			b.Fatal(err)
		}
	}
	return benchSandbox{c: c, sb: sb}
}

func execOnce(b *testing.B, s benchSandbox) time.Duration {
	start := time.Now()
	res, err := s.c.Exec(b.Context(), s.sb.ID, s.sb.Generation, sandbox.Command{Argv: []string{"true"}, Timeout: time.Minute})
	if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
		b.Fatalf("exec: %+v %v", res, err)
	}
	return time.Since(start)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
