package oci_test

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

// imageProvider is a provider on runc (images run on runc only, whatever the tests' runtime:
// TestImageOnGVisorRefused says what gVisor does) that pulls from reg over plain HTTP.
func imageProvider(t *testing.T, dir string, reg *imagetest.Registry) *oci.Provider {
	t.Helper()
	cfg := testConfig(t, dir)
	cfg.Runtime = "runc"
	cfg.InsecureRegistries = []string{reg.Host}
	return newProviderWith(t, cfg)
}

// TestImageOnGVisorRefused: a provider on gVisor says it runs no images, and refuses a spec.image
// before anything is recorded.
func TestImageOnGVisorRefused(t *testing.T) {
	cfg := testConfig(t, testenv.StateDir(t))
	cfg.Runtime = gvisorRuntime(t)
	p := newProviderWith(t, cfg)
	m, err := p.Manifest(ctxFor(t))
	if err != nil || m.RuntimeClass != "gvisor" || m.Capabilities.ImageReference || m.Capabilities.FilesystemSnapshot || m.Capabilities.TemplateReference {
		t.Fatalf("manifest %+v, %v", m, err)
	}
	if err := p.ValidateSpec(sandbox.Spec{ClientRequestID: "t", Image: "127.0.0.1:1/x:1"}); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Fatalf("spec.image on gVisor: %v", err)
	}
	if _, err := p.Images(ctxFor(t)); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Fatalf("images on gVisor: %v", err)
	}
	if err := p.ValidateSpec(sandbox.Spec{ClientRequestID: "t", Template: "tools"}); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Fatalf("spec.template on gVisor: %v", err)
	}
	if _, err := p.Snapshots(ctxFor(t)); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Fatalf("snapshots on gVisor: %v", err)
	}
}

// fromImage allocates a sandbox of image and returns it with its observation.
func fromImage(t *testing.T, p *oci.Provider, image string) (sandbox.Ref, sandbox.Observation) {
	t.Helper()
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	spec := sandbox.Spec{ClientRequestID: "t", Image: image}
	if err := p.ValidateSpec(spec); err != nil {
		t.Fatalf("validate: %v", err)
	}
	obs, err := p.Allocate(ctxFor(t), ref, spec)
	if err != nil {
		t.Fatalf("allocate: %v", err)
	}
	return ref, obs
}

func TestImageSandbox(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, pinned := reg.Push(t, "tools/busybox:1", imagetest.BusyboxImage(t, "from the image"))
	p := imageProvider(t, testenv.StateDir(t), reg)
	m, err := p.Manifest(context.Background())
	if err != nil || !m.Capabilities.ImageReference {
		t.Fatalf("manifest %+v, %v", m, err)
	}
	var digests []string
	for _, image := range []string{tagged, pinned} {
		ref, obs := fromImage(t, p, image)
		if obs.State != sandbox.ObservedReady {
			t.Fatalf("%s: %+v", image, obs)
		}
		var info struct{ Reference, Digest string }
		if err := json.Unmarshal(obs.Extensions[oci.ImageExtension], &info); err != nil || info.Reference != image {
			t.Fatalf("%s: providerExtensions %s, %v", image, obs.Extensions[oci.ImageExtension], err)
		}
		digests = append(digests, info.Digest)

		// The image's files, Env and working directory; the agent is PID 1; the host's /usr is not there.
		res := sh(t, p, ref, `cat /etc/greeting; echo "$GREETING"; pwd; cat /proc/1/cmdline | tr '\0' ' '; echo; ls /usr 2>&1; stat -c '%u %g' /srv/owned; id -u`)
		want := "from the image\nfrom the image\n/srv\n/.sandboxd/agent"
		if code(res) != 0 || !strings.HasPrefix(res.Stdout, want) {
			t.Fatalf("%s: %+v", image, res)
		}
		if !strings.Contains(res.Stdout, "No such file or directory") || !strings.HasSuffix(res.Stdout, "1000 1000\n0\n") {
			t.Fatalf("%s: the host's /usr shows, or the image's owners are not the sandbox's: %q", image, res.Stdout)
		}
		// The file API inside the image's root, from its working directory.
		if err := p.WriteFile(ctxFor(t), ref, "a.txt", []byte("written\n")); err != nil {
			t.Fatal(err)
		}
		if res := sh(t, p, ref, "cat /srv/a.txt; echo more >> /etc/greeting; stat -c %u /srv/a.txt"); res.Stdout != "written\n0\n" {
			t.Fatalf("%+v", res)
		}
		if got, err := p.ReadFile(ctxFor(t), ref, "/etc/greeting"); err != nil || string(got) != "from the image\nmore\n" {
			t.Fatalf("read /etc/greeting: %q, %v", got, err)
		}
		if err := p.Release(ctxFor(t), ref); err != nil {
			t.Fatal(err)
		}
	}
	if digests[0] != digests[1] || !strings.HasSuffix(pinned, digests[0]) {
		t.Fatalf("by tag %s, by digest %s (%s)", digests[0], digests[1], pinned)
	}
	// A new sandbox of the image sees none of the first one's writes.
	ref, _ := fromImage(t, p, tagged)
	if res := sh(t, p, ref, "cat /etc/greeting; ls /srv"); res.Stdout != "from the image\nowned\n" {
		t.Fatalf("%+v", res)
	}
}

func TestUnknownImage(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	dir := testenv.StateDir(t)
	p := imageProvider(t, dir, reg)
	_, obs := fromImage(t, p, reg.Host+"/no/such:1")
	if obs.State != sandbox.ObservedFailed || obs.Reason != "image_not_found" {
		t.Fatalf("%+v", obs)
	}
	if err := p.ValidateSpec(sandbox.Spec{ClientRequestID: "t", Image: "Not A Reference"}); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("a malformed reference: %v", err)
	}
	reg.Kill()
	_, obs = fromImage(t, p, reg.Host+"/gone:1")
	if obs.State != sandbox.ObservedFailed || obs.Reason != "image_pull_failed" {
		t.Fatalf("a dead registry: %+v", obs)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "sandboxes")); len(ents) != 0 {
		t.Fatalf("%d sandbox directories after failed pulls", len(ents))
	}
}

// TestImageNoLeaks: sandboxes from an image come and go, then the image is removed and pruned:
// nothing is left of them, mounts, loop devices, processes, directories or layers.
func TestImageNoLeaks(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, _ := reg.Push(t, "leak:1", imagetest.BusyboxImage(t, "leak"))
	dir := testenv.StateDir(t)
	p := imageProvider(t, dir, reg)
	before := measure(t, dir)
	for i := 0; i < 100; i++ {
		ref, obs := fromImage(t, p, tagged)
		if obs.State != sandbox.ObservedReady {
			t.Fatalf("cycle %d: %+v", i, obs)
		}
		if r := sh(t, p, ref, "echo x > /x; sleep 100 & cat /x"); r.Stdout != "x\n" {
			t.Fatalf("cycle %d: %+v", i, r)
		}
		endCycle(t, p, ref, i, i%5 == 0)
	}
	if after := measure(t, dir); after != before {
		t.Fatalf("100 cycles left something behind: before %+v, after %+v", before, after)
	}
	if err := p.ImageStore().Remove(tagged); err != nil {
		t.Fatal(err)
	}
	if n, err := p.ImageStore().Prune(); err != nil || n != 2 {
		t.Fatalf("prune: %d layers, %v", n, err)
	}
	for _, d := range []string{"layers", "images", "users", "tmp"} {
		if ents, _ := os.ReadDir(filepath.Join(dir, "images", d)); len(ents) != 0 {
			t.Fatalf("images/%s holds %d entries", d, len(ents))
		}
	}
}

// TestImageHeldWhileUsed: an image a sandbox runs on cannot be removed, even by a provider started
// anew on the same directory; once released, it can.
func TestImageHeldWhileUsed(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, _ := reg.Push(t, "held:1", imagetest.BusyboxImage(t, "held"))
	p := imageProvider(t, testenv.StateDir(t), reg)
	ref, obs := fromImage(t, p, tagged)
	if obs.State != sandbox.ObservedReady {
		t.Fatalf("%+v", obs)
	}
	if err := p.ImageStore().Remove(tagged); err == nil {
		t.Fatal("an image in use was removed")
	}
	if err := p.Release(ctxFor(t), ref); err != nil {
		t.Fatal(err)
	}
	if err := p.ImageStore().Remove(tagged); err != nil {
		t.Fatal(err)
	}
}

// TestImageUser: the image's user runs the commands, named in its own /etc/passwd; the agent stays root.
func TestImageUser(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	img := imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin"}, User: "app"}, imagetest.BusyboxLayer(t), imagetest.Layer(t,
		imagetest.Entry{Name: "etc/passwd", Body: "root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n"},
		imagetest.Entry{Name: "etc/group", Body: "root:x:0:\napp:x:1001:\nextra:x:1002:app\n"},
		imagetest.Entry{Name: "home/", Type: tar.TypeDir},
		imagetest.Entry{Name: "home/app/", Type: tar.TypeDir, UID: 1000, GID: 1001},
	))
	tagged, _ := reg.Push(t, "user:1", img)
	p := imageProvider(t, testenv.StateDir(t), reg)
	ref, obs := fromImage(t, p, tagged)
	if obs.State != sandbox.ObservedReady {
		t.Fatalf("%+v", obs)
	}
	res := sh(t, p, ref, `id -u; id -g; id -G; echo $HOME; grep '^Uid' /proc/1/status | cut -f2; touch /etc/x 2>/dev/null || echo refused`)
	if res.Stdout != "1000\n1001\n1001 1002\n/home/app\n0\nrefused\n" {
		t.Fatalf("%+v", res)
	}
	// A user the image does not know fails the sandbox's start, not the provider.
	bad := imagetest.Image(t, v1.Config{User: "nobody-here"}, imagetest.BusyboxLayer(t))
	tagged, _ = reg.Push(t, "baduser:1", bad)
	ref2 := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if _, err := p.Allocate(ctxFor(t), ref2, sandbox.Spec{ClientRequestID: "t", Image: tagged}); err == nil {
		t.Fatal("a sandbox whose image's user is unknown started")
	}
}

// TestImageMountinfoNamesNoHostPath: the root of a sandbox from an image shows no path of the host's
// in the sandbox's view of its mounts (its layers are descriptors of detached mounts).
func TestImageMountinfoNamesNoHostPath(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, _ := reg.Push(t, "mi:1", imagetest.BusyboxImage(t, "mi"))
	dir := testenv.StateDir(t)
	p := imageProvider(t, dir, reg)
	ref, obs := fromImage(t, p, tagged)
	if obs.State != sandbox.ObservedReady {
		t.Fatalf("%+v", obs)
	}
	res := sh(t, p, ref, "cat /proc/self/mountinfo /proc/self/mounts /proc/1/mountinfo")
	if code(res) != 0 || !strings.Contains(res.Stdout, "overlay") {
		t.Fatalf("%+v", res)
	}
	if strings.Contains(res.Stdout, dir) {
		t.Fatalf("the state directory %s shows in the sandbox's mounts:\n%s", dir, res.Stdout)
	}
	// The resolver is the daemon's, as on the shared root.
	want, err := os.ReadFile(filepath.Join(dir, "root", "etc", "resolv.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if res := sh(t, p, ref, "cat /etc/resolv.conf"); res.Stdout != string(want) {
		t.Fatalf("resolv.conf %q, the shared root's %q", res.Stdout, want)
	}
}

// TestImageHostileLinks: an image's symlinks are the image's: the daemon reads the image's users and
// makes its working directory without following one out of the image's root, onto the host's files.
func TestImageHostileLinks(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	hostDir := t.TempDir()
	// Its passwd is the host's, through an absolute link: the host's has root, the image has none.
	passwd := imagetest.Image(t, v1.Config{User: "root"}, imagetest.BusyboxLayer(t), imagetest.Layer(t,
		imagetest.Entry{Name: "etc/passwd", Type: tar.TypeSymlink, Linkname: "/etc/passwd"}))
	// Its working directory is below a link to a host directory.
	workdir := imagetest.Image(t, v1.Config{WorkingDir: "/srv/made"}, imagetest.BusyboxLayer(t), imagetest.Layer(t,
		imagetest.Entry{Name: "srv", Type: tar.TypeSymlink, Linkname: hostDir}))
	p := imageProvider(t, testenv.StateDir(t), reg)
	for what, img := range map[string]v1.Image{"passwd": passwd, "workdir": workdir} {
		tagged, _ := reg.Push(t, "hostile/"+what+":1", img)
		ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
		obs, err := p.Allocate(ctxFor(t), ref, sandbox.Spec{ClientRequestID: "t", Image: tagged})
		t.Logf("%s: %v", what, err)
		if err == nil && obs.State == sandbox.ObservedReady {
			t.Fatalf("%s: a sandbox whose image links out of its root started", what)
		}
	}
	if ents, _ := os.ReadDir(hostDir); len(ents) != 0 {
		t.Fatalf("the host directory the image linked to holds %d entries", len(ents))
	}
}
