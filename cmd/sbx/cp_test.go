package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/host"
)

// cutTransport breaks the body of the first raw PUT after cut bytes (0: none), and the answer's body of
// the first raw GET after cutGet bytes (0: none), as a dropped connection does; onCut, if set, runs when
// that GET is cut. It records the queries of every raw PUT and the Range of every raw GET.
type cutTransport struct {
	next   http.RoundTripper
	cut    int64
	cutGet int64
	onCut  func()

	mu      sync.Mutex
	done    bool
	getDone bool
	puts    []string
	ranges  []string
}

func (c *cutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	raw := strings.HasSuffix(req.URL.Path, "/files/raw")
	if req.Method == http.MethodPut && raw {
		c.mu.Lock()
		c.puts = append(c.puts, req.URL.RawQuery)
		first := !c.done
		c.done = true
		c.mu.Unlock()
		if first && c.cut > 0 {
			req.Body = io.NopCloser(io.MultiReader(io.LimitReader(req.Body, c.cut), failing{}))
		}
	}
	if req.Method != http.MethodGet || !raw {
		return c.next.RoundTrip(req)
	}
	c.mu.Lock()
	c.ranges = append(c.ranges, req.Header.Get("Range"))
	first := !c.getDone
	c.getDone = true
	onCut := c.onCut
	c.mu.Unlock()
	resp, err := c.next.RoundTrip(req)
	if err == nil && first && c.cutGet > 0 {
		resp.Body = &cutBody{ReadCloser: resp.Body, left: c.cutGet, onCut: onCut}
	}
	return resp, err
}

// cutBody is an answer's body that fails after left bytes, running onCut then.
type cutBody struct {
	io.ReadCloser
	left  int64
	onCut func()
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		if b.onCut != nil {
			b.onCut()
			b.onCut = nil
		}
		return 0, errors.New("connection dropped")
	}
	n, err := b.ReadCloser.Read(p[:min(int64(len(p)), b.left)])
	b.left -= int64(n)
	return n, err
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("connection dropped") }

// cpApp is sbx's app over a host daemon of its own, its HTTP client going through rt.
func cpApp(t *testing.T, rt func(http.RoundTripper) http.RoundTripper) (*app, *sandbox.Sandbox) {
	prov, err := host.New(host.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := stack.Start(t.TempDir(), prov)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	hc := &http.Client{Transport: rt(apitest.Transport(t, http.DefaultTransport))}
	c, err := client.New(s.URL, client.WithHTTPClient(hc), client.WithRetry(3, 10e6, 50e6))
	if err != nil {
		t.Fatal(err)
	}
	a := &app{ctx: context.Background(), stdout: io.Discard, stderr: io.Discard, c: c}
	sb, err := c.Create(a.ctx, sandbox.Spec{ClientRequestID: "cp"})
	if err != nil {
		t.Fatal(err)
	}
	if sb, err = c.WaitReady(a.ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	return a, sb
}

func (a *app) cp(t *testing.T, from, to string) {
	t.Helper()
	src, err := a.side(from)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := a.side(to)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.copy(src, dst); err != nil {
		t.Fatalf("cp %s %s: %v", from, to, err)
	}
}

func randomFile(t *testing.T, path string, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCpResumes: a file past the contract's 24 MiB goes in whole although its first connection
// dropped after 10 MiB: the upload resumed from the offset the sandbox held, and comes back out the same.
func TestCpResumes(t *testing.T) {
	var cut *cutTransport
	a, sb := cpApp(t, func(next http.RoundTripper) http.RoundTripper {
		cut = &cutTransport{next: next, cut: 10 << 20}
		return cut
	})
	dir := t.TempDir()
	data := randomFile(t, filepath.Join(dir, "big.bin"), 40<<20)
	a.cp(t, filepath.Join(dir, "big.bin"), string(sb.ID)+":big.bin")
	if len(cut.puts) != 2 || !strings.Contains(cut.puts[1], "offset=") {
		t.Fatalf("puts: %q", cut.puts)
	}
	a.cp(t, string(sb.ID)+":big.bin", filepath.Join(dir, "back.bin"))
	back, err := os.ReadFile(filepath.Join(dir, "back.bin"))
	if err != nil || !bytes.Equal(back, data) {
		t.Fatalf("back: %d bytes, %v", len(back), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("a temporary is left: %v", ents)
	}
}

// TestCpDownloadResumes: a download whose connection dropped after 10 MiB goes on with a ranged GET
// from the offset it reached and arrives whole, its digest checked; a file that changed in the sandbox
// between the drop and the resume is refused (its digest is not the one the download began with), and
// nothing is left where it was going.
func TestCpDownloadResumes(t *testing.T) {
	var cut *cutTransport
	a, sb := cpApp(t, func(next http.RoundTripper) http.RoundTripper {
		cut = &cutTransport{next: next, cutGet: 10 << 20}
		return cut
	})
	dir := t.TempDir()
	data := randomFile(t, filepath.Join(dir, "big.bin"), 40<<20)
	a.cp(t, filepath.Join(dir, "big.bin"), string(sb.ID)+":big.bin")
	a.cp(t, string(sb.ID)+":big.bin", filepath.Join(dir, "back.bin"))
	if want := []string{"", "bytes=10485760-"}; !slices.Equal(cut.ranges, want) {
		t.Fatalf("GETs with ranges %q, want %q", cut.ranges, want)
	}
	if back, err := os.ReadFile(filepath.Join(dir, "back.bin")); err != nil || !bytes.Equal(back, data) {
		t.Fatalf("back: %d bytes, %v", len(back), err)
	}

	// The same drop, and the file replaced before the resume.
	other := slices.Clone(data)
	other[len(other)-1] ^= 1
	cut.mu.Lock()
	cut.getDone, cut.ranges = false, nil
	cut.onCut = func() {
		if _, err := a.c.Upload(a.ctx, sb.ID, sb.Generation, "big.bin", bytes.NewReader(other), client.UploadOptions{}); err != nil {
			t.Errorf("replacing the file: %v", err)
		}
	}
	cut.mu.Unlock()
	src, err := a.side(string(sb.ID) + ":big.bin")
	if err != nil {
		t.Fatal(err)
	}
	dst, err := a.side(filepath.Join(dir, "changed.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.copy(src, dst); !errors.Is(err, client.ErrDigestMismatch) {
		t.Fatalf("a file changed between the drop and the resume: %v", err)
	}
	if len(cut.ranges) != 2 || cut.ranges[1] != "bytes=10485760-" {
		t.Fatalf("GETs with ranges %q", cut.ranges)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("left behind: %v", ents)
	}
}

// TestCpDirectoryWithLinks: a directory travels as a tar stream, its symlinks as links, both ways.
func TestCpDirectoryWithLinks(t *testing.T) {
	a, sb := cpApp(t, func(next http.RoundTripper) http.RoundTripper { return next })
	dir := t.TempDir()
	src := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	data := randomFile(t, filepath.Join(src, "sub", "f.bin"), 30<<20)
	if err := os.Symlink("sub/f.bin", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "abs")); err != nil {
		t.Fatal(err)
	}
	a.cp(t, src, string(sb.ID)+":tree")
	a.cp(t, string(sb.ID)+":tree", filepath.Join(dir, "back"))
	if got, err := os.ReadFile(filepath.Join(dir, "back", "sub", "f.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("back: %d bytes, %v", len(got), err)
	}
	for link, want := range map[string]string{"link": "sub/f.bin", "abs": "/etc/passwd"} {
		if got, err := os.Readlink(filepath.Join(dir, "back", link)); err != nil || got != want {
			t.Fatalf("%s: %q %v", link, got, err)
		}
	}
}
