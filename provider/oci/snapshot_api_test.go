package oci_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/image/imagetest"
)

// TestSnapshotsThroughTheAPI: snapshot, fork, template build and template runs end to end through
// the daemon's API, every answer checked against the document.
func TestSnapshotsThroughTheAPI(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, _ := reg.Push(t, "apisnap/busybox:1", imagetest.BusyboxImage(t, "base"))
	c := imageDaemon(t, reg)
	ctx := ctxFor(t)
	sb, err := c.Create(ctx, sandbox.Spec{ClientRequestID: "src", Image: tagged})
	if err != nil {
		t.Fatal(err)
	}
	if sb, err = c.WaitReady(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"sh", "-c", "echo src > /f"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(ctx, sb.ID, sb.Generation+1, ""); !errors.Is(err, sandbox.ErrGenerationConflict) {
		t.Fatalf("a stale generation: %v", err)
	}
	sn, err := c.Snapshot(ctx, sb.ID, sb.Generation, "app")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := c.Fork(ctx, sn.ID, 3, client.ForkOptions{ClientRequestID: "fork-a"})
	if err != nil || len(ids) != 3 {
		t.Fatalf("fork: %v, %v", ids, err)
	}
	again, err := c.Fork(ctx, sn.ID, 3, client.ForkOptions{ClientRequestID: "fork-a"})
	if err != nil || len(again) != 3 || again[0] != ids[0] {
		t.Fatalf("a repeated fork: %v, %v; first %v", again, err, ids)
	}
	for _, id := range ids {
		f, err := c.WaitReady(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Exec(ctx, f.ID, f.Generation, sandbox.Command{Argv: []string{"cat", "/f"}})
		if err != nil || res.Stdout != "src\n" {
			t.Fatalf("fork %s: %+v, %v", id, res, err)
		}
	}
	if _, err := c.Fork(ctx, "sha256:0000000000000000000000000000000000000000000000000000000000000000", 1, client.ForkOptions{}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("fork of no snapshot: %v", err)
	}
	if err := c.DeleteSnapshot(ctx, sn.ID); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("delete in use: %v", err)
	}
	list, err := c.Snapshots(ctx)
	if err != nil || len(list) != 1 || list[0].Users != 3 || len(list[0].Templates) != 1 {
		t.Fatalf("snapshots %+v, %v", list, err)
	}

	// A template built from the image and steps; a sandbox of it; its recreate runs the same digest
	// though a newer version exists.
	build := client.TemplateBuild{Name: "built", BaseImage: tagged, Env: []string{"BUILT=yes"}, Workdir: "/app", Steps: []client.TemplateStep{
		{Run: []string{"mkdir", "-p", "/app"}},
		{Run: []string{"/bin/busybox", "ln", "-s", "busybox", "/bin/chmod"}}, // a file's mode is set by the image's chmod
		{File: &client.TemplateFile{Path: "/app/run.sh", Content: []byte("#!/bin/sh\necho built $BUILT\n"), Mode: 0o755}},
		{Run: []string{"sh", "-c", "echo one > /app/v"}},
	}}
	tv, err := c.BuildTemplate(ctx, build)
	if err != nil || len(tv.Versions) != 1 || tv.Versions[0].Version != 1 {
		t.Fatalf("build: %+v, %v", tv, err)
	}
	u, err := c.Create(ctx, sandbox.Spec{ClientRequestID: "of-built", Template: "built"})
	if err != nil {
		t.Fatal(err)
	}
	if u, err = c.WaitReady(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, u.ID, u.Generation, sandbox.Command{Argv: []string{"sh", "-c", "./run.sh; cat v"}})
	if err != nil || res.Stdout != "built yes\none\n" {
		t.Fatalf("%+v, %v", res, err)
	}
	digestOf := func(sb *sandbox.Sandbox) string {
		var info struct{ Reference, Digest string }
		if err := json.Unmarshal(sb.ProviderExtensions["sandboxd.template"], &info); err != nil {
			t.Fatalf("providerExtensions %s: %v", sb.ProviderExtensions, err)
		}
		return info.Digest
	}
	first := digestOf(u)
	if first != tv.Versions[0].Digest {
		t.Fatalf("runs %s, built %s", first, tv.Versions[0].Digest)
	}
	build.Steps[3] = client.TemplateStep{Run: []string{"sh", "-c", "echo two > /app/v"}}
	if tv, err = c.BuildTemplate(ctx, build); err != nil || tv.Versions[0].Version != 2 {
		t.Fatalf("second build: %+v, %v", tv, err)
	}
	if u, err = c.Terminate(ctx, u.ID, u.Generation); err != nil {
		t.Fatal(err)
	}
	if _, err = c.WaitState(ctx, u.ID, sandbox.StateTerminated); err != nil {
		t.Fatal(err)
	}
	if u, err = c.Recreate(ctx, u.ID, u.Generation, sandbox.Spec{ClientRequestID: "of-built-2", Template: "built"}); err != nil {
		t.Fatal(err)
	}
	if u, err = c.WaitReady(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	if got := digestOf(u); got != first {
		t.Fatalf("the recreate runs %s, its first generation %s", got, first)
	}
	tpl, err := c.Template(ctx, "built")
	if err != nil || len(tpl.Versions) != 2 {
		t.Fatalf("%+v, %v", tpl, err)
	}
	if err := c.DeleteTemplate(ctx, "built@1"); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("delete built@1 in use: %v", err)
	}
	if err := c.DeleteTemplate(ctx, "built@2"); err != nil {
		t.Fatal(err)
	}
	// A failing step fails the build, and makes no version.
	bad := client.TemplateBuild{Name: "broken", BaseImage: tagged, Steps: []client.TemplateStep{{Run: []string{"false"}}}}
	if _, err := c.BuildTemplate(ctx, bad); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("a failing step: %v", err)
	}
	if _, err := c.Template(ctx, "broken"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("a failed build's template: %v", err)
	}
	if list, err := c.Templates(ctx); err != nil || len(list) != 2 {
		t.Fatalf("templates %+v, %v", list, err)
	}
}
