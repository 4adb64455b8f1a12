package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/oci"
)

// TestImageCommands drives `sbx image` and `sbx create --image` against a daemon on the oci provider:
// the three commands of the README (import, create, exec), then ls, inspect, rm refused while in use,
// rm and prune.
func TestImageCommands(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the oci provider needs root")
	}
	p, err := oci.New(oci.Config{StateDir: testenv.StateDir(t), AgentPath: testenv.BuildAgent(t), StopGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st := stack.New(t, p)
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sbx := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, append([]string{"--url", st.URL}, args...), strings.NewReader(""), &out, &errb); code != want {
			t.Fatalf("sbx %s: exit %d, want %d: %s%s", strings.Join(args, " "), code, want, out.String(), errb.String())
		}
		return out.String()
	}
	dir := t.TempDir()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(imagetest.BusyboxImage(t, "hello from sbx")); err != nil {
		t.Fatal(err)
	}

	if out := sbx(0, "image", "import", dir, "tools/busybox:1"); !strings.Contains(out, "tools/busybox:1") {
		t.Fatalf("import: %s", out)
	}
	var sb struct{ ID string }
	if err := json.Unmarshal([]byte(sbx(0, "create", "--image", "tools/busybox:1", "--wait", "-o", "json")), &sb); err != nil {
		t.Fatal(err)
	}
	id := sb.ID
	if out := sbx(0, "exec", id, "--", "cat", "/etc/greeting"); out != "hello from sbx\n" {
		t.Fatalf("exec: %q", out)
	}
	out := sbx(0, "image", "ls")
	if !strings.Contains(out, "tools/busybox:1") || !strings.Contains(out, " 1 ") {
		t.Fatalf("ls: %s", out)
	}
	var list []struct{ Digest string }
	if err := json.Unmarshal([]byte(sbx(0, "image", "ls", "-o", "json")), &list); err != nil || len(list) != 1 {
		t.Fatalf("ls -o json: %+v, %v", list, err)
	}
	digest := list[0].Digest
	if out := sbx(0, "image", "inspect", digest); !strings.Contains(out, "/srv") {
		t.Fatalf("inspect: %s", out)
	}
	sbx(1, "image", "rm", "tools/busybox:1") // in use
	sbx(0, "terminate", id, "--wait")
	sbx(0, "image", "rm", "tools/busybox:1")
	if out := sbx(0, "image", "prune"); out != "removed 2 layers\n" {
		t.Fatalf("prune: %q", out)
	}
}

// TestImageBar: the bar of `sbx image pull|import` on a terminal: by bytes where the daemon counts
// them, by layers where it does not (a docker-save import), one line ended once drawn, and nothing
// off a terminal.
func TestImageBar(t *testing.T) {
	var w bytes.Buffer
	b := &imageBar{w: &w, what: "pulling r:1", on: true}
	b.report(sandbox.ImageProgress{TotalLayers: 2, TotalBytes: 4 << 20})
	b.report(sandbox.ImageProgress{Layers: 1, TotalLayers: 2, Bytes: 1 << 20, TotalBytes: 4 << 20})
	b.report(sandbox.ImageProgress{Layers: 2, TotalLayers: 2, Bytes: 4 << 20, TotalBytes: 4 << 20})
	b.finish()
	want := "\rpulling r:1 [                              ]   0% 0 B/4.0 MiB, layer 0 of 2" +
		"\rpulling r:1 [=======                       ]  25% 1.0 MiB/4.0 MiB, layer 1 of 2" +
		"\rpulling r:1 [==============================] 100% 4.0 MiB/4.0 MiB, layer 2 of 2\n"
	if w.String() != want {
		t.Fatalf("bar %q\nwant %q", w.String(), want)
	}

	w.Reset()
	b = &imageBar{w: &w, what: "importing x.tar", on: true}
	b.report(sandbox.ImageProgress{Layers: 1, TotalLayers: 3})
	b.finish()
	if got := w.String(); got != "\rimporting x.tar: layer 1 of 3\n" {
		t.Fatalf("layers only: %q", got)
	}

	w.Reset()
	b = &imageBar{w: &w, what: "pulling r:1"}
	b.report(sandbox.ImageProgress{Layers: 1, TotalLayers: 2, Bytes: 1, TotalBytes: 2})
	b.finish()
	if w.Len() != 0 {
		t.Fatalf("off a terminal: %q", w.String())
	}
}
