package oci_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
)

func medianMs(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2].Microseconds()) / 1000
}

// BenchmarkSnapshot100MiB measures the snapshot of a sandbox that wrote 100 MiB (100 files of 1 MiB
// of random bytes) against its floor in the same run: a copy of the same bytes from one file of the
// state directory's file system to another, flushed (what any capture of them must at least do).
func BenchmarkSnapshot100MiB(b *testing.B) {
	reg := imagetest.StartRegistry(b)
	tagged, _ := reg.Push(b, "bench/snap:1", imagetest.BusyboxImage(b, "bench"))
	dir := testenv.StateDir(b)
	cfg := testConfig(b, dir)
	cfg.InsecureRegistries = []string{reg.Host}
	p := newProviderWith(b, cfg)
	ctx := context.Background()
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	obs, err := p.Allocate(ctx, ref, sandbox.Spec{ClientRequestID: "bench", Image: tagged, Resources: &sandbox.Resources{DiskMiB: 1024}})
	if err != nil || obs.State != sandbox.ObservedReady {
		b.Fatalf("%+v %v", obs, err)
	}
	if res := sh(b, p, ref, "i=0; while [ $i -lt 100 ]; do busybox dd if=/dev/urandom of=/f$i bs=1M count=1 2>/dev/null; i=$((i+1)); done; echo ok"); res.Stdout != "ok\n" {
		b.Fatalf("%+v", res)
	}
	// The floor's source: 100 MiB of random bytes on the state directory's file system.
	src := filepath.Join(dir, "bench-src")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.CopyN(f, randReader{}, 100<<20); err != nil {
		b.Fatal(err)
	}
	f.Close()
	copyFloor := func() time.Duration {
		start := time.Now()
		in, _ := os.Open(src)
		out, _ := os.Create(src + ".copy")
		io.Copy(out, in)
		unix.Syncfs(int(out.Fd()))
		in.Close()
		out.Close()
		d := time.Since(start)
		os.Remove(src + ".copy")
		return d
	}
	var snap, floor []time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		sn, err := p.Snapshot(ctx, ref, sandbox.SnapshotOptions{})
		snap = append(snap, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := p.RemoveSnapshot(ctx, sn.ID); err != nil {
			b.Fatal(err)
		}
		if _, err := p.ImageStore().Prune(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		floor = append(floor, copyFloor())
	}
	b.StopTimer()
	ms, mf := medianMs(snap), medianMs(floor)
	b.ReportMetric(ms, "snapshot-p50-ms")
	b.ReportMetric(mf, "copy-floor-p50-ms")
	b.ReportMetric(ms/mf, "snapshot/floor")
}

type randReader struct{}

func (randReader) Read(p []byte) (int, error) { return unix.Getrandom(p, 0) }

// BenchmarkFork10 measures a fork of 10 (ten sandboxes of one snapshot, allocated at once) and, one
// at a time in turn, the create-to-ready of a sandbox of the snapshot against its floor in the same
// run, a create from the image the snapshot was taken on, cached in the store (no pool for either).
func BenchmarkFork10(b *testing.B) {
	reg := imagetest.StartRegistry(b)
	tagged, _ := reg.Push(b, "bench/fork:1", imagetest.BusyboxImage(b, "bench"))
	cfg := testConfig(b, testenv.StateDir(b))
	cfg.InsecureRegistries = []string{reg.Host}
	p := newProviderWith(b, cfg)
	ctx := context.Background()
	src := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if obs, err := p.Allocate(ctx, src, sandbox.Spec{ClientRequestID: "bench", Image: tagged}); err != nil || obs.State != sandbox.ObservedReady {
		b.Fatalf("%+v %v", obs, err)
	}
	sh(b, p, src, "busybox dd if=/dev/urandom of=/state bs=1M count=8 2>/dev/null")
	sn, err := p.Snapshot(ctx, src, sandbox.SnapshotOptions{})
	if err != nil {
		b.Fatal(err)
	}
	create := func(spec sandbox.Spec) (sandbox.Ref, time.Duration) {
		ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
		start := time.Now()
		obs, err := p.Allocate(ctx, ref, spec)
		d := time.Since(start)
		if err != nil || obs.State != sandbox.ObservedReady {
			b.Fatalf("allocate %+v: %+v %v", spec, obs, err)
		}
		return ref, d
	}
	release := func(refs ...sandbox.Ref) {
		for _, r := range refs {
			if err := p.Release(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
	}
	var fork10, one, image []time.Duration
	b.ResetTimer()
	for range b.N {
		refs := make([]sandbox.Ref, 10)
		start := time.Now()
		var wg sync.WaitGroup
		for i := range refs {
			wg.Add(1)
			go func() { defer wg.Done(); refs[i], _ = create(sandbox.Spec{ClientRequestID: "f", Template: sn.ID}) }()
		}
		wg.Wait()
		fork10 = append(fork10, time.Since(start))
		b.StopTimer()
		release(refs...)
		for range 5 {
			r1, d1 := create(sandbox.Spec{ClientRequestID: "f", Template: sn.ID})
			r2, d2 := create(sandbox.Spec{ClientRequestID: "i", Image: tagged})
			one, image = append(one, d1), append(image, d2)
			release(r1, r2)
		}
		b.StartTimer()
	}
	b.StopTimer()
	mo, mi := medianMs(one), medianMs(image)
	b.ReportMetric(medianMs(fork10), "fork10-p50-ms")
	b.ReportMetric(mo, "fork1-p50-ms")
	b.ReportMetric(mi, "image-p50-ms")
	b.ReportMetric(mo/mi, "fork/image")
}
