package image_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestBusyboxImageScript: scripts/busybox-image (the README's way to an image to import) makes an OCI
// layout the store imports, of busybox and its applets with PATH=/bin, the same digest each time, and
// refuses a directory that exists.
func TestBusyboxImageScript(t *testing.T) {
	needRoot(t)
	script, err := filepath.Abs("../scripts/busybox-image")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	var digests []string
	for _, dir := range []string{"a", "b"} {
		out, err := exec.Command(script, filepath.Join(tmp, dir)).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		digests = append(digests, strings.TrimSpace(string(out[strings.LastIndex(string(out), " ")+1:])))
	}
	if digests[0] != digests[1] || !strings.HasPrefix(digests[0], "sha256:") {
		t.Fatalf("two runs: %q", digests)
	}
	if out, err := exec.Command(script, filepath.Join(tmp, "a")).CombinedOutput(); err == nil || !strings.Contains(string(out), "exists") {
		t.Fatalf("over an existing directory: %v, %s", err, out)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, ".busybox-image.*")); len(left) != 0 {
		t.Fatalf("left behind: %q", left)
	}

	s := openStore(t, t.TempDir())
	img, err := s.ImportLayout(context.Background(), filepath.Join(tmp, "a"), "tools/busybox:1", "", nil)
	if err != nil || img.Digest != digests[0] || len(img.Layers) != 1 {
		t.Fatalf("import: %+v, %v (the script said %s)", img, err, digests[0])
	}
	if !slices.Equal(img.Config.Env, []string{"PATH=/bin"}) || img.Config.WorkingDir != "/root" {
		t.Fatalf("config %+v", img.Config)
	}
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	if sh, err := os.Readlink(filepath.Join(img.Layers[0], "bin", "sh")); err != nil || sh != "busybox" {
		t.Fatalf("bin/sh: %q, %v", sh, err)
	}
	if got := readIn(t, img, "bin/busybox"); got != string(busybox) {
		t.Fatal("bin/busybox is not the host's busybox")
	}
}
