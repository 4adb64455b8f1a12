package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	sbxclient "github.com/sandboxd/sandbox/client"
)

// benchImage is the name the image cases import their busybox image under.
const benchImage = "sbxbench/busybox:1"

// hostBusybox is the static busybox the image cases' image is made of (Debian's busybox-static).
const hostBusybox = "/bin/busybox"

// busyboxLayout writes at dir, which must not exist, an OCI image layout of one layer, as
// scripts/busybox-image makes: the static busybox at /bin/busybox with a link to it for each of its
// applets, /etc, /root and /tmp, and a config of PATH=/bin and sh.
func busyboxLayout(dir, busybox string) error {
	if f, err := elf.Open(busybox); err != nil {
		return fmt.Errorf("%s: %w (apt-get install busybox-static)", busybox, err)
	} else {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				f.Close()
				return fmt.Errorf("%s is not a static busybox (apt-get install busybox-static)", busybox)
			}
		}
		f.Close()
	}
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	list, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("%s --list: %w", busybox, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) error {
		h.ModTime, h.Format = time.Unix(0, 0), tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	dirs := []*tar.Header{{Name: "bin/", Mode: 0o755}, {Name: "etc/", Mode: 0o755}, {Name: "root/", Mode: 0o700}, {Name: "tmp/", Mode: 0o1777}}
	for _, h := range dirs {
		h.Typeflag = tar.TypeDir
		if err := add(h, nil); err != nil {
			return err
		}
	}
	if err := add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))}, bin); err != nil {
		return err
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		if err := add(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, nil); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	raw := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Env: []string{"PATH=/bin"}, Cmd: []string{"sh"}, WorkingDir: "/root"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists", dir)
	}
	work, err := os.MkdirTemp(filepath.Dir(dir), ".busybox-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	p, err := layout.Write(work, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img); err != nil {
		return err
	}
	return os.Rename(work, dir)
}

// imageResults is what the image cases measured: cases, the floors measured beside them, and the
// ratios of the one to the other.
type imageResults struct {
	cases, floors []Result
	ratios        []Ratio
	notes         []string
}

func (r *imageResults) pair(c, f Result) {
	r.cases, r.floors = append(r.cases, c), append(r.floors, f)
	if f.P50 > 0 {
		r.ratios = append(r.ratios, Ratio{Case: c.Name, Floor: f.Name, P50: c.P50 / f.P50})
	}
}

// imageCases measures the image cases (--images) of the oci provider: on the daemon first, run without
// a warm pool, create-to-ready from the cached image against one on the shared root, then a snapshot
// of a sandbox with 100 MiB of changes against a copy of as many bytes, a fork of 10 and a fork of one
// against a create from the cached image; then, on one more daemon started under tmp with a warm pool
// of one for the shared root and one for the image, a create taken from each pool in turn; last, a
// pull from a registry on loopback against skopeo and umoci (pullCase). Everything it makes
// (sandboxes, snapshots, the images, the registry) is removed before it returns.
func imageCases(ctx context.Context, o options, tmp, prefix string, first *daemon) (*imageResults, error) {
	out := &imageResults{}
	dir := filepath.Join(tmp, "busybox-oci")
	if err := busyboxLayout(dir, hostBusybox); err != nil {
		return out, err
	}
	c := newClient(first.url)
	api, err := sbxclient.New(first.url)
	if err != nil {
		return out, err
	}
	if _, err := api.ImportImage(ctx, dir, benchImage); err != nil {
		return out, fmt.Errorf("importing %s: %w", dir, err)
	}
	err = cachedImageCases(ctx, c, api, o.bounds, prefix, first.dataDir, out)
	if rerr := removeImage(context.WithoutCancel(ctx), c, api); err == nil {
		err = rerr
	}
	if err != nil {
		return out, err
	}

	// The image pool's daemon: the image is imported first, on the same data directory, so that the
	// pool it is started with finds it in its store and pulls nothing.
	poolDir := filepath.Join(tmp, "imagepool")
	dm, err := startDaemon(ctx, o.sandboxd, "oci", poolDir, o.daemonFlags()...)
	if err != nil {
		return out, err
	}
	pc, err := sbxclient.New(dm.url)
	if err == nil {
		_, err = pc.ImportImage(ctx, dir, benchImage)
	}
	dm.stop()
	if err != nil {
		return out, err
	}
	dm, err = startDaemon(ctx, o.sandboxd, "oci", poolDir, o.daemonFlags("--oci-warm-pool", "1", "--oci-warm-pool-image", benchImage+"=1")...)
	if err != nil {
		return out, err
	}
	img, plain, err := pooledCreates(ctx, newClient(dm.url), filepath.Join(dm.dataDir, "oci", "pool"), o.bounds, prefix)
	if err == nil {
		out.pair(img, plain)
	}
	dm.stop()
	if err != nil {
		return out, err
	}
	return out, pullCase(ctx, o, tmp, dir, out)
}

// removeImage terminates what is left on the daemon, then removes the bench's image and prunes the
// layers nothing holds.
func removeImage(ctx context.Context, c *client, api *sbxclient.Client) error {
	if err := drain(ctx, c); err != nil {
		return err
	}
	if err := api.RemoveImage(ctx, benchImage); err != nil {
		return err
	}
	_, err := api.PruneImages(ctx)
	return err
}

// alternated times a and b in turn, each once per sample, until the bounds say stop, the order swapped
// every pair (the second of a pair meets what the first left running: the daemon laying out a spare
// sandbox directory in place of the one taken, say); after(i), when not nil, runs untimed after each
// pair.
func alternated(ctx context.Context, bounds Bounds, a, b func(i int) error, after func(i int) error) (ra, rb Result, err error) {
	var da, db []time.Duration
	start := time.Now()
	for i := 0; i < bounds.Count && (i == 0 || time.Since(start) < bounds.Duration); i++ {
		if err := ctx.Err(); err != nil {
			return ra, rb, err
		}
		type timed struct {
			op func(int) error
			d  *[]time.Duration
		}
		pair := []timed{{a, &da}, {b, &db}}
		if i%2 == 1 {
			pair[0], pair[1] = pair[1], pair[0]
		}
		for _, s := range pair {
			t := time.Now()
			if err := s.op(i); err != nil {
				return ra, rb, err
			}
			*s.d = append(*s.d, time.Since(t))
		}
		if after != nil {
			if err := after(i); err != nil {
				return ra, rb, err
			}
		}
	}
	wall := time.Since(start)
	return summarize("", da, wall), summarize("", db, wall), nil
}

// createThenGone is a timed create with spec (until ready) whose sandbox the untimed gone terminates
// and waits for.
type createThenGone struct {
	c    *client
	made []sandboxDoc
}

func (k *createThenGone) create(ctx context.Context, spec map[string]any) error {
	sb, err := k.c.createSpec(ctx, spec)
	if err == nil {
		k.made = append(k.made, sb)
	}
	return err
}

func (k *createThenGone) gone(ctx context.Context) error {
	for _, sb := range k.made {
		if err := k.c.terminateAndWait(ctx, sb); err != nil {
			return err
		}
	}
	k.made = k.made[:0]
	return nil
}

// cachedImageCases are the image cases of the daemon without a pool (imageCases).
func cachedImageCases(ctx context.Context, c *client, api *sbxclient.Client, b Bounds, prefix, dataDir string, out *imageResults) error {
	k := &createThenGone{c: c}
	// fromImage(tag) creates from the image; tag keeps the request ids of its two cases apart.
	fromImage := func(tag string) func(i int) error {
		return func(i int) error {
			return k.create(ctx, map[string]any{"clientRequestId": fmt.Sprintf("%s-%s-%d", prefix, tag, i), "image": benchImage})
		}
	}
	img, plain, err := alternated(ctx, b, fromImage("img"), func(i int) error {
		return k.create(ctx, map[string]any{"clientRequestId": fmt.Sprintf("%s-root-%d", prefix, i)})
	}, func(int) error { return k.gone(ctx) })
	if err != nil {
		return fmt.Errorf("create-to-ready from an image: %w", err)
	}
	img.Name, img.Note = "create-to-ready, cached image", "POST /v1/sandboxes with spec.image of an imported busybox, until ready; no pool"
	plain.Name, plain.Note = "floor: create-to-ready, shared root", "the same without spec.image, in turn with it"
	out.pair(img, plain)

	// A sandbox of the image with 100 MiB of changes: 100 files of 1 MiB of random bytes.
	src, err := c.createSpec(ctx, map[string]any{"clientRequestId": prefix + "-snapsrc", "image": benchImage})
	if err != nil {
		return err
	}
	defer c.terminate(context.WithoutCancel(ctx), src)
	if res, err := c.exec(ctx, src, "sh", "-c", "i=0; while [ $i -lt 100 ]; do dd if=/dev/urandom of=/f$i bs=1M count=1 2>/dev/null; i=$((i+1)); done; echo ok"); err != nil || res.Stdout != "ok\n" {
		return fmt.Errorf("writing 100 MiB in the sandbox: %q %v", res.Stdout, err)
	}
	copyFloor, cleanup, err := copyFloor(dataDir, 100<<20)
	if err != nil {
		return err
	}
	defer cleanup()
	var snapID string
	snapB := Bounds{Count: min(b.Count, 10), Duration: b.Duration}
	snap, floor, err := alternated(ctx, snapB, func(int) error {
		info, err := api.Snapshot(ctx, sandbox.ID(src.ID), sandbox.Generation(src.Generation), "")
		if err == nil {
			snapID = info.ID
		}
		return err
	}, func(int) error { return copyFloor() }, func(int) error {
		if err := api.DeleteSnapshot(ctx, snapID); err != nil {
			return err
		}
		_, err := api.PruneImages(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	snap.Name, snap.Note = "snapshot, 100 MiB of changes", "POST /v1/sandboxes/{id}/snapshots of a sandbox that wrote 100 files of 1 MiB"
	floor.Name, floor.Note = "floor: copy of 100 MiB + syncfs", "one file to another on the data directory's file system, in turn with it"
	out.pair(snap, floor)

	// The snapshot the forks are made of, kept until the end.
	info, err := api.Snapshot(ctx, sandbox.ID(src.ID), sandbox.Generation(src.Generation), "")
	if err != nil {
		return err
	}
	defer func() {
		ctx := context.WithoutCancel(ctx)
		drain(ctx, c)
		api.DeleteSnapshot(ctx, info.ID)
	}()
	r, err := sequentialThen(ctx, "", Bounds{Count: max(1, min(b.Count/10, 5)), Duration: b.Duration}, func(i int) error {
		return forkSafe(ctx, c, api, info.ID, 10, fmt.Sprintf("%s-fork10-%d", prefix, i), k)
	}, func(int) error { return k.gone(ctx) })
	if err != nil {
		return fmt.Errorf("fork of 10: %w", err)
	}
	r.Name, r.Note = "fork of 10, until all ready", "POST /v1/snapshots/{id}/fork with count 10, until every sandbox is ready"
	out.cases = append(out.cases, r)

	one, img2, err := alternated(ctx, b, func(i int) error {
		return forkSafe(ctx, c, api, info.ID, 1, fmt.Sprintf("%s-fork1-%d", prefix, i), k)
	}, fromImage("forkimg"), func(int) error { return k.gone(ctx) })
	if err != nil {
		return fmt.Errorf("fork of one: %w", err)
	}
	one.Name, one.Note = "fork of one, until ready", "POST /v1/snapshots/{id}/fork with count 1, until ready; no pool"
	img2.Name, img2.Note = "floor: create-to-ready, cached image", "a create from the image the snapshot was taken on, in turn with it"
	out.pair(one, img2)
	return nil
}

// forkSafe forks n sandboxes of the snapshot id and waits until every one is ready; k holds them for
// their termination.
func forkSafe(ctx context.Context, c *client, api *sbxclient.Client, id string, n int, key string, k *createThenGone) error {
	ids, err := api.Fork(ctx, id, n, sbxclient.ForkOptions{ClientRequestID: key})
	if err != nil {
		return err
	}
	docs := make([]sandboxDoc, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { docs[i], errs[i] = c.ready(ctx, sandboxDoc{ID: string(id), State: "starting"}) })
	}
	wg.Wait()
	for i, d := range docs {
		if errs[i] == nil {
			k.made = append(k.made, d)
		}
	}
	return errors.Join(errs...)
}

// copyFloor makes a file of size random bytes under dir and returns a floor that copies it to another
// file there and flushes the file system, and a cleanup that removes both.
func copyFloor(dir string, size int64) (floor func() error, cleanup func(), err error) {
	src := filepath.Join(dir, "sbxbench-copy-src")
	dst := src + ".copy"
	cleanup = func() { os.Remove(src); os.Remove(dst) }
	f, err := os.Create(src)
	if err != nil {
		return nil, nil, err
	}
	_, err = io.CopyN(f, randReader{}, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	floor = func() error {
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		defer os.Remove(dst)
		defer out.Close()
		if _, err := io.Copy(out, in); err != nil {
			return err
		}
		return unix.Syncfs(int(out.Fd()))
	}
	return floor, cleanup, nil
}

type randReader struct{}

func (randReader) Read(p []byte) (int, error) { return unix.Getrandom(p, 0) }

// pooledCreates times, in turn, a create of the image taken from its warm pool and one of the shared
// root taken from its own, on a daemon keeping one entry of each (its pool directory poolDir), both
// pools full again (untimed) before each pair.
func pooledCreates(ctx context.Context, c *client, poolDir string, b Bounds, prefix string) (img, plain Result, err error) {
	full := func() error { return poolFull(ctx, poolDir, 2, time.Minute) }
	if err := full(); err != nil {
		return img, plain, err
	}
	k := &createThenGone{c: c}
	// One pool is refilled while the other's create is timed: the pair's second create waits until
	// both are full again, untimed, as the first did.
	var d1, d2 []time.Duration
	start := time.Now()
	for i := 0; i < b.Count && (i == 0 || time.Since(start) < b.Duration); i++ {
		for j, spec := range []map[string]any{
			{"clientRequestId": prefix + "-pimg-" + strconv.Itoa(i), "image": benchImage},
			{"clientRequestId": prefix + "-proot-" + strconv.Itoa(i)},
		} {
			if err := full(); err != nil {
				return img, plain, err
			}
			t := time.Now()
			if err := k.create(ctx, spec); err != nil {
				return img, plain, err
			}
			if d := time.Since(t); j == 0 {
				d1 = append(d1, d)
			} else {
				d2 = append(d2, d)
			}
			if err := k.gone(ctx); err != nil {
				return img, plain, err
			}
		}
	}
	wall := time.Since(start)
	img, plain = summarize("create-to-ready, image's warm pool of 1", d1, wall), summarize("floor: create-to-ready, shared root's warm pool of 1", d2, wall)
	img.Note = "spec.image on a daemon run with --oci-warm-pool-image REF=1: a started container of the image is taken"
	plain.Note = "the same daemon's --oci-warm-pool 1 without spec.image, in turn with it"
	return img, plain, nil
}
