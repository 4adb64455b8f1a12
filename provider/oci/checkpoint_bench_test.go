package oci_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// holder holds %d MiB of memory it has written to (no page is zero), and sleeps.
const holder = `import time
b = bytearray(b"\x5a" * (%d << 20))
print("held", flush=True)
while True:
    time.sleep(1)
`

// BenchmarkCheckpoint times a checkpoint that stops a gVisor sandbox, and the resume that restores
// it, with a process holding 16 and 256 MiB; beside them, in the same run, `runsc checkpoint` and
// `runsc restore` run directly on a container of the same root holding as much, the floor the
// provider's steps (the agent's suspend and wake, the copy of /workspace, the image's digests) add to.
//
//	SANDBOXD_RUNSC=... go test -run '^$' -bench BenchmarkCheckpoint -benchtime 5x ./provider/oci/
func BenchmarkCheckpoint(b *testing.B) {
	runsc := os.Getenv("SANDBOXD_RUNSC")
	if runsc == "" {
		b.Skip("SANDBOXD_RUNSC names no runsc")
	}
	dir := testenv.StateDir(b)
	cfg := testConfig(b, dir)
	cfg.Runtime = runsc
	p := newProviderWith(b, cfg)
	for _, mib := range []int{16, 256} {
		b.Run(fmt.Sprintf("provider/%dMiB", mib), func(b *testing.B) {
			ref := ready(b, p, &sandbox.Resources{MemoryMiB: 1024})
			if _, err := p.StartProcess(ctxFor(b), ref, sandbox.ProcessSpec{Argv: []string{"python3", "-u", "-c", fmt.Sprintf(holder, mib)}}); err != nil {
				b.Fatal(err)
			}
			time.Sleep(2 * time.Second) // the process has written its memory
			var ckpt, restore time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if _, err := p.Checkpoint(ctxFor(b), ref, false); err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				if err := p.Resume(ctxFor(b), ref); err != nil {
					b.Fatal(err)
				}
				ckpt += mid.Sub(start)
				restore += time.Since(mid)
			}
			b.ReportMetric(float64(ckpt.Milliseconds())/float64(b.N), "checkpoint-ms")
			b.ReportMetric(float64(restore.Milliseconds())/float64(b.N), "restore-ms")
		})
		b.Run(fmt.Sprintf("runsc/%dMiB", mib), func(b *testing.B) {
			benchRunsc(b, runsc, dir, mib)
		})
	}
}

// benchRunsc checkpoints and restores, with runsc alone, a container on the provider's root whose
// process holds mib MiB.
func benchRunsc(b *testing.B, runsc, stateDir string, mib int) {
	bundle := b.TempDir()
	spec := &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: filepath.Join(stateDir, "root"), Readonly: true},
		Process: &specs.Process{Args: []string{"/usr/bin/python3", "-u", "-c", fmt.Sprintf(holder, mib)}, Cwd: "/",
			Env: []string{"PATH=/usr/bin:/bin"}},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
			{Destination: "/usr", Type: "bind", Source: "/usr", Options: []string{"rbind", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs"},
		},
		Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: "pid"}, {Type: "mount"}, {Type: "ipc"}, {Type: "uts"}, {Type: "network"}}},
	}
	raw, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), raw, 0o644); err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	// The container's stdio is a file: a pipe would stay open as long as it runs.
	out, err := os.Create(filepath.Join(bundle, "out"))
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	run := func(args ...string) {
		b.Helper()
		c := exec.Command(runsc, append([]string{"--root", root, "--network=none"}, args...)...)
		c.Stdout, c.Stderr = out, out
		if err := c.Run(); err != nil {
			raw, _ := os.ReadFile(out.Name())
			b.Fatalf("runsc %v: %v: %s", args, err, raw)
		}
	}
	name := "bench-" + string(sandbox.NewID())
	// runsc pins an empty network namespace in its root (unmountNullNetNS), after the delete below.
	b.Cleanup(func() { unix.Unmount(filepath.Join(root, "null-netns"), unix.MNT_DETACH) })
	b.Cleanup(func() { exec.Command(runsc, "--root", root, "delete", "--force", name).Run() })
	run("run", "--detach", "--bundle", bundle, name)
	time.Sleep(2 * time.Second)
	var ckpt, restore time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		img := filepath.Join(b.TempDir(), "image")
		os.Mkdir(img, 0o700)
		start := time.Now()
		run("checkpoint", "--image-path", img, name)
		mid := time.Now()
		run("delete", "--force", name)
		run("restore", "--detach", "--image-path", img, "--bundle", bundle, name)
		ckpt += mid.Sub(start)
		restore += time.Since(mid)
		os.RemoveAll(img)
	}
	b.ReportMetric(float64(ckpt.Milliseconds())/float64(b.N), "checkpoint-ms")
	b.ReportMetric(float64(restore.Milliseconds())/float64(b.N), "restore-ms")
}
