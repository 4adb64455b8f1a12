package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/gvisortest"
)

// needRunsc returns the runsc that gVisor's sandboxes run on: $SANDBOXD_RUNSC (scripts/test builds
// one), else runsc from PATH. Without one the test skips, except in CI, where it must run.
func needRunsc(t *testing.T) string {
	t.Helper()
	return gvisortest.Runtime(t, os.Getenv("SANDBOXD_RUNSC"), "runsc")
}

// memCounter counts in memory only and prints each count.
const memCounter = `import time
i = 0
while True:
    i += 1
    print(i, flush=True)
    time.sleep(0.05)
`

// countsPast reads process pid's output through the API from its first byte until it has printed a
// count past n, and returns every count it printed so far.
func countsPast(t *testing.T, c *client.Client, sb *sandbox.Sandbox, pid, n int) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := c.NewOutputReader(ctx, sb.ID, sb.Generation, pid, 0)
	defer r.Close()
	var got []int
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil {
			t.Fatalf("%s: output line %q", sb.ID, sc.Text())
		}
		got = append(got, v)
		if v > n {
			return got
		}
	}
	t.Fatalf("%s generation %d: the output ended (%v) at counts %v, none past %d", sb.ID, sb.Generation, sc.Err(), got, n)
	return nil
}

// inOrder fails unless c counts 1, 2, 3, ... without a gap or a restart.
func inOrder(t *testing.T, what string, c []int) {
	t.Helper()
	for i, v := range c {
		if v != i+1 {
			t.Fatalf("%s: count %d at %d (of %v): the counter restarted or skipped", what, v, i, c)
		}
	}
}

// TestOCICheckpointSurvivesDaemonSIGKILL: on gVisor, a process counting in memory is checkpointed
// through the API, the daemon is killed with SIGKILL and started again on the same data directory, and
// the sandbox, paused at the checkpoint, resumes from it with its counter going on where it was; a fork
// from the checkpoint counts on its own from the same count; a recreate of the terminated sandbox from
// it starts its next generation with the counter there too.
func TestOCICheckpointSurvivesDaemonSIGKILL(t *testing.T) {
	needOCI(t)
	runsc := needRunsc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dataDir := testenv.StateDir(t)
	removeContainersAtEndOf(t, dataDir, runsc)
	flags := []string{"--provider", "oci", "--oci-runtime", runsc, "--oci-warm-pool", "0"}
	d := startDaemon(t, dataDir, flags...)
	c, err := client.New(d.url)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.Runtime(ctx); err != nil || !info.Provider.Capabilities.MemorySnapshot || info.Provider.RuntimeClass != "gvisor" {
		t.Fatalf("runtime %+v %v, want gvisor with memorySnapshot", info, err)
	}
	created, err := c.Create(ctx, sandbox.Spec{ClientRequestID: "src"})
	if err != nil {
		t.Fatal(err)
	}
	sb := waitFor(t, d.url, created.ID, sandbox.StateReady)
	proc, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: []string{"python3", "-u", "-c", memCounter}})
	if err != nil {
		t.Fatal(err)
	}
	before := countsPast(t, c, &sb, proc.PID, 5)
	res, err := c.Checkpoint(ctx, sb.ID, sb.Generation, false)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	ckpt := res.Checkpoint.ID
	if res.State != sandbox.StatePaused {
		t.Fatalf("checkpoint %+v, want the sandbox paused at it", res)
	}

	d.kill()
	d = startDaemon(t, dataDir, flags...)
	if c, err = client.New(d.url); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, sb.ID); err != nil || got.State != sandbox.StatePaused {
		t.Fatalf("after the restart: %+v %v, want paused", got, err)
	}
	if list, err := c.Checkpoints(ctx, sb.ID); err != nil || len(list) != 1 || list[0].ID != ckpt {
		t.Fatalf("checkpoints after the restart: %+v %v", list, err)
	}
	if _, err := c.Resume(ctx, sb.ID, sb.Generation); err != nil {
		t.Fatalf("resume: %v", err)
	}
	sb = waitFor(t, d.url, sb.ID, sandbox.StateReady)
	at := before[len(before)-1]
	resumed := countsPast(t, c, &sb, proc.PID, at+20)
	inOrder(t, "across the checkpoint, the SIGKILL and the restore", resumed)

	// A fork from the checkpoint: its counter goes on from the checkpoint's count, its own.
	f, err := c.Create(ctx, client.ForkSpec(sandbox.Spec{ClientRequestID: "fork"}, sb.ID, ckpt))
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	fork := waitFor(t, d.url, f.ID, sandbox.StateReady)
	inOrder(t, "the fork", countsPast(t, c, &fork, proc.PID, at+5))
	if err := c.SignalProcess(ctx, fork.ID, fork.Generation, proc.PID, "KILL"); err != nil {
		t.Fatal(err)
	}
	if p, err := c.WaitProcess(ctx, fork.ID, fork.Generation, proc.PID, 10*time.Second); err != nil || p.Running {
		t.Fatalf("the fork's counter after a KILL: %+v %v", p, err)
	}
	src := countsPast(t, c, &sb, proc.PID, resumed[len(resumed)-1]+20)
	inOrder(t, "the source after its fork's counter ended", src)
	if p, err := c.GetProcess(ctx, sb.ID, sb.Generation, proc.PID); err != nil || !p.Running {
		t.Fatalf("the source's counter: %+v %v", p, err)
	}

	// A recreate from the checkpoint, once the sandbox is terminated (which leaves its checkpoints):
	// the next generation starts at it.
	if _, err := c.Terminate(ctx, sb.ID, sb.Generation); err != nil {
		t.Fatal(err)
	}
	waitFor(t, d.url, sb.ID, sandbox.StateTerminated)
	spec := client.ForkSpec(sandbox.Spec{ClientRequestID: "again"}, sb.ID, ckpt)
	if _, err := c.Recreate(ctx, sb.ID, sb.Generation, spec); err != nil {
		t.Fatalf("recreate from the checkpoint: %v", err)
	}
	next := waitFor(t, d.url, sb.ID, sandbox.StateReady)
	if next.Generation != sb.Generation+1 {
		t.Fatalf("generation %d after the recreate, want %d", next.Generation, sb.Generation+1)
	}
	inOrder(t, "the next generation", countsPast(t, c, &next, proc.PID, at+5))
	if _, err := c.GetProcess(ctx, sb.ID, sb.Generation, proc.PID); !errors.Is(err, sandbox.ErrGenerationConflict) {
		t.Errorf("the process of the old generation: %v, want a generation conflict", err)
	}
	for _, s := range []sandbox.Sandbox{next, fork} {
		if _, err := c.Terminate(ctx, s.ID, s.Generation); err != nil {
			t.Fatal(err)
		}
		waitFor(t, d.url, s.ID, sandbox.StateTerminated)
	}
}
