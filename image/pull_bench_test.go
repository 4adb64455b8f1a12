package image_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/image"
	"github.com/sandboxd/sandbox/image/imagetest"
)

// BenchmarkPullDebian measures a pull + unpack of a Debian bookworm minbase image (imagetest.DebianImage,
// one gzipped layer) from a registry on loopback into an empty store, against its floor in the same
// run: `skopeo copy` of the same image into an OCI layout and `umoci unpack --rootless` of it into a
// bundle. One of each in turn, each into fresh directories on one filesystem; the registry's files are
// in the page cache for both. It reports both medians, skopeo copy's alone, and the ratio of the
// store's to the floor's.
//
// skopeo and umoci are Debian's packages (apt-get install skopeo umoci); without them the benchmark is
// skipped, except under CI, where it fails. It needs root, as the store's unpack does.
//
//	go test -run '^$' -bench BenchmarkPullDebian -benchtime 10x ./image/
func BenchmarkPullDebian(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("unpacking layers with their owners and overlayfs whiteouts needs root")
	}
	tools := map[string]string{}
	for _, tool := range []string{"skopeo", "umoci"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			if os.Getenv("CI") != "" {
				b.Fatalf("%s is needed for the floor: %v", tool, err)
			}
			b.Skipf("%s is needed for the floor (apt-get install skopeo umoci): %v", tool, err)
		}
		tools[tool] = path
	}
	reg := imagetest.StartRegistry(b)
	tagged, _ := reg.Push(b, "bench/debian:bookworm", imagetest.DebianImage(b))
	work := b.TempDir()
	ctx := context.Background()
	clean := func(dirs ...string) {
		b.StopTimer()
		for _, d := range dirs {
			if err := os.RemoveAll(d); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	run := func(tool string, args ...string) {
		if out, err := exec.Command(tools[tool], args...).CombinedOutput(); err != nil {
			b.Fatalf("%s %v: %v\n%s", tool, args, err, out)
		}
	}

	pull := func() time.Duration {
		dir := filepath.Join(work, "store")
		start := time.Now()
		s, err := image.Open(image.Config{Dir: dir, Insecure: []string{reg.Host}})
		if err != nil {
			b.Fatal(err)
		}
		img, err := s.Pull(ctx, tagged, nil)
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		if len(img.Layers) != 1 {
			b.Fatalf("%d layers", len(img.Layers))
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		clean(dir)
		return d
	}
	floor := func() (copied, unpacked time.Duration) {
		layout, bundle := filepath.Join(work, "layout"), filepath.Join(work, "bundle")
		start := time.Now()
		run("skopeo", "copy", "--quiet", "--src-tls-verify=false", "docker://"+tagged, "oci:"+layout+":bench")
		copied = time.Since(start)
		run("umoci", "unpack", "--rootless", "--image", layout+":bench", bundle)
		unpacked = time.Since(start)
		if _, err := os.Stat(filepath.Join(bundle, "rootfs", "etc", "debian_version")); err != nil {
			b.Fatal(err)
		}
		clean(layout, bundle)
		return copied, unpacked
	}

	pull() // the registry's files into the page cache, out of the measure
	floor()
	var store, both, copies []time.Duration
	b.ResetTimer()
	for range b.N {
		store = append(store, pull())
		c, u := floor()
		copies, both = append(copies, c), append(both, u)
	}
	b.StopTimer()
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	ms, mf := median(store), median(both)
	b.ReportMetric(ms, "store-p50-ms")
	b.ReportMetric(mf, "skopeo+umoci-p50-ms")
	b.ReportMetric(median(copies), "skopeo-copy-p50-ms")
	b.ReportMetric(ms/mf, "store/floor")
}
