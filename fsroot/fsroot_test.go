package fsroot

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

// jail is a root directory beside an "outside" directory holding a secret, with symlinks from the root
// to the outside planted at several depths.
type jail struct {
	root    string
	outside string
	r       *Root
}

const secret = "outside secret"

func newJail(t testing.TB) *jail {
	t.Helper()
	base := t.TempDir()
	j := &jail{root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	must(t, os.MkdirAll(filepath.Join(j.root, "a", "b"), 0o755))
	must(t, os.MkdirAll(filepath.Join(j.outside, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(j.outside, "secret"), []byte(secret), 0o644))
	must(t, os.WriteFile(filepath.Join(j.outside, "sub", "secret"), []byte(secret), 0o644))
	must(t, os.WriteFile(filepath.Join(j.root, "a", "inside.txt"), []byte("inside"), 0o644))
	links := map[string]string{
		"absdir":       j.outside,
		"absfile":      filepath.Join(j.outside, "secret"),
		"reldir":       "../outside",
		"relfile":      "../outside/secret",
		"a/b/deep":     "../../../../../../../../outside",
		"a/b/deepfile": "../../../outside/sub/secret",
		"a/up":         "..",
		"a/self":       "/a",
		"loop":         "loop",
		"dangling":     "/nowhere/at/all",
		"etcpasswd":    "/etc/passwd",
	}
	for name, target := range links {
		must(t, os.Symlink(target, filepath.Join(j.root, name)))
	}
	r, err := Open(j.root, "/")
	must(t, err)
	t.Cleanup(func() { r.Close() })
	j.r = r
	return j
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// snapshot records every name and file content under dir.
func snapshot(t testing.TB, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(p + "\n")
		if d.Type().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.Write(data)
			b.WriteString("\n")
		}
		return nil
	})
	must(t, err)
	return b.String()
}

// TestRoundTrip runs on a root that syncs its writes and on one that does not: the two differ only
// after a crash of the host.
func TestRoundTrip(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) { roundTrip(t, durable) })
	}
}

func roundTrip(t *testing.T, durable bool) {
	j := newJail(t)
	j.r.Durable = durable
	bin := make([]byte, 1<<20)
	for i := range bin {
		bin[i] = byte(i * 7)
	}
	for _, p := range []string{"f.txt", "/g.txt", "new/parents/x.bin", "./a/b/../c.txt", "a//b///d.txt"} {
		must(t, j.r.WriteFile(p, bin))
		got, err := j.r.ReadFile(p, int64(len(bin)))
		must(t, err)
		if !bytes.Equal(got, bin) {
			t.Fatalf("%s: read back %d bytes, differ", p, len(got))
		}
	}
	// Replace, and leave no temporary file behind.
	must(t, j.r.WriteFile("f.txt", []byte("second")))
	got, err := j.r.ReadFile("f.txt", 100)
	must(t, err)
	if string(got) != "second" {
		t.Fatalf("after replace: %q", got)
	}
	names, err := os.ReadDir(j.root)
	must(t, err)
	for _, e := range names {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temporary file left behind: %s", e.Name())
		}
	}
	// A replaced file keeps its permissions.
	must(t, os.Chmod(filepath.Join(j.root, "f.txt"), 0o750))
	must(t, j.r.WriteFile("f.txt", []byte("third")))
	if fi, err := os.Stat(filepath.Join(j.root, "f.txt")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("mode after replace: %v, %v", fi.Mode(), err)
	}
	// Empty content is a file too.
	must(t, j.r.WriteFile("empty", nil))
	got, err = j.r.ReadFile("empty", 0)
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("empty file read %d bytes", len(got))
	}
}

func TestErrors(t *testing.T) {
	j := newJail(t)
	must(t, j.r.WriteFile("file", []byte("x")))
	cases := []struct {
		name string
		op   func() error
		want error
	}{
		{"read missing", func() error { _, err := j.r.ReadFile("nope", 10); return err }, sandbox.ErrNotFound},
		{"read in missing dir", func() error { _, err := j.r.ReadFile("no/pe", 10); return err }, sandbox.ErrNotFound},
		{"read directory", func() error { _, err := j.r.ReadFile("a", 10); return err }, sandbox.ErrInvalidRequest},
		{"read under file", func() error { _, err := j.r.ReadFile("file/x", 10); return err }, sandbox.ErrInvalidRequest},
		{"read too big", func() error { _, err := j.r.ReadFile("a/inside.txt", 3); return err }, sandbox.ErrInvalidRequest},
		{"read empty path", func() error { _, err := j.r.ReadFile("", 10); return err }, sandbox.ErrInvalidRequest},
		{"read NUL", func() error { _, err := j.r.ReadFile("a\x00b", 10); return err }, sandbox.ErrInvalidRequest},
		{"read loop", func() error { _, err := j.r.ReadFile("loop", 10); return err }, sandbox.ErrInvalidRequest},
		{"write directory", func() error { return j.r.WriteFile("a", nil) }, sandbox.ErrInvalidRequest},
		{"write trailing slash", func() error { return j.r.WriteFile("x/", nil) }, sandbox.ErrInvalidRequest},
		{"write root", func() error { return j.r.WriteFile("/", nil) }, sandbox.ErrInvalidRequest},
		{"write dotdot", func() error { return j.r.WriteFile("a/..", nil) }, sandbox.ErrInvalidRequest},
		{"write under file", func() error { return j.r.WriteFile("file/x", nil) }, sandbox.ErrInvalidRequest},
		{"write empty path", func() error { return j.r.WriteFile("", nil) }, sandbox.ErrInvalidRequest},
		{"write NUL", func() error { return j.r.WriteFile("x\x00", nil) }, sandbox.ErrInvalidRequest},
		{"list missing", func() error { _, err := j.r.List("nope"); return err }, sandbox.ErrNotFound},
		{"list file", func() error { _, err := j.r.List("file"); return err }, sandbox.ErrInvalidRequest},
		{"list empty path", func() error { _, err := j.r.List(""); return err }, sandbox.ErrInvalidRequest},
		{"resolve file", func() error { _, err := j.r.ResolveDir("file"); return err }, sandbox.ErrInvalidRequest},
		{"resolve missing", func() error { _, err := j.r.ResolveDir("nope"); return err }, sandbox.ErrNotFound},
	}
	for _, c := range cases {
		if err := c.op(); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := Open(filepath.Join(j.root, "file"), "/"); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Errorf("open a file as root: %v", err)
	}
}

func TestFIFOIsNotAFile(t *testing.T) {
	j := newJail(t)
	must(t, unix.Mkfifo(filepath.Join(j.root, "fifo"), 0o644))
	if _, err := j.r.ReadFile("fifo", 10); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("read a FIFO: %v", err)
	}
}

func TestConfinement(t *testing.T) {
	j := newJail(t)
	before := snapshot(t, j.outside)
	reads := []string{
		"../outside/secret", "../../../../outside/secret", "/../outside/secret", "a/../../outside/secret",
		j.outside + "/secret", "absdir/secret", "reldir/secret", "absfile", "relfile", "a/b/deep/secret",
		"a/b/deepfile", "a/up/up/../outside/secret", "a/self/b/deep/sub/secret", "etcpasswd", "/etc/passwd",
	}
	for _, p := range reads {
		data, err := j.r.ReadFile(p, 1<<20)
		if err == nil || bytes.Contains(data, []byte(secret)) || bytes.Contains(data, []byte("root:")) {
			t.Errorf("read %q: %q, %v; want not found", p, data, err)
		}
		if !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("read %q: %v, want not found", p, err)
		}
	}
	writes := append(reads, "absdir/new", "reldir/sub/new", "a/b/deep/new", "dangling", "../outside/new")
	for _, p := range writes {
		if err := j.r.WriteFile(p, []byte("written")); err != nil {
			t.Errorf("write %q: %v", p, err)
		}
	}
	if after := snapshot(t, j.outside); after != before {
		t.Fatalf("outside changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// The writes landed inside: the escaped paths became paths under the root.
	got, err := os.ReadFile(filepath.Join(j.root, "outside", "new"))
	if err != nil || string(got) != "written" {
		t.Fatalf("write of ../outside/new inside the root: %q, %v", got, err)
	}
	got, err = os.ReadFile(filepath.Join(j.root, j.outside, "new"))
	if err != nil || string(got) != "written" {
		t.Fatalf("write through absdir inside the root: %q, %v", got, err)
	}
	// A write to a symlink replaces the link, it does not follow it.
	fi, err := os.Lstat(filepath.Join(j.root, "absfile"))
	must(t, err)
	if !fi.Mode().IsRegular() {
		t.Fatalf("absfile is %v after a write, want a regular file", fi.Mode())
	}
	// Listing through a symlinked directory lists the inside target.
	entries, err := j.r.List("absdir")
	must(t, err)
	inside, err := os.ReadDir(filepath.Join(j.root, j.outside))
	must(t, err)
	if len(entries) != len(inside) {
		t.Fatalf("listing absdir = %+v, want the %d entries of its inside target", entries, len(inside))
	}
	for _, e := range entries {
		if data, err := j.r.ReadFile(e.Path, 100); e.Kind == sandbox.KindFile && (err != nil || string(data) != "written") {
			t.Fatalf("listed %q reads %q, %v", e.Path, data, err)
		}
	}
	if dir, err := j.r.ResolveDir("reldir"); err != nil || !strings.HasPrefix(dir, j.root+"/") {
		t.Fatalf("resolve reldir: %q, %v", dir, err)
	}
}

func TestWorkdir(t *testing.T) {
	j := newJail(t)
	r, err := Open(j.root, "a")
	must(t, err)
	defer r.Close()
	got, err := r.ReadFile("inside.txt", 100)
	if err != nil || string(got) != "inside" {
		t.Fatalf("relative read from workdir /a: %q, %v", got, err)
	}
	got, err = r.ReadFile("/a/inside.txt", 100)
	if err != nil || string(got) != "inside" {
		t.Fatalf("absolute read: %q, %v", got, err)
	}
	if _, err := r.ReadFile("../../../outside/secret", 100); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("escape from workdir: %v", err)
	}
	must(t, r.WriteFile("w.txt", []byte("w")))
	if _, err := os.Stat(filepath.Join(j.root, "a", "w.txt")); err != nil {
		t.Fatalf("relative write did not land in the workdir: %v", err)
	}
}

func TestList(t *testing.T) {
	j := newJail(t)
	must(t, j.r.WriteFile("dir/one.txt", []byte("1")))
	must(t, j.r.WriteFile("dir/sub/two.txt", []byte("22")))
	must(t, os.Symlink("one.txt", filepath.Join(j.root, "dir", "link")))
	must(t, os.Symlink("sub", filepath.Join(j.root, "dir", "linkdir")))
	must(t, os.Symlink("/nowhere", filepath.Join(j.root, "dir", "dangling")))
	must(t, unix.Mkfifo(filepath.Join(j.root, "dir", "fifo"), 0o644))

	want := []sandbox.FileEntry{
		{Path: "one.txt", Kind: sandbox.KindFile, Size: 1},
		{Path: "link", Kind: sandbox.KindFile, Size: 1},
		{Path: "linkdir", Kind: sandbox.KindDirectory},
		{Path: "sub", Kind: sandbox.KindDirectory},
	}
	for _, c := range []struct{ arg, prefix string }{
		{"dir", "dir/"}, {"dir/", "dir/"}, {"/dir", "/dir/"}, {"./dir", "./dir/"},
	} {
		got, err := j.r.List(c.arg)
		must(t, err)
		if len(got) != len(want) {
			t.Fatalf("List(%q) = %+v", c.arg, got)
		}
		for i := range want {
			// Names sort as link, linkdir, one.txt, sub.
			w := want[[]int{1, 2, 0, 3}[i]]
			w.Path = c.prefix + w.Path
			if got[i] != w {
				t.Errorf("List(%q)[%d] = %+v, want %+v", c.arg, i, got[i], w)
			}
		}
		// Every listed path reads back through the same root.
		for _, e := range got {
			if e.Kind == sandbox.KindFile {
				if _, err := j.r.ReadFile(e.Path, 10); err != nil {
					t.Errorf("read listed %q: %v", e.Path, err)
				}
			}
		}
	}
	r, err := Open(j.root, "/dir")
	must(t, err)
	defer r.Close()
	got, err := r.List(".")
	must(t, err)
	if len(got) == 0 || got[0].Path != "link" {
		t.Fatalf("List(.) from /dir = %+v", got)
	}
	got, err = j.r.List("/")
	must(t, err)
	if len(got) == 0 || !strings.HasPrefix(got[0].Path, "/") {
		t.Fatalf("List(/) = %+v", got)
	}
}

// TestSwapRace flips a directory inside the root to a symlink pointing outside, and back, while reads,
// writes and listings go through it. Nothing outside may change, and no read may see the outside.
func TestSwapRace(t *testing.T) {
	j := newJail(t)
	before := snapshot(t, j.outside)
	d := filepath.Join(j.root, "d")
	must(t, os.MkdirAll(d, 0o755))
	must(t, os.WriteFile(filepath.Join(d, "secret"), []byte("inside"), 0o644))

	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		targets := []string{j.outside, "../outside", "../../../../../.." + j.outside}
		for i := 0; !stop.Load(); i++ {
			// Swap the real directory aside and a symlink in, then back.
			_ = os.Rename(d, d+".aside")
			_ = os.Symlink(targets[i%len(targets)], d)
			_ = os.Remove(d)
			_ = os.Rename(d+".aside", d)
		}
	}()
	for i := 0; i < 1000; i++ {
		name := "d/f" + strconv.Itoa(i%7)
		_ = j.r.WriteFile(name, []byte("w"))
		_ = j.r.WriteFile("d/secret", []byte("inside"))
		if data, err := j.r.ReadFile("d/secret", 100); err == nil && string(data) == secret {
			t.Fatal("a read saw the outside secret")
		}
		_, _ = j.r.List("d")
	}
	stop.Store(true)
	wg.Wait()
	if after := snapshot(t, j.outside); after != before {
		t.Fatalf("outside changed during the race:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// FuzzResolve runs reads, writes, listings and directory resolution on arbitrary paths in a root full
// of escaping symlinks, and checks that nothing outside changed and that every resolved directory is
// inside the root.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{
		".", "/", "..", "../..", "a/../../..", "absdir/secret", "reldir", "a/b/deep/sub", "a/up/up/up",
		"a/self/b/deepfile", "loop/x", "dangling/x", "//a//b//", "a/./b/../../..", "etcpasswd",
		"/proc/self/root/etc/passwd", "a\x00b", "", strings.Repeat("../", 100) + "etc",
	} {
		f.Add(s)
	}
	j := newJail(f)
	before := snapshot(f, j.outside)
	f.Fuzz(func(t *testing.T, p string) {
		if data, err := j.r.ReadFile(p, 1<<16); err == nil && bytes.Contains(data, []byte(secret)) {
			t.Fatalf("read %q saw the outside", p)
		}
		_ = j.r.WriteFile(p+"/w", []byte("fuzz"))
		_ = j.r.WriteFile(p, []byte("fuzz"))
		if entries, err := j.r.List(p); err == nil {
			for _, e := range entries {
				if !strings.HasSuffix(e.Path, "/"+filepath.Base(e.Path)) && e.Path != filepath.Base(e.Path) {
					t.Fatalf("List(%q) entry %q does not end in its name", p, e.Path)
				}
			}
		}
		if dir, err := j.r.ResolveDir(p); err == nil && dir != j.root && !strings.HasPrefix(dir, j.root+"/") {
			t.Fatalf("ResolveDir(%q) = %q, outside %q", p, dir, j.root)
		}
		if after := snapshot(t, j.outside); after != before {
			t.Fatalf("path %q changed the outside", p)
		}
	})
}
