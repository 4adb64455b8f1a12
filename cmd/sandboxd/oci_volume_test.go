package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestOCIVolumeSurvivesDaemonSIGKILL: a volume a sandbox writes keeps its data across a SIGKILL of the
// daemon while the sandbox runs: the sandbox, adopted, still writes it; the next one, after a
// terminate, reads both writes; once nothing mounts it, the volume is deleted and no mount of it is
// left on the host.
func TestOCIVolumeSurvivesDaemonSIGKILL(t *testing.T) {
	needOCI(t)
	ctx := context.Background()
	dataDir := testenv.StateDir(t)
	removeContainersAtEnd(t, dataDir)
	d := startDaemon(t, dataDir, "--provider", "oci")
	if st := call(ctx, "POST", d.url+"/v1/volumes", map[string]any{"name": "work", "sizeMiB": 16}, nil); st != 201 {
		t.Fatalf("create volume: %d", st)
	}
	mk := func(key string) sandbox.Sandbox {
		var sb sandbox.Sandbox
		spec := map[string]any{"clientRequestId": key, "extensions": map[string]any{
			"sandboxd.volumes": []any{map[string]any{"name": "work", "mountPath": "/data"}}}}
		if st := call(ctx, "POST", d.url+"/v1/sandboxes", spec, &sb); st != 201 {
			t.Fatalf("create %s: %d", key, st)
		}
		return waitFor(t, d.url, sb.ID, sandbox.StateReady)
	}
	run := func(sb sandbox.Sandbox, script string) string {
		var res sandbox.CommandResult
		if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/commands", d.url, sb.ID),
			map[string]any{"expectedGeneration": sb.Generation, "argv": []string{"sh", "-c", script}}, &res); st != 200 || res.ExitCode == nil || *res.ExitCode != 0 {
			t.Fatalf("%q: %d %+v", script, st, res)
		}
		return res.Stdout
	}
	first := mk("first")
	run(first, "echo before >> /data/log")
	d.kill()
	d = startDaemon(t, dataDir, "--provider", "oci")
	run(first, "echo after >> /data/log")
	if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/actions/terminate", d.url, first.ID), map[string]any{"expectedGeneration": 1}, nil); st != 200 {
		t.Fatalf("terminate: %d", st)
	}
	waitFor(t, d.url, first.ID, sandbox.StateTerminated)
	next := mk("next")
	if got := run(next, "cat /data/log"); got != "before\nafter\n" {
		t.Fatalf("the next sandbox reads %q", got)
	}
	if st := call(ctx, "DELETE", d.url+"/v1/volumes/work", nil, nil); st != 409 {
		t.Fatalf("delete while mounted: %d", st)
	}
	if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/actions/terminate", d.url, next.ID), map[string]any{"expectedGeneration": 1}, nil); st != 200 {
		t.Fatalf("terminate: %d", st)
	}
	waitFor(t, d.url, next.ID, sandbox.StateTerminated)
	if st := call(ctx, "DELETE", d.url+"/v1/volumes/work", nil, nil); st != 204 {
		t.Fatalf("delete: %d", st)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), filepath.Join(dataDir, "oci", "volumes")) {
		t.Errorf("a volume is still mounted:\n%s", mi)
	}
}
