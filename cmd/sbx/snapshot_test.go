package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/oci"
)

// newOCIStack is a daemon on the oci provider (root only: it skips elsewhere) whose sandboxes, which
// outlive their daemon by design, are terminated when the test ends.
func newOCIStack(t *testing.T) *stack.Stack {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the oci provider needs root")
	}
	p, err := oci.New(oci.Config{StateDir: testenv.StateDir(t), AgentPath: testenv.BuildAgent(t), StopGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st := stack.New(t, p)
	t.Cleanup(func() { p.Close() })
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := client.New(st.URL)
		if err != nil {
			t.Error(err)
			return
		}
		list, err := c.List(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		for _, sb := range list {
			if sb.State == sandbox.StateTerminated {
				continue
			}
			if _, err := c.Terminate(ctx, sb.ID, sb.Generation); err != nil {
				t.Errorf("terminate %s: %v", sb.ID, err)
				continue
			}
			if _, err := c.WaitState(ctx, sb.ID, sandbox.StateTerminated); err != nil {
				t.Errorf("terminate %s: %v", sb.ID, err)
			}
		}
	})
	return st
}

// sbxOf runs sbx against url and fails the test unless it exits with want; it returns its stdout.
func sbxOf(t *testing.T, ctx context.Context, url string) func(want int, args ...string) string {
	return func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, append([]string{"--url", url}, args...), strings.NewReader(""), &out, &errb); code != want {
			t.Fatalf("sbx %s: exit %d, want %d: %s%s", strings.Join(args, " "), code, want, out.String(), errb.String())
		}
		return out.String()
	}
}

// TestSnapshotCommands drives `sbx snapshot`, `sbx fork`, `sbx template` and `sbx create --template`
// against a daemon on the oci provider.
func TestSnapshotCommands(t *testing.T) {
	st := newOCIStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sbx := sbxOf(t, ctx, st.URL)
	dir := t.TempDir()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(imagetest.BusyboxImage(t, "snap")); err != nil {
		t.Fatal(err)
	}
	sbx(0, "image", "import", dir, "tools/busybox:1")
	var sb struct{ ID string }
	if err := json.Unmarshal([]byte(sbx(0, "create", "--image", "tools/busybox:1", "--wait", "-o", "json")), &sb); err != nil {
		t.Fatal(err)
	}
	sbx(0, "exec", sb.ID, "--", "sh", "-c", "echo written > /w")
	var sn struct{ ID string }
	if err := json.Unmarshal([]byte(sbx(0, "snapshot", sb.ID, "--name", "mine", "-o", "json")), &sn); err != nil || sn.ID == "" {
		t.Fatalf("snapshot: %+v, %v", sn, err)
	}
	ids := strings.Fields(sbx(0, "fork", sn.ID, "-n", "3", "--wait"))
	if len(ids) != 3 {
		t.Fatalf("fork: %v", ids)
	}
	for _, id := range ids {
		if out := sbx(0, "exec", id, "--", "cat", "/w"); out != "written\n" {
			t.Fatalf("fork %s: %q", id, out)
		}
	}
	if out := sbx(0, "snapshot", "ls"); !strings.Contains(out, "mine@1") {
		t.Fatalf("snapshot ls: %s", out)
	}
	sbx(1, "snapshot", "rm", sn.ID) // in use

	file := filepath.Join(t.TempDir(), "tools.yaml")
	os.WriteFile(filepath.Join(filepath.Dir(file), "data.txt"), []byte("from a file\n"), 0o644)
	os.WriteFile(file, []byte(`name: tools
baseImage: tools/busybox:1
env: [MODE=ready]
steps:
  - run: [mkdir, -p, /app]
  - file: {path: /app/hello, content: "hello\n"}
  - file: {path: /app/data.txt, source: data.txt}
`), 0o644)
	if out := sbx(0, "template", "build", "-f", file); !strings.Contains(out, "tools@1") {
		t.Fatalf("build: %s", out)
	}
	if out := sbx(0, "template", "ls"); !strings.Contains(out, "tools") || !strings.Contains(out, "mine") {
		t.Fatalf("template ls: %s", out)
	}
	if err := json.Unmarshal([]byte(sbx(0, "create", "--template", "tools", "--wait", "-o", "json")), &sb); err != nil {
		t.Fatal(err)
	}
	if out := sbx(0, "exec", sb.ID, "--", "sh", "-c", "cat /app/hello /app/data.txt; echo $MODE"); out != "hello\nfrom a file\nready\n" {
		t.Fatalf("a sandbox of the template: %q", out)
	}
	sbx(1, "template", "rm", "tools@1") // in use
	sbx(0, "terminate", sb.ID, "--wait")
	sbx(0, "template", "rm", "tools@1")
	os.WriteFile(file, []byte("name: x\nbaseImage: y\nsteps: [{run: [a], file: {path: /b}}]\n"), 0o644)
	sbx(1, "template", "build", "-f", file)
}
