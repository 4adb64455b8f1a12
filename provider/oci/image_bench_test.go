package oci_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// BenchmarkCreateFromCachedImage measures create-to-ready of a sandbox from an image the store holds
// against its floor in the same run, a create of a sandbox on the shared root (no warm pool, no
// spares for either), one of each in turn. It reports both medians and their ratio (goal: 1.1).
func BenchmarkCreateFromCachedImage(b *testing.B) {
	reg := imagetest.StartRegistry(b)
	tagged, _ := reg.Push(b, "bench/busybox:1", imagetest.BusyboxImage(b, "bench"))
	cfg := testConfig(b, testenv.StateDir(b))
	cfg.InsecureRegistries = []string{reg.Host}
	p := newProviderWith(b, cfg)
	ctx := context.Background()
	create := func(image string) time.Duration {
		ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
		start := time.Now()
		obs, err := p.Allocate(ctx, ref, sandbox.Spec{ClientRequestID: "bench", Image: image})
		d := time.Since(start)
		if err != nil || obs.State != sandbox.ObservedReady {
			b.Fatalf("allocate %q: %+v %v", image, obs, err)
		}
		b.StopTimer()
		if err := p.Release(ctx, ref); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		return d
	}
	create(tagged) // the pull, out of the measure
	var img, plain []time.Duration
	b.ResetTimer()
	for range b.N {
		img = append(img, create(tagged))
		plain = append(plain, create(""))
	}
	b.StopTimer()
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	mi, mp := median(img), median(plain)
	b.ReportMetric(mi, "image-p50-ms")
	b.ReportMetric(mp, "plain-p50-ms")
	b.ReportMetric(mi/mp, "image/plain")
}
