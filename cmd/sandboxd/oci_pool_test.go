package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestOCIWarmPoolAcrossDaemonSIGKILL: with --oci-warm-pool, a sandbox takes a started container; the
// daemon is killed; the restarted daemon adopts that sandbox (its container keeps its pool name),
// discards the idle entries the dead one left, warms new ones, and a graceful stop removes those.
func TestOCIWarmPoolAcrossDaemonSIGKILL(t *testing.T) {
	needOCI(t)
	ctx := context.Background()
	dataDir := testenv.StateDir(t)
	removeContainersAtEnd(t, dataDir)
	runcRoot := filepath.Join(dataDir, "oci", "runc")
	containers := func() []string {
		t.Helper()
		names, err := runcList(runcRoot)
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	// poolFull waits until the pool directory holds n running containers, none of them in old.
	poolFull := func(n int, old ...string) []string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var pool []string
			for _, c := range containers() {
				if strings.HasPrefix(c, "pool-") {
					if _, err := os.Stat(filepath.Join(dataDir, "oci", "pool", c)); err == nil {
						pool = append(pool, c)
					}
				}
			}
			stale := false
			for _, c := range pool {
				stale = stale || slices.Contains(old, c)
			}
			if len(pool) == n && !stale {
				return pool
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d idle pool containers, want %d", len(pool), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	d := startDaemon(t, dataDir, "--provider", "oci", "--oci-warm-pool", "2")
	poolFull(2)
	time.Sleep(200 * time.Millisecond) // the last entry's agent answers a moment after its container runs
	var sb sandbox.Sandbox
	if st := call(ctx, "POST", d.url+"/v1/sandboxes", map[string]any{"clientRequestId": "pooled"}, &sb); st != 201 || sb.State != sandbox.StateReady {
		t.Fatalf("create: %d %+v", st, sb)
	}
	if c := containerOf(t, dataDir, sb); !strings.HasPrefix(c, "pool-") {
		t.Fatalf("the sandbox did not take a pool container: %s", c)
	}
	exec := func(d *daemon) {
		t.Helper()
		var res sandbox.CommandResult
		if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/commands", d.url, sb.ID),
			map[string]any{"expectedGeneration": 1, "argv": []string{"sh", "-c", "echo ok >> log; cat log"}}, &res); st != 200 {
			t.Fatalf("exec: %d %+v", st, res)
		}
	}
	exec(d)
	idle := poolFull(2) // refilled
	d.kill()

	d = startDaemon(t, dataDir, "--provider", "oci", "--oci-warm-pool", "2")
	if got := waitFor(t, d.url, sb.ID, sandbox.StateReady); got.Generation != 1 {
		t.Fatalf("after restart: %+v", got)
	}
	exec(d)
	poolFull(2, idle...) // the dead daemon's idle entries are discarded, new ones warmed
	for _, c := range containers() {
		if slices.Contains(idle, c) {
			t.Fatalf("the dead daemon's idle entry %s still runs", c)
		}
	}
	if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/actions/terminate", d.url, sb.ID), map[string]any{"expectedGeneration": 1}, nil); st != 200 {
		t.Fatalf("terminate: %d", st)
	}
	waitFor(t, d.url, sb.ID, sandbox.StateTerminated)

	// A graceful stop removes the idle entries too: nothing of the daemon's is left running.
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop on SIGTERM")
	}
	if left := containers(); len(left) != 0 {
		t.Fatalf("containers after a graceful stop: %v", left)
	}
	if ents, _ := os.ReadDir(filepath.Join(dataDir, "oci", "pool")); len(ents) != 0 {
		t.Fatalf("pool directories after a graceful stop: %d", len(ents))
	}
}
