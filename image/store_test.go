package image_test

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image"
	"github.com/sandboxd/sandbox/image/imagetest"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("unpacking layers with their owners and overlayfs whiteouts needs root")
	}
}

func openStore(t *testing.T, dir string, insecure ...string) *image.Store {
	t.Helper()
	s, err := image.Open(image.Config{Dir: dir, Insecure: insecure})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func readIn(t *testing.T, img image.Image, rel string) string {
	t.Helper()
	for i := len(img.Layers) - 1; i >= 0; i-- {
		b, err := os.ReadFile(filepath.Join(img.Layers[i], rel))
		if err == nil {
			return string(b)
		}
	}
	t.Fatalf("%s is in no layer of %s", rel, img.Digest)
	return ""
}

// checkProgress checks a pull's or an import's reports: from nothing to every layer, never backwards,
// and, where bytes are counted, from 0 to the layers' total with reports inside the busybox layer (its
// compressed megabyte is several steps of 256 KiB).
func checkProgress(t *testing.T, steps []image.Progress, layers int, bytes bool) {
	t.Helper()
	t.Logf("progress %+v", steps)
	if len(steps) < layers+1 {
		t.Fatalf("progress %+v: fewer reports than layers", steps)
	}
	first, last := steps[0], steps[len(steps)-1]
	total := last.TotalBytes
	if first != (image.Progress{TotalLayers: layers, TotalBytes: total}) || last != (image.Progress{Layers: layers, TotalLayers: layers, Bytes: total, TotalBytes: total}) {
		t.Fatalf("progress %+v: not from nothing to everything", steps)
	}
	if bytes != (total > 0) {
		t.Fatalf("progress %+v: bytes counted %v, want %v", steps, total > 0, bytes)
	}
	inside := 0
	for i := 1; i < len(steps); i++ {
		a, b := steps[i-1], steps[i]
		if b.Layers < a.Layers || b.Bytes < a.Bytes || b.TotalBytes != total || b.TotalLayers != layers {
			t.Fatalf("progress %+v: step %d goes back", steps, i)
		}
		if b.Layers == a.Layers {
			inside++
		}
	}
	if bytes && inside == 0 {
		t.Fatalf("progress %+v: no report while a layer was fetched", steps)
	}
}

func TestPullByTagAndDigest(t *testing.T) {
	needRoot(t)
	reg := imagetest.StartRegistry(t)
	tagged, pinned := reg.Push(t, "tools/busybox:1", imagetest.BusyboxImage(t, "hello"))
	s := openStore(t, t.TempDir(), reg.Host)
	ctx := context.Background()

	var steps []image.Progress
	img, err := s.Pull(ctx, tagged, func(p image.Progress) { steps = append(steps, p) })
	if err != nil {
		t.Fatal(err)
	}
	if got := readIn(t, img, "etc/greeting"); got != "hello\n" {
		t.Fatalf("greeting %q", got)
	}
	if img.Config.WorkingDir != "/srv" || !strings.Contains(strings.Join(img.Config.Env, " "), "GREETING=hello") {
		t.Fatalf("config %+v", img.Config)
	}
	checkProgress(t, steps, 2, true)
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(img.Layers[1], "srv/owned"), &st); err != nil || st.Uid != 1000 {
		t.Fatalf("srv/owned: uid %d, %v: owners are kept as the layer says", st.Uid, err)
	}
	byDigest, err := s.Pull(ctx, pinned, nil)
	if err != nil {
		t.Fatal(err)
	}
	if byDigest.Digest != img.Digest || strings.Join(byDigest.Layers, ",") != strings.Join(img.Layers, ",") {
		t.Fatalf("by digest %+v, by tag %+v", byDigest, img)
	}
	// Known locally: no registry needed any more.
	reg.Kill()
	for _, ref := range []string{tagged, pinned, img.Digest} {
		got, err := s.Ensure(ctx, ref)
		if err != nil || got.Digest != img.Digest {
			t.Fatalf("ensure %s: %+v, %v", ref, got, err)
		}
	}
}

func TestPullUnknownImage(t *testing.T) {
	needRoot(t)
	reg := imagetest.StartRegistry(t)
	s := openStore(t, t.TempDir(), reg.Host)
	for _, ref := range []string{reg.Host + "/no/such:1", reg.Host + "/no/such@sha256:" + strings.Repeat("a", 64)} {
		if _, err := s.Pull(context.Background(), ref, nil); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("pull %s: %v, want ErrNotFound", ref, err)
		}
	}
	for _, bad := range []string{"Not A Reference", "busybox:1"} {
		// A name without a registry is the store's own: there is no default registry to pull it from.
		if _, err := s.Pull(context.Background(), bad, nil); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Fatalf("pull %q: %v, want ErrInvalidRequest", bad, err)
		}
	}
	// Plain HTTP only to the registries named insecure.
	strict := openStore(t, t.TempDir())
	img := imagetest.BusyboxImage(t, "x")
	tagged, _ := reg.Push(t, "x:1", img)
	if _, err := strict.Pull(context.Background(), tagged, nil); err == nil {
		t.Fatal("a registry not named insecure was reached over plain HTTP")
	}
}

func TestConcurrentPullsFetchOnce(t *testing.T) {
	needRoot(t)
	reg := imagetest.StartRegistry(t)
	var blobs atomic.Int64
	proxy := imagetest.Proxy(t, reg.Host, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			blobs.Add(1)
		}
		next.ServeHTTP(w, r)
	})
	tagged, _ := reg.Push(t, "c/busybox:1", imagetest.BusyboxImage(t, "c"))
	ref := strings.Replace(tagged, reg.Host, proxy, 1)
	s := openStore(t, t.TempDir(), proxy)
	var wg sync.WaitGroup
	digests := make([]string, 8)
	for i := range digests {
		wg.Go(func() {
			img, err := s.Pull(context.Background(), ref, nil)
			if err != nil {
				t.Error(err)
			}
			digests[i] = img.Digest
		})
	}
	wg.Wait()
	for _, d := range digests {
		if d != digests[0] || d == "" {
			t.Fatalf("digests %v", digests)
		}
	}
	// The config and two layers, once.
	if n := blobs.Load(); n != 3 {
		t.Fatalf("%d blob fetches for 8 concurrent pulls of one image of 3 blobs", n)
	}
}

func TestRegistryDiesMidPull(t *testing.T) {
	needRoot(t)
	reg := imagetest.StartRegistry(t)
	big, err := random.Layer(8<<20, "application/vnd.oci.image.layer.v1.tar")
	if err != nil {
		t.Fatal(err)
	}
	img := imagetest.Image(t, v1.Config{}, imagetest.BusyboxLayer(t), big)
	bigDigest, _ := big.Digest()
	proxy := imagetest.Proxy(t, reg.Host, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if strings.HasSuffix(r.URL.Path, bigDigest.String()) && r.Method == http.MethodGet {
			// Half the blob, then the registry is gone.
			resp, err := http.Get("http://" + reg.Host + r.URL.Path)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			w.Header().Set("Content-Length", resp.Header.Get("Content-Length"))
			w.WriteHeader(resp.StatusCode)
			io.CopyN(w, resp.Body, 4<<20)
			reg.Kill()
			panic(http.ErrAbortHandler)
		}
		next.ServeHTTP(w, r)
	})
	tagged, _ := reg.Push(t, "big:1", img)
	ref := strings.Replace(tagged, reg.Host, proxy, 1)
	dir := t.TempDir()
	s := openStore(t, dir, proxy)
	if _, err := s.Pull(context.Background(), ref, nil); err == nil {
		t.Fatal("a pull from a registry that died mid-blob succeeded")
	}
	if _, err := s.Lookup(ref); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("after a failed pull: %v, want ErrNotFound", err)
	}
	assertEmpty(t, filepath.Join(dir, "tmp"))
	assertEmpty(t, filepath.Join(dir, "images"))
	// The complete layer it had is verified and whole; a prune takes it, as nothing has it.
	if _, err := s.Prune(); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, filepath.Join(dir, "layers"))
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("%s holds %v", dir, names)
	}
}

func TestReconcileAfterACrash(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	s := openStore(t, dir)
	lay := writeLayout(t, imagetest.BusyboxImage(t, "r"), "r")
	img, err := s.ImportLayout(context.Background(), lay, "local/r:1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// What a crash leaves: a half-unpacked layer in tmp/, and a layer gone from under a record.
	if err := os.MkdirAll(filepath.Join(dir, "tmp", "layer-123", "root", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(img.Layers[1]); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	assertEmpty(t, filepath.Join(dir, "tmp"))
	if _, err := s.Lookup("local/r:1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("an image missing a layer: %v, want ErrNotFound", err)
	}
	if _, err := s.ImportLayout(context.Background(), lay, "local/r:1", "", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Lookup("local/r:1"); err != nil || readIn(t, got, "etc/greeting") != "r\n" {
		t.Fatalf("after a new import: %+v, %v", got, err)
	}
}

func writeLayout(t *testing.T, img v1.Image, tag string) string {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestImportLayoutAndTarballs(t *testing.T) {
	needRoot(t)
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	img := imagetest.BusyboxImage(t, "imported")
	want, _ := img.Digest()

	var steps []image.Progress
	record := func(p image.Progress) { steps = append(steps, p) }
	got, err := s.ImportLayout(ctx, writeLayout(t, img, "v1"), "local/layout:v1", "", record)
	if err != nil || got.Digest != want.String() {
		t.Fatalf("layout: %+v, %v", got, err)
	}
	checkProgress(t, steps, 2, true)

	// docker save's format.
	saved := filepath.Join(t.TempDir(), "saved.tar")
	tag, _ := name.NewTag("local/saved:1", name.WithDefaultRegistry(""))
	if err := tarball.WriteToFile(saved, tag, img); err != nil {
		t.Fatal(err)
	}
	steps = nil
	got, err = s.ImportTarball(ctx, saved, "local/saved:1", "", record)
	if err != nil || readIn(t, got, "etc/greeting") != "imported\n" {
		t.Fatalf("docker-save tarball: %+v, %v", got, err)
	}
	checkProgress(t, steps, 2, false) // its layers are not compressed again to be counted

	// An oci-archive: the layout, tarred.
	archive := filepath.Join(t.TempDir(), "oci.tar")
	tarDir(t, writeLayout(t, img, "v2"), archive)
	got, err = s.ImportTarball(ctx, archive, "local/archive:v2", "v2", nil)
	if err != nil || got.Digest != want.String() {
		t.Fatalf("oci-archive: %+v, %v", got, err)
	}

	list, err := s.List()
	if err != nil || len(list) != 1 || len(list[0].Names) != 3 {
		t.Fatalf("list %+v, %v", list, err)
	}
	for _, bad := range []string{t.TempDir(), "/nonexistent"} {
		if _, err := s.ImportLayout(ctx, bad, "local/bad:1", "", nil); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Fatalf("layout %s: %v, want ErrInvalidRequest", bad, err)
		}
	}
	if _, err := s.ImportLayout(ctx, writeLayout(t, img, "v1"), "local/x@"+want.String(), "", nil); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("an import named by a digest: %v", err)
	}
}

func tarDir(t *testing.T, dir, out string) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWhiteouts stacks two layers with overlayfs as a sandbox's root does: a whiteout hides a file
// of the layer below, an opaque directory all of the directory below.
func TestWhiteouts(t *testing.T) {
	needRoot(t)
	s := openStore(t, t.TempDir())
	img := imagetest.Image(t, v1.Config{},
		imagetest.Layer(t,
			imagetest.Entry{Name: "a/", Type: tar.TypeDir}, imagetest.Entry{Name: "a/gone", Body: "x"}, imagetest.Entry{Name: "a/kept", Body: "k"},
			imagetest.Entry{Name: "b/", Type: tar.TypeDir}, imagetest.Entry{Name: "b/old", Body: "o"},
			imagetest.Entry{Name: "c/", Type: tar.TypeDir}, imagetest.Entry{Name: "c/sub/", Type: tar.TypeDir}, imagetest.Entry{Name: "c/sub/f", Body: "f"}),
		imagetest.Layer(t,
			imagetest.Entry{Name: "a/.wh.gone"},
			imagetest.Entry{Name: "b/", Type: tar.TypeDir}, imagetest.Entry{Name: "b/.wh..wh..opq"}, imagetest.Entry{Name: "b/new", Body: "n"},
			imagetest.Entry{Name: ".wh.c"}),
	)
	got, err := s.ImportLayout(context.Background(), writeLayout(t, img, "w"), "local/w:1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	merged := t.TempDir()
	opts := "lowerdir=" + got.Layers[1] + ":" + got.Layers[0]
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_RDONLY, opts); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(merged, unix.MNT_DETACH)
	var tree []string
	filepath.WalkDir(merged, func(p string, d os.DirEntry, err error) error {
		if p != merged {
			rel, _ := filepath.Rel(merged, p)
			tree = append(tree, rel)
		}
		return err
	})
	if got, want := strings.Join(tree, " "), "a a/kept b b/new"; got != want {
		t.Fatalf("merged tree %q, want %q", got, want)
	}
}

// TestHostileLayers unpacks layers that try to write outside their directory.
func TestHostileLayers(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := image.Open(image.Config{Dir: filepath.Join(base, "store"), MaxLayerBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	up := "../../../outside/"
	cases := map[string][]imagetest.Entry{
		"dotdot":   {{Name: up + "dotdot", Body: "x"}},
		"absolute": {{Name: outside + "/absolute", Body: "x"}},
		"symlink then file through it": {
			{Name: "link", Type: tar.TypeSymlink, Linkname: outside},
			{Name: "link/through", Body: "x"},
		},
		"relative symlink then file": {
			{Name: "rel", Type: tar.TypeSymlink, Linkname: up},
			{Name: "rel/through-rel", Body: "x"},
		},
		"hard link to outside": {{Name: "hard", Type: tar.TypeLink, Linkname: outside + "/target"}},
		"hard link through a symlink": {
			{Name: "link", Type: tar.TypeSymlink, Linkname: outside},
			{Name: "hard", Type: tar.TypeLink, Linkname: "link/target"},
		},
		"whiteout through a symlink": {
			{Name: "link", Type: tar.TypeSymlink, Linkname: outside},
			{Name: "link/.wh.target"},
		},
		"opaque through a symlink": {
			{Name: "link", Type: tar.TypeSymlink, Linkname: outside},
			{Name: "link/.wh..wh..opq"},
		},
		"directory then symlink then file": {
			{Name: "d/", Type: tar.TypeDir},
			{Name: "d", Type: tar.TypeSymlink, Linkname: outside},
			{Name: "d/through", Body: "x"},
		},
		"whiteout of dot-dot": {{Name: "a/.wh..."}},
		"device nodes": {
			{Name: "sda", Type: tar.TypeBlock, Devmajor: 8, Mode: 0o666},
			{Name: "mem", Type: tar.TypeChar, Devmajor: 1, Mode: 0o666},
		},
	}
	if err := os.WriteFile(filepath.Join(outside, "target"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	for what, entries := range cases {
		img := imagetest.Image(t, v1.Config{}, imagetest.Layer(t, entries...))
		got, err := s.ImportLayout(context.Background(), writeLayout(t, img, "h"), "local/hostile:1", "", nil)
		if err == nil {
			filepath.WalkDir(got.Layers[0], func(p string, d os.DirEntry, err error) error {
				if err != nil {
					return err
				}
				info, _ := d.Info()
				if info.Mode()&(os.ModeDevice|os.ModeCharDevice) != 0 {
					t.Errorf("%s: a device node %s was made", what, p)
				}
				return nil
			})
		}
		ents, _ := os.ReadDir(outside)
		if len(ents) != 1 {
			t.Fatalf("%s: the directory outside the store holds %d entries", what, len(ents))
		}
		if b, _ := os.ReadFile(filepath.Join(outside, "target")); string(b) != "host" {
			t.Fatalf("%s: a file outside was changed: %q", what, b)
		}
	}
	// Of a layer's xattrs only user.* ones are kept: an overlay xattr would redirect the sandbox's view.
	img := imagetest.Image(t, v1.Config{}, imagetest.Layer(t,
		imagetest.Entry{Name: "x", Body: "x", Mode: 0o4755, Xattrs: map[string]string{"trusted.overlay.redirect": "/etc", "user.note": "kept"}}))
	got, err := s.ImportLayout(context.Background(), writeLayout(t, img, "x"), "local/xattr:1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	x := filepath.Join(got.Layers[0], "x")
	if _, err := unix.Lgetxattr(x, "trusted.overlay.redirect", make([]byte, 64)); err == nil {
		t.Fatal("a layer's overlay xattr was kept")
	}
	if n, err := unix.Lgetxattr(x, "user.note", make([]byte, 64)); err != nil || n != 4 {
		t.Fatalf("user.note: %d, %v", n, err)
	}
	if st, err := os.Stat(x); err != nil || st.Mode() != 0o755|os.ModeSetuid {
		t.Fatalf("mode %v, %v", st.Mode(), err)
	}
	// A sparse file of a TiB claims no data in the stream, but would fill the disk unpacked.
	sparse := sparseLayer(t, 1<<40)
	img, err = mutate.AppendLayers(empty.Image, sparse)
	if err != nil {
		t.Fatal(err)
	}
	img = withHostPlatform(t, img)
	if _, err := s.ImportLayout(context.Background(), writeLayout(t, img, "s"), "local/sparse:1", "", nil); !errors.Is(err, image.ErrLayerTooLarge) {
		t.Fatalf("a TiB sparse file: %v, want ErrLayerTooLarge", err)
	}
	assertEmpty(t, filepath.Join(base, "store", "tmp"))
}

func withHostPlatform(t *testing.T, img v1.Image) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// sparseLayer is a layer of one GNU sparse file of size bytes, all hole but its last byte.
func sparseLayer(t *testing.T, size int64) v1.Layer {
	t.Helper()
	// archive/tar writes no sparse files; a PAX 1.0 sparse map is written by hand: the map, then the data.
	raw := sparseTar(t, size)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(string(raw))), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestRemoveRefusedWhileHeld(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	s := openStore(t, dir)
	img, err := s.ImportLayout(context.Background(), writeLayout(t, imagetest.BusyboxImage(t, "h"), "h"), "local/held:1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(img.Digest, "sandbox-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("local/held:1"); !errors.Is(err, image.ErrInUse) {
		t.Fatalf("remove of a held image: %v, want ErrInUse", err)
	}
	if n, err := s.Prune(); err != nil || n != 0 {
		t.Fatalf("prune removed %d layers of a held image: %v", n, err)
	}
	if err := s.Release(img.Digest, "sandbox-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("local/held:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(img.Digest, "sandbox-2"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("hold of a removed image: %v, want ErrNotFound", err)
	}
	if n, err := s.Prune(); err != nil || n != 2 {
		t.Fatalf("prune: %d layers, %v", n, err)
	}
	for _, d := range []string{"layers", "images", "users", "tmp"} {
		assertEmpty(t, filepath.Join(dir, d))
	}
}

// TestTwoStoresSeeEachOthersChanges runs two Stores on one directory, as two processes would: each keeps
// the names and records it has read, and must see the other's changes at its next look, never an
// image of a name's old digest or one removed. A hold moves from one holder to another in one step, and
// keeps the image from a Remove of either Store throughout.
func TestTwoStoresSeeEachOthersChanges(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	s1, s2 := openStore(t, dir), openStore(t, dir)
	ctx := context.Background()
	a, err := s1.ImportLayout(ctx, writeLayout(t, imagetest.BusyboxImage(t, "a"), "a"), "local/moving:1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s2.Lookup("local/moving:1"); err != nil || got.Digest != a.Digest {
		t.Fatalf("the second store's lookup: %v %v, want %s", got.Digest, err, a.Digest)
	}
	b, err := s1.ImportLayout(ctx, writeLayout(t, imagetest.BusyboxImage(t, "b"), "b"), "local/moving:1", "", nil)
	if err != nil || b.Digest == a.Digest {
		t.Fatalf("second import: %v %v", b.Digest, err)
	}
	if got, err := s2.Lookup("local/moving:1"); err != nil || got.Digest != b.Digest {
		t.Fatalf("the second store's lookup after the tag moved: %v %v, want %s", got.Digest, err, b.Digest)
	}
	if got, err := s2.Lookup(a.Digest); err != nil || got.Digest != a.Digest || readIn(t, got, "etc/greeting") != "a\n" {
		t.Fatalf("the old digest from the second store: %v %v", got.Digest, err)
	}
	if err := s1.Remove(a.Digest); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Lookup(a.Digest); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("lookup of a digest the other store removed: %v, want ErrNotFound", err)
	}
	if _, err := s2.Acquire(a.Digest, "sandbox-a"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("hold of a digest the other store removed: %v, want ErrNotFound", err)
	}
	// A copy handed out is the caller's: changing it changes no later lookup.
	got, err := s2.Lookup("local/moving:1")
	if err != nil {
		t.Fatal(err)
	}
	got.Layers[0], got.Config.Env = "elsewhere", append(got.Config.Env[:0], "X=1")
	if again, err := s2.Lookup(b.Digest); err != nil || again.Layers[0] == "elsewhere" || slices.Contains(again.Config.Env, "X=1") {
		t.Fatalf("a lookup after its caller changed an earlier one: %+v %v", again, err)
	}

	if _, err := s2.Acquire(b.Digest, "pool-1"); err != nil {
		t.Fatal(err)
	}
	if err := s1.Transfer(b.Digest, "pool-1", "sandbox-1"); err != nil {
		t.Fatal(err)
	}
	if users, err := s2.Users(b.Digest); err != nil || len(users) != 1 || users[0] != "sandbox-1" {
		t.Fatalf("holders after a transfer: %v %v", users, err)
	}
	if err := s1.Transfer(b.Digest, "pool-1", "sandbox-2"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("transfer of a hold that is gone: %v, want ErrNotFound", err)
	}
	for _, s := range []*image.Store{s1, s2} {
		if err := s.Remove("local/moving:1"); !errors.Is(err, image.ErrInUse) {
			t.Fatalf("remove of an image whose hold was transferred: %v, want ErrInUse", err)
		}
	}
	if err := s2.Release(b.Digest, "sandbox-1"); err != nil {
		t.Fatal(err)
	}
	if err := s2.Remove("local/moving:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Lookup("local/moving:1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("lookup of a name the other store removed: %v, want ErrNotFound", err)
	}
}
