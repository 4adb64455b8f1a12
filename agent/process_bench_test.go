package agent_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
)

// BenchmarkProcessFirstByte is the time from a background process's start to its first byte of output
// read back through the agent on the host (start `echo x`, read from offset 0), beside its floor
// measured in the same run, sample by sample in alternation: the exec round trip of `true`. It reports
// both medians and their ratio (goal: within 1.5x).
func BenchmarkProcessFirstByte(b *testing.B) {
	a := start(b)
	ctx := context.Background()
	floor := sandbox.Command{Argv: []string{"true"}, Timeout: 10 * time.Second}
	var firsts, trues []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		res, err := a.c.Run(ctx, floor, time.Second, time.Second)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("%+v %v", res, err)
		}
		trues = append(trues, time.Since(t0))

		t0 = time.Now()
		p, err := a.c.StartProcess(ctx, sandbox.ProcessSpec{Argv: []string{"echo", "x"}})
		if err != nil {
			b.Fatal(err)
		}
		out, err := a.c.Output(ctx, p.PID, 0, 1, 5*time.Second)
		if err != nil || len(out.Data) != 1 {
			b.Fatalf("first byte: %+v %v", out, err)
		}
		firsts = append(firsts, time.Since(t0))
	}
	b.StopTimer()
	median := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	f, t := median(firsts), median(trues)
	b.ReportMetric(float64(f.Microseconds()), "first-byte-µs")
	b.ReportMetric(float64(t.Microseconds()), "exec-true-µs")
	b.ReportMetric(float64(f)/float64(t), "x-floor")
}
