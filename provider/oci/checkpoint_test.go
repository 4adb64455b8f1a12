package oci_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

// counter counts in memory only and prints each count, and writes it to a file it keeps open.
const counter = `import time
i = 0
f = open("/workspace/open.txt", "w")
while True:
    i += 1
    print(i, flush=True)
    f.write("%d\n" % i); f.flush()
    time.sleep(0.05)
`

// counts reads every number process pid printed so far.
func counts(t *testing.T, p *oci.Provider, ref sandbox.Ref, pid int) []int {
	t.Helper()
	var out []byte
	var after int64
	for {
		c, err := p.ReadOutput(ctxFor(t), ref, pid, after, 1<<20, 0)
		if err != nil {
			t.Fatalf("output of %d in %s: %v", pid, ref, err)
		}
		out = append(out, c.Data...)
		after = c.Start + int64(len(c.Data))
		if len(c.Data) == 0 {
			break
		}
	}
	var n []int
	for _, f := range strings.Fields(string(out)) {
		v, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("output %q", out)
		}
		n = append(n, v)
	}
	return n
}

// waitCount waits until process pid has printed a count past n, and returns its counts.
func waitCount(t *testing.T, p *oci.Provider, ref sandbox.Ref, pid, n int) []int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := counts(t, p, ref, pid)
		if len(c) > 0 && c[len(c)-1] > n {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: counts %v, none past %d", ref, c, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// consecutive fails unless c counts 1, 2, 3, ... without a gap or a restart.
func consecutive(t *testing.T, what string, c []int) {
	t.Helper()
	for i, v := range c {
		if v != i+1 {
			t.Fatalf("%s: count %d at %d (of %v): the counter restarted or skipped", what, v, i, c)
		}
	}
}

func fork(id sandbox.ID, ckpt string) sandbox.Spec {
	v, _ := json.Marshal(map[string]string{"sandboxId": string(id), "checkpoint": ckpt})
	return sandbox.Spec{ClientRequestID: "f", Extensions: map[string]json.RawMessage{oci.CheckpointKey: v}}
}

// TestCheckpoint: on gVisor, a process counting in memory goes on from where it was after a
// checkpoint, a restart of the provider and the restore; its output journal and an open file come
// through; a fork from a checkpoint counts on its own from the same count. A checkpoint altered on
// disk, or one that does not exist, is refused.
func TestCheckpoint(t *testing.T) {
	runsc := gvisorRuntime(t)
	dir := testenv.StateDir(t)
	cfg := testConfig(t, dir)
	cfg.Runtime = runsc
	first, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed { // the test failed before the restart
			releaseAll(t, first)
			first.Close()
		}
	})
	if m, _ := first.Manifest(ctxFor(t)); !m.Capabilities.MemorySnapshot {
		t.Error("gVisor's manifest says no memorySnapshot")
	}
	ref := ready(t, first, &sandbox.Resources{DiskMiB: 64})
	proc, err := first.StartProcess(ctxFor(t), ref, sandbox.ProcessSpec{Argv: []string{"python3", "-u", "-c", counter}})
	if err != nil {
		t.Fatal(err)
	}
	before := waitCount(t, first, ref, proc.PID, 5)

	info, err := first.Checkpoint(ctxFor(t), ref, false)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if obs, err := first.Observe(ctxFor(t), ref); err != nil || obs.State != sandbox.ObservedPaused {
		t.Fatalf("after a checkpoint: %+v %v, want paused", obs, err)
	}
	if _, err := first.Usage(ctxFor(t), ref); err != nil {
		t.Errorf("usage of a sandbox stopped at a checkpoint: %v", err)
	}
	// The daemon restarts: nothing of runsc's processes is left of the sandbox.
	closed = true
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	p := newProviderWith(t, cfg)
	if obs, err := p.Observe(ctxFor(t), ref); err != nil || obs.State != sandbox.ObservedPaused {
		t.Fatalf("after a restart: %+v %v, want paused", obs, err)
	}
	if list, err := p.Checkpoints(ctxFor(t), ref.ID); err != nil || len(list) != 1 || list[0].ID != info.ID {
		t.Fatalf("checkpoints %+v %v", list, err)
	}
	if err := p.Resume(ctxFor(t), ref); err != nil {
		t.Fatalf("resume from the checkpoint: %v", err)
	}
	if obs, err := p.Observe(ctxFor(t), ref); err != nil || obs.State != sandbox.ObservedReady {
		t.Fatalf("after the restore: %+v %v, want ready", obs, err)
	}
	after := waitCount(t, p, ref, proc.PID, before[len(before)-1]+5)
	consecutive(t, "journal across the restore", after)
	if res := sh(t, p, ref, "tail -n 1 /workspace/open.txt"); code(res) != 0 || strings.TrimSpace(res.Stdout) == "" {
		t.Errorf("the open file: %+v", res)
	} else if n, _ := strconv.Atoi(strings.TrimSpace(res.Stdout)); n <= before[len(before)-1] {
		t.Errorf("the open file ends at %d, the counter was past %d before", n, before[len(before)-1])
	}

	// A fork of a checkpoint that leaves the sandbox running.
	live, err := p.Checkpoint(ctxFor(t), ref, true)
	if err != nil {
		t.Fatalf("checkpoint, left running: %v", err)
	}
	at := counts(t, p, ref, proc.PID)
	mark := at[len(at)-1]
	forked := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	obs, err := p.Allocate(ctxFor(t), forked, withDisk(fork(ref.ID, live.ID), 64))
	if err != nil || obs.State != sandbox.ObservedReady {
		t.Fatalf("fork: %+v %v", obs, err)
	}
	fc := waitCount(t, p, forked, proc.PID, mark+5)
	consecutive(t, "the fork's journal", fc)
	// Independent: the fork's counter stops, the source's goes on; a file of one is not the other's.
	if err := p.SignalProcess(ctxFor(t), forked, proc.PID, "KILL"); err != nil {
		t.Fatal(err)
	}
	sh(t, p, forked, "echo fork > /workspace/only-in-fork")
	src := waitCount(t, p, ref, proc.PID, fc[len(fc)-1]+20)
	consecutive(t, "the source's journal", src)
	if res := sh(t, p, ref, "test -e /workspace/only-in-fork"); code(res) == 0 {
		t.Error("a file of the fork is in the source")
	}
	if gone, err := p.GetProcess(ctxFor(t), forked, proc.PID, 10*time.Second); err != nil || gone.Running {
		t.Errorf("the fork's killed counter: %+v %v", gone, err)
	}

	t.Run("hostile", func(t *testing.T) {
		for name, spec := range map[string]sandbox.Spec{
			"no such checkpoint":        fork(ref.ID, "ckpt_0123456789abcdef"),
			"no such sandbox":           fork(sandbox.NewID(), live.ID),
			"a name that is a path":     fork(ref.ID, "../../"+string(ref.ID)),
			"a sandbox id that is path": fork("..", live.ID),
		} {
			if err := p.ValidateSpec(spec); !errors.Is(err, sandbox.ErrInvalidRequest) {
				t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
			}
		}
		pages := filepath.Join(dir, "checkpoints", string(ref.ID), live.ID, "image", "pages.img")
		f, err := os.OpenFile(pages, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte("tampered"), 4096)
		f.Close()
		obs, err := p.Allocate(ctxFor(t), sandbox.Ref{ID: sandbox.NewID(), Generation: 1}, withDisk(fork(ref.ID, live.ID), 64))
		if err != nil || obs.State != sandbox.ObservedFailed || obs.Reason != "checkpoint_unusable" {
			t.Errorf("a fork of a tampered checkpoint: %+v %v, want failed checkpoint_unusable", obs, err)
		}
	})
}

// TestForkInADeepStateDir: on gVisor, a fork works under a state directory deep enough that its
// sandboxes' socket paths are longer than sockaddr_un holds (the provider binds and dials them
// through /proc/self/fd of their directory).
func TestForkInADeepStateDir(t *testing.T) {
	runsc := gvisorRuntime(t)
	cfg := testConfig(t, filepath.Join(testenv.StateDir(t), strings.Repeat("d", 64)))
	cfg.Runtime = runsc
	p := newProviderWith(t, cfg)
	ref := ready(t, p, nil)
	if n := len(filepath.Join(cfg.StateDir, "sandboxes", ref.Name(), "sock", "agent.sock")); n < 108 {
		t.Fatalf("a socket path of %d bytes fits sockaddr_un: the test shows nothing", n)
	}
	sh(t, p, ref, "echo before > /workspace/f")
	ckpt, err := p.Checkpoint(ctxFor(t), ref, true)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	forked := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if obs, err := p.Allocate(ctxFor(t), forked, fork(ref.ID, ckpt.ID)); err != nil || obs.State != sandbox.ObservedReady {
		t.Fatalf("fork: %+v %v", obs, err)
	}
	if res := sh(t, p, forked, "cat /workspace/f"); res.Stdout != "before\n" {
		t.Fatalf("the fork: %+v", res)
	}
}

func withDisk(spec sandbox.Spec, mib int64) sandbox.Spec {
	spec.Resources = &sandbox.Resources{DiskMiB: mib}
	return spec
}

// TestCheckpointOnRunc: runc has no memory snapshots: the manifest says so and both ways in refuse.
func TestCheckpointOnRunc(t *testing.T) {
	p := newProvider(t)
	if onGVisor(t, p) {
		t.Skip("the tests' runtime is gVisor")
	}
	if m, _ := p.Manifest(ctxFor(t)); m.Capabilities.MemorySnapshot {
		t.Error("runc's manifest says memorySnapshot")
	}
	ref := ready(t, p, nil)
	if _, err := p.Checkpoint(ctxFor(t), ref, true); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Errorf("checkpoint on runc: %v", err)
	}
	if err := p.ValidateSpec(fork(ref.ID, "ckpt_0123456789abcdef")); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Errorf("a fork on runc: %v", err)
	}
}
