package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	sbxclient "github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/image/imagetest"
)

// pullRepo is the repository:tag the pull case pushes its image to on its registry.
const pullRepo = "sbxbench/pull:1"

// pullImage is the image of the pull case and what it is: the OCI layout at path when path is given,
// else the Debian base the image tests cache (imagetest.BuildDebianRootfs), else, when the cache lacks
// it, the busybox layout at busybox (a note says so).
func pullImage(path, busybox string) (img v1.Image, what, note string, err error) {
	if path == "" {
		rootfs, err := imagetest.BuildDebianRootfs(false, nil)
		if err == nil {
			img, err := imagetest.DebianImageOf(rootfs)
			return img, "the cached Debian bookworm minbase image", "", err
		}
		if !errors.Is(err, imagetest.ErrNotCached) {
			return nil, "", "", err
		}
		path = busybox
		note = fmt.Sprintf("pull case: %v; it pulls the busybox image instead (the image tests build the Debian one into the cache, with mmdebstrap: about 5 minutes)", err)
	}
	idx, err := layout.ImageIndexFromPath(path)
	if err != nil {
		return nil, "", "", fmt.Errorf("--pull-image %s: %w", path, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, "", "", err
	}
	if len(m.Manifests) != 1 {
		return nil, "", "", fmt.Errorf("--pull-image %s: %d images in the layout, want one", path, len(m.Manifests))
	}
	img, err = idx.Image(m.Manifests[0].Digest)
	return img, "the image of the OCI layout " + path, note, err
}

// pullCase times a pull + unpack through the daemon's API (POST /v1/images/pull, into a store that
// has none of the image's layers) against `skopeo copy` of the same image into an OCI layout and
// `umoci unpack` of it into a bundle, in turn, from a docker-registry it starts on loopback under tmp
// and pushes the image to (pullImage's). The daemon is one more, started under tmp with the registry
// as --insecure-registry. A pull and a floor are each done once, untimed, first, so that the
// registry's files are in the page cache for both. Its samples are at most --pull-count and --count,
// and none is begun after --duration or a minute, whichever is longer. Without skopeo or umoci the
// case is timed alone and a note says why.
func pullCase(ctx context.Context, o options, tmp, busybox string, out *imageResults) error {
	img, what, note, err := pullImage(o.pullImage, busybox)
	if err != nil {
		return err
	}
	if note != "" {
		out.notes = append(out.notes, note)
	}
	regDir := filepath.Join(tmp, "registry")
	if err := os.MkdirAll(regDir, 0o700); err != nil {
		return err
	}
	reg, err := imagetest.ServeRegistry(regDir)
	if err != nil {
		return err
	}
	defer reg.Kill()
	tagged, _, err := reg.PushContext(ctx, pullRepo, img)
	if err != nil {
		return fmt.Errorf("pushing %s: %w", what, err)
	}
	dm, err := startDaemon(ctx, o.sandboxd, "oci", filepath.Join(tmp, "pull"), o.daemonFlags("--insecure-registry", reg.Host)...)
	if err != nil {
		return err
	}
	defer dm.stop()
	api, err := sbxclient.New(dm.url)
	if err != nil {
		return err
	}
	pull := func(int) error { _, err := api.PullImage(ctx, tagged); return err }
	forget := func(int) error {
		if err := api.RemoveImage(ctx, tagged); err != nil {
			return err
		}
		_, err := api.PruneImages(ctx)
		return err
	}

	var tools []string
	for _, tool := range []string{"skopeo", "umoci"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			out.notes = append(out.notes, fmt.Sprintf("pull case's floor not measured: %v (apt-get install skopeo umoci)", err))
			tools = nil
			break
		}
		tools = append(tools, p)
	}
	work := filepath.Join(tmp, "pullfloor")
	oci, bundle := filepath.Join(work, "layout"), filepath.Join(work, "bundle")
	floor := func(int) error {
		if err := os.MkdirAll(work, 0o700); err != nil { // skopeo makes the layout, not its parent
			return err
		}
		for _, c := range [][]string{
			{tools[0], "copy", "--quiet", "--src-tls-verify=false", "docker://" + tagged, "oci:" + oci + ":bench"},
			{tools[1], "unpack", "--image", oci + ":bench", bundle},
		} {
			if b, err := exec.CommandContext(ctx, c[0], c[1:]...).CombinedOutput(); err != nil {
				return fmt.Errorf("%s: %w\n%s", c, err, b)
			}
		}
		return nil
	}
	clean := func(int) error { return os.RemoveAll(work) }

	caseNote := "POST /v1/images/pull of " + what + " from a registry on loopback, into a store without its layers; removed and pruned after each"
	floorName, floorNote := "floor: skopeo copy + umoci unpack", "`skopeo copy docker://… oci:DIR` and `umoci unpack` of the same image into a bundle, in turn with it"
	// A pull of the Debian image and its floor take seconds each: the case has a minute at least.
	b := Bounds{Count: min(o.bounds.Count, o.pullCount), Duration: max(o.bounds.Duration, time.Minute)}
	if err := firstThen(pull, forget); err != nil {
		return err
	}
	if tools == nil {
		r, err := sequentialThen(ctx, "", b, pull, forget)
		if err != nil {
			return fmt.Errorf("pull: %w", err)
		}
		r.Name, r.Note = "pull + unpack", caseNote
		out.cases = append(out.cases, r)
		return nil
	}
	if err := firstThen(floor, clean); err != nil {
		return err
	}
	both := func(i int) error { return errors.Join(forget(i), clean(i)) }
	p, f, err := alternated(ctx, b, pull, floor, both)
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	p.Name, p.Note = "pull + unpack", caseNote
	f.Name, f.Note = floorName, floorNote
	out.pair(p, f)
	return nil
}

// firstThen runs op, then after: once, untimed.
func firstThen(op, after func(int) error) error {
	if err := op(-1); err != nil {
		return err
	}
	return after(-1)
}
