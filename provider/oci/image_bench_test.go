package oci_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
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
	alternate(b, tagged, "", create)
}

// alternate times create(image) and create("") in turn, b.N times each, and reports both medians
// (image-<what>p50-ms, plain-<what>p50-ms) and their ratio.
func alternate(b *testing.B, image, what string, create func(image string) time.Duration) {
	var img, plain []time.Duration
	b.ResetTimer()
	for range b.N {
		img = append(img, create(image))
		plain = append(plain, create(""))
	}
	b.StopTimer()
	mi, mp := medianMs(img), medianMs(plain)
	b.ReportMetric(mi, "image-"+what+"p50-ms")
	b.ReportMetric(mp, "plain-"+what+"p50-ms")
	b.ReportMetric(mi/mp, "image/plain")
}

// BenchmarkCreateFromImagePool measures create-to-ready of a sandbox of an image taken from the image's
// warm pool against its floor in the same run, a sandbox of the shared root taken from the shared
// root's pool, one of each in turn, each pool full again (untimed) before each create. It reports both
// medians and their ratio (goal: the image's under 5 ms).
func BenchmarkCreateFromImagePool(b *testing.B) {
	reg := imagetest.StartRegistry(b)
	tagged, _ := reg.Push(b, "bench/pooled:1", imagetest.BusyboxImage(b, "bench"))
	cfg := testConfig(b, testenv.StateDir(b))
	cfg.Runtime = "runc"
	cfg.InsecureRegistries = []string{reg.Host}
	cfg.WarmPool = 1
	cfg.ImagePools = []oci.ImagePool{{Ref: tagged, Size: 1}}
	p := newProviderWith(b, cfg)
	ctx := context.Background()
	full := func() {
		for deadline := time.Now().Add(time.Minute); p.PoolStats().Idle < 2; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("the pools are not full: %+v", p.PoolStats())
			}
		}
	}
	create := func(image string) time.Duration {
		b.StopTimer()
		full()
		b.StartTimer()
		ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
		start := time.Now()
		obs, err := p.Allocate(ctx, ref, sandbox.Spec{ClientRequestID: "bench", Image: image})
		d := time.Since(start)
		b.StopTimer()
		if err != nil || obs.State != sandbox.ObservedReady || !strings.HasPrefix(oci.Container(p, ref), "pool-") {
			b.Fatalf("allocate %q: %+v %v, container %s (not from a pool)", image, obs, err, oci.Container(p, ref))
		}
		if err := p.Release(ctx, ref); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		return d
	}
	alternate(b, tagged, "pool-", create)
}
