package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestOCISnapshotSurvivesSIGKILL kills the daemon with SIGKILL while it captures a snapshot (its
// layer half-written under the store's tmp/), restarts it on the same data dir, and finds the store
// consistent: no snapshot, no template version, nothing in tmp/; the sandbox the snapshot froze runs
// again (thawed at start-up), and a new snapshot of it is whole and survives a second kill.
func TestOCISnapshotSurvivesSIGKILL(t *testing.T) {
	needOCI(t)
	ctx := context.Background()
	reg := imagetest.StartRegistry(t)
	tagged, _ := reg.Push(t, "kill/busybox:1", imagetest.BusyboxImage(t, "k"))
	dataDir := testenv.StateDir(t)
	removeContainersAtEnd(t, dataDir)
	flags := []string{"--provider", "oci", "--oci-warm-pool", "0", "--insecure-registry", reg.Host}
	d := startDaemon(t, dataDir, flags...)
	var sb sandbox.Sandbox
	if st := call(ctx, "POST", d.url+"/v1/sandboxes", map[string]any{"clientRequestId": "k", "image": tagged,
		"resources": map[string]any{"diskMiB": 2048}}, &sb); st != 201 {
		t.Fatalf("create: %d", st)
	}
	waitFor(t, d.url, sb.ID, sandbox.StateReady)
	var res sandbox.CommandResult
	// 1 GiB of files that do not compress away: the capture takes long enough to be killed in.
	script := "i=0; while [ $i -lt 16 ]; do cat /bin/busybox /bin/busybox /bin/busybox /bin/busybox /bin/busybox /bin/busybox /bin/busybox /bin/busybox > /big$i; i=$((i+1)); done; echo ok"
	if st := call(ctx, "POST", d.url+"/v1/sandboxes/"+string(sb.ID)+"/commands", map[string]any{"expectedGeneration": 1,
		"argv": []string{"sh", "-c", script}, "timeoutSeconds": 300}, &res); st != 200 || res.Stdout != "ok\n" {
		t.Fatalf("fill: %d %+v", st, res)
	}
	tmp := filepath.Join(dataDir, "oci", "images", "tmp")
	go call(ctx, "POST", d.url+"/v1/sandboxes/"+string(sb.ID)+"/snapshots", map[string]any{"expectedGeneration": 1, "name": "killed"}, nil)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Millisecond) {
		m, _ := filepath.Glob(filepath.Join(tmp, "snapshot-*", "root", "big*"))
		if len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the snapshot never started writing its layer")
		}
	}
	d.kill()

	d = startDaemon(t, dataDir, flags...)
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("tmp/ holds %d entries after the restart", len(ents))
	}
	var snaps struct{ Snapshots []sandbox.SnapshotInfo }
	if st := call(ctx, "GET", d.url+"/v1/snapshots", nil, &snaps); st != 200 || len(snaps.Snapshots) != 0 {
		t.Fatalf("snapshots after the kill: %d %+v", st, snaps)
	}
	if st := call(ctx, "GET", d.url+"/v1/templates/killed", nil, nil); st != 404 {
		t.Fatalf("the killed snapshot's template: %d", st)
	}
	waitFor(t, d.url, sb.ID, sandbox.StateReady)
	if st := call(ctx, "POST", d.url+"/v1/sandboxes/"+string(sb.ID)+"/commands", map[string]any{"expectedGeneration": 1,
		"argv": []string{"sh", "-c", "rm /big1*; echo thawed"}, "timeoutSeconds": 30}, &res); st != 200 || res.Stdout != "thawed\n" {
		t.Fatalf("the sandbox after the restart: %d %+v", st, res)
	}
	var sn sandbox.SnapshotInfo
	if st := call(ctx, "POST", d.url+"/v1/sandboxes/"+string(sb.ID)+"/snapshots", map[string]any{"expectedGeneration": 1, "name": "whole"}, &sn); st != 201 {
		t.Fatalf("snapshot after the restart: %d", st)
	}
	d.kill()
	d = startDaemon(t, dataDir, flags...)
	var got sandbox.SnapshotInfo
	if st := call(ctx, "GET", d.url+"/v1/snapshots/"+sn.ID, nil, &got); st != 200 || got.Digest != sn.Digest || len(got.Templates) != 1 {
		t.Fatalf("the snapshot after a second kill: %d %+v", st, got)
	}
	var fork struct{ SandboxIDs []sandbox.ID }
	if st := call(ctx, "POST", d.url+"/v1/snapshots/"+sn.ID+"/fork", map[string]any{"count": 1}, &fork); st != 201 || len(fork.SandboxIDs) != 1 {
		t.Fatalf("fork: %d %+v", st, fork)
	}
	waitFor(t, d.url, fork.SandboxIDs[0], sandbox.StateReady)
	if st := call(ctx, "POST", d.url+"/v1/sandboxes/"+string(fork.SandboxIDs[0])+"/commands", map[string]any{"expectedGeneration": 1,
		"argv": []string{"sh", "-c", "ls /big0 /big1 2>&1 | grep -c 'No such'"}, "timeoutSeconds": 30}, &res); st != 200 || res.Stdout != "1\n" {
		t.Fatalf("the fork: %d %+v", st, res)
	}
}
