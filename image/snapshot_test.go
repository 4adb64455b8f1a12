package image_test

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image"
	"github.com/sandboxd/sandbox/image/imagetest"
)

// baseWithTree imports an image of a small tree to snapshot over.
func baseWithTree(t *testing.T, s *image.Store) image.Image {
	t.Helper()
	img := imagetest.Image(t, v1.Config{Env: []string{"A=1"}, WorkingDir: "/work", User: "0:0"},
		imagetest.Layer(t,
			imagetest.Entry{Name: "a/", Type: tar.TypeDir}, imagetest.Entry{Name: "a/gone", Body: "x"}, imagetest.Entry{Name: "a/kept", Body: "k"},
			imagetest.Entry{Name: "b/", Type: tar.TypeDir}, imagetest.Entry{Name: "b/old", Body: "o"},
			imagetest.Entry{Name: "c/", Type: tar.TypeDir}, imagetest.Entry{Name: "c/f", Body: "f"}))
	got, err := s.ImportLayout(context.Background(), writeLayout(t, img, "b"), "local/base:1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// overlayOf mounts layers (bottom first) under upper, writable when upper is not "", and returns
// the merged directory, unmounted when the test ends.
func overlayOf(t *testing.T, layers []string, upper string) string {
	t.Helper()
	merged := t.TempDir()
	lower := make([]string, len(layers))
	for i, l := range layers {
		lower[len(layers)-1-i] = l
	}
	opts, flags := "lowerdir="+strings.Join(lower, ":"), uintptr(unix.MS_RDONLY)
	if upper != "" {
		work := filepath.Join(filepath.Dir(upper), "work")
		os.Mkdir(work, 0o755)
		opts, flags = opts+",upperdir="+upper+",workdir="+work, 0
	}
	if err := unix.Mount("overlay", merged, "overlay", flags, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(merged, unix.MNT_DETACH) })
	return merged
}

func tree(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return err
	})
	return strings.Join(out, " ")
}

// TestSnapshotKeepsChanges: a file written, a file deleted (a whiteout), a directory replaced (an
// opaque one) and a directory deleted all show in the snapshot's tree as in the sandbox's.
func TestSnapshotKeepsChanges(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	s := openStore(t, dir)
	base := baseWithTree(t, s)
	upper := filepath.Join(t.TempDir(), "upper")
	os.Mkdir(upper, 0o755)
	m := overlayOf(t, base.Layers, upper)
	must(t, os.Remove(filepath.Join(m, "a/gone")))
	must(t, os.RemoveAll(filepath.Join(m, "b")))
	must(t, os.Mkdir(filepath.Join(m, "b"), 0o755))
	must(t, os.WriteFile(filepath.Join(m, "b/new"), []byte("n"), 0o644))
	must(t, os.RemoveAll(filepath.Join(m, "c")))
	must(t, os.WriteFile(filepath.Join(m, "written"), []byte("w"), 0o644))
	must(t, unix.Setxattr(filepath.Join(m, "written"), "user.note", []byte("kept"), 0))
	want := tree(t, m)
	must(t, unix.Unmount(m, unix.MNT_DETACH))

	sn, err := s.SnapshotOf(context.Background(), image.Capture{Upper: upper, IDSize: 65536, Name: "tpl",
		Origin: image.Origin{Sandbox: "sbx_1", Generation: 1, Base: base.Digest}})
	if err != nil {
		t.Fatal(err)
	}
	if sn.Layers != 2 || len(sn.Templates) != 1 || sn.Templates[0] != "tpl@1" {
		t.Fatalf("%+v", sn)
	}
	img, err := s.Lookup(sn.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if img.Config.WorkingDir != "/work" || img.Config.User != "0:0" || len(img.Config.Env) != 1 {
		t.Fatalf("config %+v, want the base's", img.Config)
	}
	got := overlayOf(t, img.Layers, "")
	if g := tree(t, got); g != want {
		t.Fatalf("snapshot's tree %q, the sandbox's %q", g, want)
	}
	if b, _ := os.ReadFile(filepath.Join(got, "b/new")); string(b) != "n" {
		t.Fatalf("b/new: %q", b)
	}
	buf := make([]byte, 16)
	if n, err := unix.Getxattr(filepath.Join(got, "written"), "user.note", buf); err != nil || string(buf[:n]) != "kept" {
		t.Fatalf("user.note: %q, %v", buf[:n], err)
	}
	// Reopened, the store still has it, by digest and by template.
	s.Close()
	s = openStore(t, dir)
	for _, ref := range []string{sn.Digest, "tpl", "tpl@1", "tpl@" + sn.Digest} {
		if d, err := s.ResolveTemplate(ref); err != nil || d != sn.Digest {
			t.Fatalf("%s: %s, %v", ref, d, err)
		}
	}
	for _, ref := range []string{"tpl@2", "other", "tpl@" + base.Digest} {
		if _, err := s.ResolveTemplate(ref); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("%s: %v, want ErrNotFound", ref, err)
		}
	}
	for _, ref := range []string{"Bad", "tpl@0", "tpl@x", "tpl@01", "../x"} {
		if _, err := s.ResolveTemplate(ref); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Fatalf("%s: %v, want ErrInvalidRequest", ref, err)
		}
	}
	// A second version is the name's newest; the first stays pinned.
	sn2, err := s.SnapshotOf(context.Background(), image.Capture{Upper: upper, IDSize: 65536, Name: "tpl",
		Origin: image.Origin{Sandbox: "sbx_1", Generation: 1, Base: base.Digest}})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := s.ResolveTemplate("tpl"); d != sn2.Digest {
		t.Fatalf("tpl is %s, want the newest %s", d, sn2.Digest)
	}
	if d, _ := s.ResolveTemplate("tpl@1"); d != sn.Digest {
		t.Fatalf("tpl@1 is %s, want %s", d, sn.Digest)
	}
	// Held, neither the snapshot nor its template can go; released, both can.
	if _, err := s.Acquire(sn.Digest, "sbx-x-g1"); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveSnapshot(sn.Digest); !errors.Is(err, image.ErrInUse) {
		t.Fatalf("remove held: %v", err)
	}
	if err := s.RemoveTemplate("tpl"); !errors.Is(err, image.ErrInUse) {
		t.Fatalf("remove held template: %v", err)
	}
	if err := s.RemoveTemplate("tpl@2"); err != nil {
		t.Fatal(err)
	}
	must(t, s.Release(sn.Digest, "sbx-x-g1"))
	if err := s.RemoveTemplate("tpl"); err != nil {
		t.Fatal(err)
	}
	if list, err := s.Snapshots(); err != nil || len(list) != 0 {
		t.Fatalf("snapshots left: %+v, %v", list, err)
	}
	if n, err := s.Prune(); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v; want the one layer of the snapshots", n, err)
	}
	if _, err := s.Lookup(base.Digest); err != nil {
		t.Fatalf("the base went too: %v", err)
	}
	// An image remove of a snapshot's digest takes its template versions with it.
	sn3, err := s.SnapshotOf(context.Background(), image.Capture{Upper: upper, IDSize: 65536, Name: "other",
		Origin: image.Origin{Sandbox: "sbx_1", Generation: 1, Base: base.Digest}})
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Remove(sn3.Digest))
	if _, err := s.ResolveTemplate("other"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("other after its snapshot's removal: %v", err)
	}
}

// TestHostileUpper: an upper directory that holds device nodes, symlinks out, overlay xattrs of its
// own choosing or a huge sparse file makes a snapshot that holds none of them as a way out, or none.
func TestHostileUpper(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	s := openStore(t, dir)
	base := baseWithTree(t, s)
	upper := filepath.Join(t.TempDir(), "upper")
	must(t, os.MkdirAll(filepath.Join(upper, "d"), 0o755))
	must(t, unix.Mknod(filepath.Join(upper, "mem"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 1))))
	must(t, unix.Mknod(filepath.Join(upper, "sda"), unix.S_IFBLK|0o666, int(unix.Mkdev(8, 0))))
	must(t, os.Symlink("/etc", filepath.Join(upper, "out")))
	must(t, os.Symlink("../../../../../../etc/shadow", filepath.Join(upper, "d/shadow")))
	must(t, os.WriteFile(filepath.Join(upper, "d/f"), []byte("f"), 0o4755))
	must(t, unix.Setxattr(filepath.Join(upper, "d"), "trusted.overlay.upper", []byte("x"), 0))
	must(t, unix.Setxattr(filepath.Join(upper, "d/f"), "trusted.evil", []byte("x"), 0))
	cap := func() (image.Snapshot, error) {
		return s.SnapshotOf(context.Background(), image.Capture{Upper: upper, IDBase: 0, IDSize: 65536,
			Origin: image.Origin{Sandbox: "sbx_h", Generation: 1, Base: base.Digest}})
	}
	sn, err := cap()
	if err != nil {
		t.Fatal(err)
	}
	img, err := s.Lookup(sn.Digest)
	if err != nil {
		t.Fatal(err)
	}
	top := img.Layers[len(img.Layers)-1]
	if g := tree(t, top); g != "d d/f d/shadow out" {
		t.Fatalf("the new layer holds %q", g)
	}
	for _, l := range []string{"out", "d/shadow"} {
		if st, err := os.Lstat(filepath.Join(top, l)); err != nil || st.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("%s is not a symlink in the layer: %v", l, err)
		}
	}
	buf := make([]byte, 64)
	if _, err := unix.Lgetxattr(filepath.Join(top, "d"), "trusted.overlay.upper", buf); err == nil {
		t.Fatal("an overlay xattr of the sandbox's reached the layer")
	}
	if _, err := unix.Lgetxattr(filepath.Join(top, "d/f"), "trusted.evil", buf); err == nil {
		t.Fatal("a trusted xattr of the sandbox's reached the layer")
	}
	// Owners outside the range are nobody's.
	must(t, os.Lchown(filepath.Join(upper, "d/f"), 5, 5))
	sn, err = s.SnapshotOf(context.Background(), image.Capture{Upper: upper, IDBase: 100, IDSize: 10,
		Origin: image.Origin{Sandbox: "sbx_h", Generation: 1, Base: base.Digest}})
	if err != nil {
		t.Fatal(err)
	}
	img, _ = s.Lookup(sn.Digest)
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(img.Layers[len(img.Layers)-1], "d/f"), &st))
	if st.Uid != 65534 {
		t.Fatalf("a file of host uid 5 outside the range is uid %d in the layer", st.Uid)
	}
	// A redirect or a metacopy is refused; so is a sparse file past the bound.
	must(t, unix.Setxattr(filepath.Join(upper, "d"), "trusted.overlay.redirect", []byte("/etc"), 0))
	if _, err := cap(); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("a redirect: %v, want ErrInvalidRequest", err)
	}
	must(t, unix.Removexattr(filepath.Join(upper, "d"), "trusted.overlay.redirect"))
	f, err := os.Create(filepath.Join(upper, "sparse"))
	must(t, err)
	must(t, f.Truncate(1<<40))
	f.Close()
	if _, err := s.SnapshotOf(context.Background(), image.Capture{Upper: upper, IDSize: 65536, MaxBytes: 64 << 20,
		Origin: image.Origin{Sandbox: "sbx_h", Generation: 1, Base: base.Digest}}); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("a 1 TiB sparse file: %v, want ErrInvalidRequest", err)
	}
	assertEmpty(t, filepath.Join(dir, "tmp"))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
