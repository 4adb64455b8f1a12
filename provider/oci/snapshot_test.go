package oci_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

// fromTemplate allocates generation gen of id from the template tref and fails unless it is ready.
func fromTemplate(t *testing.T, p *oci.Provider, id sandbox.ID, gen sandbox.Generation, tref string) (sandbox.Ref, string) {
	t.Helper()
	ref := sandbox.Ref{ID: id, Generation: gen}
	spec := sandbox.Spec{ClientRequestID: "t", Template: tref}
	if err := p.ValidateSpec(spec); err != nil {
		t.Fatalf("validate %s: %v", tref, err)
	}
	obs, err := p.Allocate(ctxFor(t), ref, spec)
	if err != nil || obs.State != sandbox.ObservedReady {
		t.Fatalf("allocate %s: %+v, %v", tref, obs, err)
	}
	var info struct{ Reference, Digest string }
	if err := json.Unmarshal(obs.Extensions[oci.TemplateExtension], &info); err != nil || info.Reference != tref {
		t.Fatalf("%s: providerExtensions %s, %v", tref, obs.Extensions, err)
	}
	return ref, info.Digest
}

// TestSnapshotAndFork: a snapshot keeps the files a sandbox wrote, those it deleted (whiteouts) and
// the directories it replaced (opaque); ten forks of it start with all that and write independently.
// Links the sandbox planted out of its root lead, in a fork, to the fork's own files.
func TestSnapshotAndFork(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, _ := reg.Push(t, "snap/busybox:1", imagetest.BusyboxImage(t, "from the image"))
	dir := testenv.StateDir(t)
	p := imageProvider(t, dir, reg)
	m, err := p.Manifest(ctxFor(t))
	if err != nil || !m.Capabilities.FilesystemSnapshot || !m.Capabilities.TemplateReference {
		t.Fatalf("manifest %+v, %v", m, err)
	}
	ref, obs := fromImage(t, p, tagged)
	if obs.State != sandbox.ObservedReady {
		t.Fatalf("%+v", obs)
	}
	if res := sh(t, p, ref, `set -e; echo kept > /kept; rm /etc/greeting; rm -rf /srv; mkdir /srv; echo new > /srv/new
		ln -s /etc/hostname /out; ln -s ../../../../../../../../etc/passwd /srv/up; mkfifo /fifo
		mknod /dev/null2 c 1 3 2>/dev/null || true; echo 'sandboxed:x:0:0::/:/bin/sh' > /etc/passwd`); code(res) != 0 {
		t.Fatalf("%+v", res)
	}
	sn, err := p.Snapshot(ctxFor(t), ref, sandbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox runs on, thawed.
	if res := sh(t, p, ref, "cat /kept"); res.Stdout != "kept\n" {
		t.Fatalf("after the snapshot: %+v", res)
	}
	if got, err := p.GetSnapshot(ctxFor(t), sn.ID); err != nil || got.Digest != sn.Digest || got.SandboxID != ref.ID || got.Layers != 3 {
		t.Fatalf("get %s: %+v, %v", sn.ID, got, err)
	}
	const n = 10
	forks := make([]sandbox.Ref, n)
	var wg sync.WaitGroup
	for i := range forks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			forks[i], _ = fromTemplate(t, p, sandbox.NewID(), 1, sn.ID)
		}()
	}
	wg.Wait()
	for i, f := range forks {
		res := sh(t, p, f, fmt.Sprintf(`cat /kept; ls /etc/greeting 2>&1 | grep -c 'No such'; ls /srv; test -p /fifo && echo fifo
			readlink /out; cat /srv/up; echo %d > /mine`, i))
		want := "kept\n1\nnew\nup\nfifo\n/etc/hostname\nsandboxed:x:0:0::/:/bin/sh\n"
		if res.Stdout != want {
			t.Fatalf("fork %d: %q (%s), want %q", i, res.Stdout, res.Stderr, want)
		}
	}
	for i, f := range forks {
		if res := sh(t, p, f, "cat /mine"); res.Stdout != fmt.Sprintf("%d\n", i) {
			t.Fatalf("fork %d sees %q", i, res.Stdout)
		}
	}
	if res := sh(t, p, ref, "ls /mine 2>&1 | grep -c 'No such'"); res.Stdout != "1\n" {
		t.Fatalf("the forks' writes show in the sandbox they came from: %+v", res)
	}
	// Refused while forks run on it; removed once they are gone.
	if err := p.RemoveSnapshot(ctxFor(t), sn.ID); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("remove in use: %v", err)
	}
	for _, f := range forks {
		if err := p.Release(ctxFor(t), f); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.RemoveSnapshot(ctxFor(t), sn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.GetSnapshot(ctxFor(t), sn.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("after remove: %v", err)
	}
}

// TestTemplateVersions: a template's name runs its newest version, name@version and name@sha256 pin
// one; a recreate of a sandbox of a name runs the version its first generation ran; a template in use
// cannot be removed.
func TestTemplateVersions(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, _ := reg.Push(t, "tpl/busybox:1", imagetest.BusyboxImage(t, "tpl"))
	p := imageProvider(t, testenv.StateDir(t), reg)
	src, _ := fromImage(t, p, tagged)
	sh(t, p, src, "echo one > /v")
	v1, err := p.Snapshot(ctxFor(t), src, sandbox.SnapshotOptions{Name: "py"})
	if err != nil || len(v1.Templates) != 1 || v1.Templates[0] != "py@1" {
		t.Fatalf("%+v, %v", v1, err)
	}
	id := sandbox.NewID()
	first, d := fromTemplate(t, p, id, 1, "py")
	if d != v1.Digest {
		t.Fatalf("py runs %s, want %s", d, v1.Digest)
	}
	sh(t, p, src, "echo two > /v")
	v2, err := p.Snapshot(ctxFor(t), src, sandbox.SnapshotOptions{Name: "py"})
	if err != nil {
		t.Fatal(err)
	}
	for tref, want := range map[string]string{"py": "two", "py@1": "one", "py@2": "two", "py@" + v1.Digest: "one", v2.Digest: "two"} {
		ref, _ := fromTemplate(t, p, sandbox.NewID(), 1, tref)
		if res := sh(t, p, ref, "cat /v"); res.Stdout != want+"\n" {
			t.Fatalf("%s: %q, want %q", tref, res.Stdout, want)
		}
		if err := p.Release(ctxFor(t), ref); err != nil {
			t.Fatal(err)
		}
	}
	// The recreate of the sandbox of "py" runs what its first generation ran, not the newer version.
	if err := p.Release(ctxFor(t), first); err != nil {
		t.Fatal(err)
	}
	_, d = fromTemplate(t, p, id, 2, "py")
	if d != v1.Digest {
		t.Fatalf("the recreate runs %s, its first generation %s", d, v1.Digest)
	}
	if err := p.RemoveTemplate(ctxFor(t), "py@1"); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("remove py@1 in use: %v", err)
	}
	tpl, err := p.Template(ctxFor(t), "py")
	if err != nil || len(tpl.Versions) != 2 || tpl.Versions[0].Users != 1 {
		t.Fatalf("%+v, %v", tpl, err)
	}
	if err := p.RemoveTemplate(ctxFor(t), "py@2"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"py@3", "nope"} {
		ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
		obs, err := p.Allocate(ctxFor(t), ref, sandbox.Spec{ClientRequestID: "t", Template: bad})
		if err != nil || obs.State != sandbox.ObservedFailed || obs.Reason != "template_not_found" {
			t.Fatalf("%s: %+v, %v", bad, obs, err)
		}
	}
	if err := p.ValidateSpec(sandbox.Spec{ClientRequestID: "t", Template: "Not/A/Name"}); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("a malformed template: %v", err)
	}
}

// TestSnapshotRefusals: a sandbox on the shared root has no root of its own to snapshot; one that
// plants a file larger than its disk (sparse) cannot make the store write it.
func TestSnapshotRefusals(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, _ := reg.Push(t, "refuse/busybox:1", imagetest.BusyboxImage(t, "r"))
	dir := testenv.StateDir(t)
	p := imageProvider(t, dir, reg)
	plain := ready(t, p, nil)
	if _, err := p.Snapshot(ctxFor(t), plain, sandbox.SnapshotOptions{}); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("snapshot on the shared root: %v", err)
	}
	ref, _ := fromImage(t, p, tagged)
	if res := sh(t, p, ref, "truncate -s 1099511627776 /huge && echo ok"); res.Stdout != "ok\n" {
		t.Skipf("the disk takes no 1 TiB sparse file: %+v", res)
	}
	if _, err := p.Snapshot(ctxFor(t), ref, sandbox.SnapshotOptions{}); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("a 1 TiB sparse file: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "images", "tmp")); len(ents) != 0 {
		t.Fatalf("a refused snapshot left %d entries in tmp/", len(ents))
	}
	if res := sh(t, p, ref, "rm /huge; echo thawed"); res.Stdout != "thawed\n" {
		t.Fatalf("after a refused snapshot: %+v", res)
	}
}

// TestSnapshotNoLeaks: cycles of create, snapshot, fork and release leave no mount, container or
// directory behind, and the snapshots go with their removal.
func TestSnapshotNoLeaks(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, _ := reg.Push(t, "sleak/busybox:1", imagetest.BusyboxImage(t, "l"))
	dir := testenv.StateDir(t)
	p := imageProvider(t, dir, reg)
	before := measure(t, dir)
	for i := 0; i < 10; i++ {
		ref, _ := fromImage(t, p, tagged)
		sh(t, p, ref, fmt.Sprintf("echo %d > /n", i))
		sn, err := p.Snapshot(ctxFor(t), ref, sandbox.SnapshotOptions{Name: "leak"})
		if err != nil {
			t.Fatal(err)
		}
		f1, _ := fromTemplate(t, p, sandbox.NewID(), 1, sn.ID)
		f2, _ := fromTemplate(t, p, sandbox.NewID(), 1, "leak")
		if res := sh(t, p, f2, "cat /n"); res.Stdout != fmt.Sprintf("%d\n", i) {
			t.Fatalf("cycle %d: %+v", i, res)
		}
		for _, r := range []sandbox.Ref{ref, f1, f2} {
			endCycle(t, p, r, i, i%3 == 0)
		}
	}
	if after := measure(t, dir); after != before {
		t.Fatalf("10 cycles left something behind: before %+v, after %+v", before, after)
	}
	if err := p.RemoveTemplate(ctxFor(t), "leak"); err != nil {
		t.Fatal(err)
	}
	if list, err := p.Snapshots(ctxFor(t)); err != nil || len(list) != 0 {
		t.Fatalf("snapshots left: %d, %v", len(list), err)
	}
	if n, err := p.ImageStore().Prune(); err != nil || n != 10 {
		t.Fatalf("prune: %d layers, %v; want the 10 snapshots'", n, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "images", "tmp")); len(ents) != 0 {
		t.Fatalf("tmp/ holds %d entries", len(ents))
	}
}
