package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

// needOCI skips a test where the oci provider cannot run, except in CI, where it must.
func needOCI(t *testing.T) {
	t.Helper()
	if ok, why := oci.Available(); !ok {
		if os.Getenv("CI") != "" {
			t.Fatalf("the oci provider must run in CI: %s", why)
		}
		t.Skipf("oci provider unavailable here: %s", why)
	}
}

// TestOCISandboxesSurviveDaemonSIGKILL kills a daemon running real runc sandboxes with SIGKILL, restarts it
// on the same data dir, and finds the sandboxes ready with their files, commands working, a sandbox whose
// container vanished meanwhile failed with a reason, and nothing left of a terminated one: on the
// defaults, where sandboxes take containers of the warm pool, and without a pool, where each starts its
// own.
func TestOCISandboxesSurviveDaemonSIGKILL(t *testing.T) {
	needOCI(t)
	t.Run("defaults", func(t *testing.T) { survivesSIGKILL(t, true) })
	t.Run("no pool", func(t *testing.T) { survivesSIGKILL(t, false, "--oci-warm-pool", "0") })
}

func survivesSIGKILL(t *testing.T, pooled bool, flags ...string) {
	ctx := context.Background()
	dataDir := testenv.StateDir(t)
	removeContainersAtEnd(t, dataDir)
	flags = append([]string{"--provider", "oci"}, flags...)
	d := startDaemon(t, dataDir, flags...)
	if pooled {
		// The pool warms one entry after another, each once the one before answers: with the last
		// entry's directory there, the three sandboxes below find three idle entries.
		// (Spares wait in the same directory, named spare-.)
		entries := func() (n int) {
			ents, _ := os.ReadDir(filepath.Join(dataDir, "oci", "pool"))
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), "pool-") {
					n++
				}
			}
			return n
		}
		for deadline := time.Now().Add(30 * time.Second); entries() < DefaultOCIWarmPool; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the default pool holds %d entries, want %d", entries(), DefaultOCIWarmPool)
			}
		}
	}

	mk := func(key string) sandbox.Sandbox {
		var sb sandbox.Sandbox
		if st := call(ctx, "POST", d.url+"/v1/sandboxes", map[string]any{"clientRequestId": key}, &sb); st != 201 {
			t.Fatalf("create %s: %d", key, st)
		}
		waitFor(t, d.url, sb.ID, sandbox.StateReady)
		return sb
	}
	kept, vanished, gone := mk("kept"), mk("vanished"), mk("gone")
	vanishedC, goneC := containerOf(t, dataDir, vanished), containerOf(t, dataDir, gone)
	for _, c := range []string{containerOf(t, dataDir, kept), vanishedC, goneC} {
		if strings.HasPrefix(c, "pool-") != pooled {
			t.Fatalf("container %s: from the pool %v, want %v", c, !pooled, pooled)
		}
	}
	put := fmt.Sprintf("%s/v1/sandboxes/%s/files/content", d.url, kept.ID)
	if st := call(ctx, "PUT", put, map[string]any{"expectedGeneration": 1, "path": "state.txt",
		"contentBase64": base64.StdEncoding.EncodeToString([]byte("kept across a crash"))}, nil); st != 200 {
		t.Fatalf("write: %d", st)
	}
	if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/actions/terminate", d.url, gone.ID), map[string]any{"expectedGeneration": 1}, nil); st != 200 {
		t.Fatalf("terminate: %d", st)
	}

	d.kill()
	// Behind the dead daemon's back, the container of one sandbox goes away.
	runc := func(args ...string) {
		out, err := runCmd("runc", append([]string{"--root", dataDir + "/oci/runc"}, args...)...)
		if err != nil {
			t.Logf("runc %v: %v\n%s", args, err, out)
		}
	}
	runc("kill", vanishedC, "KILL")
	time.Sleep(200 * time.Millisecond)
	runc("delete", "--force", vanishedC)

	d = startDaemon(t, dataDir, flags...)
	var got sandbox.Sandbox
	call(ctx, "GET", d.url+"/v1/sandboxes/"+string(kept.ID), nil, &got)
	if got.State != sandbox.StateReady || got.Generation != 1 {
		t.Fatalf("kept sandbox after restart: %+v", got)
	}
	var file struct{ ContentBase64 string }
	if st := call(ctx, "GET", fmt.Sprintf("%s/v1/sandboxes/%s/files/content?path=state.txt&expectedGeneration=1", d.url, kept.ID), nil, &file); st != 200 {
		t.Fatalf("read after restart: %d", st)
	}
	if b, _ := base64.StdEncoding.DecodeString(file.ContentBase64); string(b) != "kept across a crash" {
		t.Fatalf("file after restart: %q", b)
	}
	var res sandbox.CommandResult
	if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/commands", d.url, kept.ID),
		map[string]any{"expectedGeneration": 1, "argv": []string{"cat", "state.txt"}}, &res); st != 200 || res.Stdout != "kept across a crash" {
		t.Fatalf("exec after restart: %d %+v", st, res)
	}
	failed := waitFor(t, d.url, vanished.ID, sandbox.StateFailed)
	if failed.Failure == nil || failed.Failure.Code == "" {
		t.Fatalf("vanished sandbox failed without a reason: %+v", failed)
	}
	if names, err := runcList(filepath.Join(dataDir, "oci", "runc")); err != nil || slices.Contains(names, goneC) {
		t.Fatalf("a terminated sandbox's container %s is still there (%v): %v", goneC, err, names)
	}
}

// containerOf returns the name runc knows sb's container by, from the provider's record of the
// sandbox: the name of the pool entry it took, or else its own.
func containerOf(t *testing.T, dataDir string, sb sandbox.Sandbox) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dataDir, "oci", "sandboxes", sb.Ref().Name(), "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Container string }
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("sandbox %s: %s: %v", sb.ID, raw, err)
	}
	if m.Container == "" {
		return sb.Ref().Name()
	}
	return m.Container
}

// waitFor polls a sandbox until it reaches want, for at most 30 s.
func waitFor(t *testing.T, url string, id sandbox.ID, want sandbox.State) sandbox.Sandbox {
	t.Helper()
	return waitForWithin(t, url, id, want, 30*time.Second)
}

// waitForWithin polls a sandbox until it reaches want, for at most d.
func waitForWithin(t *testing.T, url string, id sandbox.ID, want sandbox.State, d time.Duration) sandbox.Sandbox {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var sb sandbox.Sandbox
		call(context.Background(), "GET", url+"/v1/sandboxes/"+string(id), nil, &sb)
		if sb.State == want {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s, want %s (failure %+v)", id, sb.State, want, sb.Failure)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeContainersAtEnd kills and deletes, when the test ends and after its daemons are gone, every
// container left under dataDir's oci state: a daemon killed by the test leaves its sandboxes running,
// and the temporary directory that names them is removed next.
func removeContainersAtEnd(t *testing.T, dataDir string) { removeContainersAtEndOf(t, dataDir, "runc") }

// removeContainersAtEndOf is removeContainersAtEnd for the containers of another OCI runtime (a runsc),
// which also unmounts what runsc pins in its root.
func removeContainersAtEndOf(t *testing.T, dataDir, runtime string) {
	t.Cleanup(func() {
		root := filepath.Join(dataDir, "oci", "runc")
		if _, err := os.Stat(root); err != nil {
			return // no oci state: nothing was started
		}
		// A daemon killed while it started a container (a warm pool entry, say) leaves its runc run
		// going: the container would appear after the listing below.
		oci.WaitRuntimes(context.Background(), root, 10*time.Second)
		names, err := runtimeList(runtime, root)
		if err != nil {
			t.Error(err)
		}
		for _, c := range names {
			runCmd(runtime, "--root", root, "kill", c, "KILL")
			for i := 0; i < 100; i++ {
				if _, err := runCmd(runtime, "--root", root, "delete", c); err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			runCmd(runtime, "--root", root, "delete", "--force", c)
		}
		// runsc's empty network namespace, bound in its root for the next sandbox.
		for unix.Unmount(filepath.Join(root, "null-netns"), unix.MNT_DETACH) == nil {
		}
		// The disk of a sandbox whose container a killed daemon was starting, still mounted on the host;
		// its loop device frees itself with the unmount.
		disks, _ := filepath.Glob(filepath.Join(dataDir, "oci", "*", "*", "disk"))
		for _, d := range disks {
			if err := unix.Unmount(d, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
				t.Errorf("unmount %s: %v", d, err)
			}
		}
	})
}

// runcList lists runc's containers under root.
func runcList(root string) ([]string, error) { return runtimeList("runc", root) }

// runtimeList lists the containers under root of an OCI runtime. runc fails a listing when a
// container's state directory goes while it reads them (a daemon deleting one meanwhile): it is asked
// again.
func runtimeList(runtime, root string) ([]string, error) {
	var out string
	var err error
	for i := 0; i < 50; i++ {
		if out, err = runCmd(runtime, "--root", root, "list", "--quiet"); err == nil {
			return strings.Fields(out), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("%s list: %v\n%s", filepath.Base(runtime), err, out)
}

func runCmd(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// TestOCICreateCutByCrashFinishes: a daemon SIGKILLed while its create is inside the runtime's `run`
// (the sandbox's directory laid out, no container yet) finishes that allocation at its next start: the
// sandbox becomes ready, runs commands, and terminates leaving nothing, instead of failing with
// container_missing and holding its disk until terminated.
func TestOCICreateCutByCrashFinishes(t *testing.T) {
	needOCI(t)
	ctx := context.Background()
	dataDir := testenv.StateDir(t)
	removeContainersAtEnd(t, dataDir)
	real, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal(err)
	}
	// A runtime whose `run` never returns, as a runc killed with its daemon would have left it.
	wrapper := filepath.Join(t.TempDir(), "runc")
	marker := wrapper + ".run"
	script := fmt.Sprintf("#!/bin/sh\nfor a; do [ \"$a\" = run ] && echo $$ > %q && exec sleep 600; done\nexec %q \"$@\"\n", marker, real)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dataDir, "--provider", "oci", "--oci-warm-pool", "0", "--oci-runtime", wrapper)
	created := make(chan sandbox.Sandbox, 1)
	go func() {
		var sb sandbox.Sandbox
		call(ctx, "POST", d.url+"/v1/sandboxes", map[string]any{"clientRequestId": "cut"}, &sb)
		created <- sb
	}()
	var pid int
	for deadline := time.Now().Add(30 * time.Second); pid == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the create never reached the runtime's run")
		}
		raw, _ := os.ReadFile(marker)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(raw)))
	}
	d.kill()
	<-created
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
	var listed struct{ Sandboxes []sandbox.Sandbox }
	d = startDaemon(t, dataDir, "--provider", "oci", "--oci-warm-pool", "0")
	if st := call(ctx, "GET", d.url+"/v1/sandboxes", nil, &listed); st != 200 || len(listed.Sandboxes) != 1 {
		t.Fatalf("list after restart: %d %+v", st, listed)
	}
	sb := waitFor(t, d.url, listed.Sandboxes[0].ID, sandbox.StateReady)
	var res sandbox.CommandResult
	if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/commands", d.url, sb.ID),
		map[string]any{"expectedGeneration": 1, "argv": []string{"echo", "finished"}}, &res); st != 200 || res.Stdout != "finished\n" {
		t.Fatalf("exec after restart: %d %+v", st, res)
	}
	if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/actions/terminate", d.url, sb.ID), map[string]any{"expectedGeneration": 1}, nil); st != 200 {
		t.Fatalf("terminate: %d", st)
	}
	waitFor(t, d.url, sb.ID, sandbox.StateTerminated)
	if ents, err := os.ReadDir(filepath.Join(dataDir, "oci", "sandboxes")); err != nil || len(ents) != 0 {
		t.Fatalf("left after terminate: %v %v", ents, err)
	}
}
