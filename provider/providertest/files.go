package providertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox"
)

func testFiles(t *testing.T, p sandbox.Provider, m sandbox.Manifest) {
	ctx := context.Background()
	fs := p.(sandbox.FileSystem)
	ref := newSandbox(t, p)
	write := func(t *testing.T, path string, data []byte) {
		t.Helper()
		if err := fs.WriteFile(ctx, ref, path, data); err != nil {
			t.Fatalf("write %q: %v", path, err)
		}
	}
	read := func(t *testing.T, path string) []byte {
		t.Helper()
		data, err := fs.ReadFile(ctx, ref, path)
		if err != nil {
			t.Fatalf("read %q: %v", path, err)
		}
		return data
	}

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		binary := make([]byte, 512)
		for i := range binary {
			binary[i] = byte(i)
		}
		big := make([]byte, 16<<20)
		_, _ = rand.Read(big)
		for path, data := range map[string][]byte{
			"rt/text.txt": []byte("hello, sandbox\n"), "rt/binary.bin": binary, "rt/big.bin": big, "rt/empty": {},
		} {
			write(t, path, data)
			if got := read(t, path); !bytes.Equal(got, data) {
				t.Fatalf("%s: read %d bytes back, wrote %d, contents differ", path, len(got), len(data))
			}
		}
	})
	t.Run("AtomicReplace", func(t *testing.T) {
		t.Parallel()
		write(t, "replace/file", bytes.Repeat([]byte("a"), 1<<20))
		write(t, "replace/file", []byte("short"))
		if got := read(t, "replace/file"); string(got) != "short" {
			t.Fatalf("after replace: %d bytes", len(got))
		}
		entries, err := fs.ListFiles(ctx, ref, "replace")
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Path != "replace/file" || entries[0].Size != 5 {
			t.Fatalf("a replace left %+v", entries)
		}
	})
	t.Run("Parents", func(t *testing.T) {
		t.Parallel()
		write(t, "p/q/r/s/file.txt", []byte("deep"))
		// Relative paths start at the sandbox's working directory, which differs between providers
		// ("/" for host, "/workspace" for oci), so the suite never assumes where it is.
		if got := read(t, "./p/q/r/s/file.txt"); string(got) != "deep" {
			t.Fatalf("read by ./ path: %q", got)
		}
		if got := read(t, "p/q/../q/r/s/file.txt"); string(got) != "deep" {
			t.Fatalf("read through ..: %q", got)
		}
	})
	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		write(t, "errs/file", []byte("x"))
		write(t, "errs/dir/inner", []byte("x"))
		checks := []struct {
			name string
			err  error
			want error
		}{
			{"read missing", second(fs.ReadFile(ctx, ref, "errs/missing")), sandbox.ErrNotFound},
			{"read in missing directory", second(fs.ReadFile(ctx, ref, "errs/nodir/file")), sandbox.ErrNotFound},
			{"list missing", second(fs.ListFiles(ctx, ref, "errs/missing")), sandbox.ErrNotFound},
			{"read a directory", second(fs.ReadFile(ctx, ref, "errs/dir")), sandbox.ErrInvalidRequest},
			{"list a file", second(fs.ListFiles(ctx, ref, "errs/file")), sandbox.ErrInvalidRequest},
			{"write over a directory", fs.WriteFile(ctx, ref, "errs/dir", []byte("x")), sandbox.ErrInvalidRequest},
			{"write under a file", fs.WriteFile(ctx, ref, "errs/file/x", []byte("x")), sandbox.ErrInvalidRequest},
			{"read an empty path", second(fs.ReadFile(ctx, ref, "")), sandbox.ErrInvalidRequest},
		}
		for _, c := range checks {
			if !errors.Is(c.err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
			}
		}
	})
	t.Run("List", func(t *testing.T) {
		t.Parallel()
		write(t, "ls/a.txt", []byte("a"))
		write(t, "ls/b.txt", []byte("bb"))
		write(t, "ls/sub/c.txt", []byte("ccc"))
		entries, err := fs.ListFiles(ctx, ref, "ls")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]sandbox.FileEntry{
			"ls/a.txt": {Path: "ls/a.txt", Kind: sandbox.KindFile, Size: 1},
			"ls/b.txt": {Path: "ls/b.txt", Kind: sandbox.KindFile, Size: 2},
			"ls/sub":   {Path: "ls/sub", Kind: sandbox.KindDirectory},
		}
		if len(entries) != len(want) {
			t.Fatalf("list ls: %+v", entries)
		}
		for _, e := range entries {
			w, ok := want[e.Path]
			if !ok || e.Kind != w.Kind || (e.Kind == sandbox.KindFile && e.Size != w.Size) {
				t.Fatalf("list ls: entry %+v, want one of %+v", e, want)
			}
		}
		// Listed paths go back in as they are.
		sub, err := fs.ListFiles(ctx, ref, "ls/sub")
		if err != nil || len(sub) != 1 || sub[0].Path != "ls/sub/c.txt" {
			t.Fatalf("list ls/sub: %+v, %v", sub, err)
		}
		if got := read(t, sub[0].Path); string(got) != "ccc" {
			t.Fatalf("read listed path: %q", got)
		}
	})
	t.Run("Confinement", func(t *testing.T) { t.Parallel(); testConfinement(t, p, m, ref) })
}

func second[T any](_ T, err error) error { return err }

// testConfinement makes a host directory with a secret and tries to reach it through the provider, by
// "..", by absolute path and, when the provider runs commands, through symlinks planted in the sandbox.
// Nothing may read the secret or change the host directory.
func testConfinement(t *testing.T, p sandbox.Provider, m sandbox.Manifest, ref sandbox.Ref) {
	ctx := context.Background()
	fs := p.(sandbox.FileSystem)
	host := t.TempDir()
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	secret := "secret-" + hex.EncodeToString(tok[:])
	secretPath := filepath.Join(host, "secret")
	if err := os.WriteFile(secretPath, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	passwd, _ := os.ReadFile("/etc/passwd")
	dotdot := strings.Repeat("../", 30)

	reads := []string{dotdot + secretPath[1:], secretPath, "/" + dotdot + secretPath[1:], "conf/" + dotdot + secretPath[1:]}
	writes := []string{dotdot + host[1:] + "/new", host + "/new", "/../../" + host[1:] + "/new"}
	if e, ok := p.(sandbox.Executor); ok && m.Capabilities.CommandExecution {
		script := strings.Join([]string{
			"mkdir -p conf/deep/er",
			"ln -s " + secretPath + " conf/abs-secret",
			"ln -s " + host + " conf/abs-dir",
			"ln -s " + dotdot + secretPath[1:] + " conf/rel-secret",
			"ln -s " + dotdot + host[1:] + " conf/deep/er/rel-dir",
			"ln -s /etc/passwd conf/passwd",
			"ln -s /etc conf/etc",
		}, " && ")
		wantExit(t, exec(t, e, ref, sh(script)), 0)
		reads = append(reads, "conf/abs-secret", "conf/abs-dir/secret", "conf/rel-secret", "conf/deep/er/rel-dir/secret")
		writes = append(writes, "conf/abs-dir/new", "conf/deep/er/rel-dir/new", "conf/abs-secret")
		for _, path := range []string{"conf/passwd", "conf/etc/passwd"} {
			if got, err := fs.ReadFile(ctx, ref, path); err == nil && len(passwd) > 0 && bytes.Equal(got, passwd) {
				t.Errorf("read %q returned the host's /etc/passwd", path)
			}
		}
		if err := fs.WriteFile(ctx, ref, "conf/etc/sbx-conformance", []byte("x")); err == nil {
			if _, err := os.Stat("/etc/sbx-conformance"); err == nil {
				os.Remove("/etc/sbx-conformance")
				t.Errorf("a write through a symlink to /etc reached the host's /etc")
			}
		}
	}
	for _, path := range reads {
		if got, err := fs.ReadFile(ctx, ref, path); err == nil && bytes.Contains(got, []byte(secret)) {
			t.Errorf("read %q returned the host secret", path)
		}
	}
	for _, path := range writes {
		_ = fs.WriteFile(ctx, ref, path, []byte("overwritten"))
	}
	for _, path := range []string{"conf/abs-dir", "conf/deep/er/rel-dir"} {
		if entries, err := fs.ListFiles(ctx, ref, path); err == nil {
			for _, e := range entries {
				if strings.HasSuffix(e.Path, "/secret") {
					t.Errorf("list %q shows the host directory: %+v", path, entries)
				}
			}
		}
	}
	entries, err := os.ReadDir(host)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("the host directory changed: %v", entries)
	}
	if got, err := os.ReadFile(secretPath); err != nil || string(got) != secret {
		t.Errorf("the host secret changed: %q, %v", got, err)
	}
}
