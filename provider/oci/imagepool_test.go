package oci_test

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

// imagePoolConfig is the configuration of a provider on runc pulling from reg, keeping pools of pools.
func imagePoolConfig(t *testing.T, dir string, reg *imagetest.Registry, pools ...oci.ImagePool) oci.Config {
	cfg := testConfig(t, dir)
	cfg.Runtime = "runc"
	cfg.InsecureRegistries = []string{reg.Host}
	cfg.ImagePools = pools
	return cfg
}

// waitImageEntries waits until the image pools hold n idle entries, each of digest, and returns them
// (container name -> digest).
func waitImageEntries(t *testing.T, p *oci.Provider, n int, digest string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := oci.ImagePoolEntries(p)
		if len(got) == n && !slices.ContainsFunc(slices.Collect(maps.Values(got)), func(d string) bool { return d != digest }) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the image pools hold %v, want %d entries of %s", got, n, digest)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// digestOf is the digest of a pinned reference (name@sha256:…).
func digestOf(pinned string) string { return pinned[strings.LastIndex(pinned, "@")+1:] }

// TestImageWarmPool: a create of the pooled image, by its tag or its digest, takes an idle entry of
// it and runs the image's files and Env, its writes its own; a create of another image, of the image
// with another disk, or on the shared root starts its own container. Removing the image while entries
// hold it is refused and says so. Once the tag is pulled anew, a create of it never gets an entry of
// the old digest, the pool moves to the new one, and the old image can be removed.
func TestImageWarmPool(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, pinned := reg.Push(t, "pooled/busybox:1", imagetest.BusyboxImage(t, "pooled"))
	other, _ := reg.Push(t, "other/busybox:1", imagetest.BusyboxImage(t, "other"))
	digest := digestOf(pinned)
	dir := testenv.StateDir(t)
	p := newProviderWith(t, imagePoolConfig(t, dir, reg, oci.ImagePool{Ref: tagged, Size: 2}))
	ctx := ctxFor(t)

	// Each create takes one of the entries idle before it, however it spells the image.
	var refs []sandbox.Ref
	for _, image := range []string{tagged, pinned, tagged} {
		idle := waitImageEntries(t, p, 2, digest)
		ref, obs := fromImage(t, p, image)
		if obs.State != sandbox.ObservedReady {
			t.Fatalf("%s: %+v", image, obs)
		}
		if c := oci.Container(p, ref); idle[c] != digest {
			t.Fatalf("%s: container %s, not one of the idle entries %v", image, c, idle)
		}
		if got := string(obs.Extensions[oci.ImageExtension]); !strings.Contains(got, `"reference":"`+image+`"`) || !strings.Contains(got, digest) {
			t.Fatalf("%s: providerExtensions %s", image, got)
		}
		refs = append(refs, ref)
	}
	// The image's files, Env and working directory; each sandbox's writes, and deletions, are its own.
	if res := sh(t, p, refs[0], `cat /etc/greeting; echo "$GREETING"; pwd; echo mine > /etc/greeting; rm /srv/owned; rm /bin/cat; ls /srv`); code(res) != 0 || res.Stdout != "pooled\npooled\n/srv\n" {
		t.Fatalf("in a pooled sandbox: %+v", res)
	}
	if err := p.WriteFile(ctx, refs[0], "a.txt", []byte("a\n")); err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs[1:] {
		if res := sh(t, p, ref, `cat /etc/greeting; ls /srv`); res.Stdout != "pooled\nowned\n" {
			t.Fatalf("another pooled sandbox sees the first one's writes: %+v", res)
		}
	}
	idle := waitImageEntries(t, p, 2, digest) // warmed after the writes: as untouched
	ref, _ := fromImage(t, p, tagged)
	if idle[oci.Container(p, ref)] != digest {
		t.Fatalf("container %s, not one of %v", oci.Container(p, ref), idle)
	}
	if res := sh(t, p, ref, `cat /etc/greeting; ls /srv`); res.Stdout != "pooled\nowned\n" {
		t.Fatalf("a later pooled sandbox sees an earlier one's writes: %+v", res)
	}
	refs = append(refs, ref)

	// Anything the entries cannot serve starts its own container; the idle entries stay.
	idle = waitImageEntries(t, p, 2, digest)
	cold := func(what string, spec sandbox.Spec) {
		t.Helper()
		ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
		obs, err := p.Allocate(ctx, ref, spec)
		if err != nil || obs.State != sandbox.ObservedReady || oci.Container(p, ref) != ref.Name() {
			t.Fatalf("%s: %+v %v, container %s", what, obs, err, oci.Container(p, ref))
		}
		if err := p.Release(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	cold("another image", sandbox.Spec{ClientRequestID: "t", Image: other})
	cold("another disk", sandbox.Spec{ClientRequestID: "t", Image: tagged, Resources: &sandbox.Resources{DiskMiB: 16}})
	cold("the shared root", sandbox.Spec{ClientRequestID: "t"})
	if got := oci.ImagePoolEntries(p); !maps.Equal(got, idle) {
		t.Fatalf("the idle entries changed under cold creates: %v, were %v", got, idle)
	}
	if s := p.PoolStats(); s.Hits != 4 || s.Target != 2 || s.Idle != 2 {
		t.Fatalf("pool stats %+v: want 4 hits of a target of 2", s)
	}

	// The image's holders: its sandboxes and the idle entries. Without sandboxes, a removal is still
	// refused, and says why.
	info, err := p.Image(ctx, tagged)
	if err != nil || info.Users != len(refs)+2 {
		t.Fatalf("image %+v %v: want %d users", info, err, len(refs)+2)
	}
	for _, ref := range refs {
		if err := p.Release(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.RemoveImage(ctx, tagged); !errors.Is(err, sandbox.ErrInvalidState) || !strings.Contains(err.Error(), "2 of them idle warm pool entries") {
		t.Fatalf("remove a pooled image: %v", err)
	}
	if info, err := p.Image(ctx, tagged); err != nil || info.Users != 2 {
		t.Fatalf("image after a refused removal: %+v %v", info, err)
	}

	// The tag moves: the next create of it runs the new bytes, from no entry of the old digest.
	_, movedPinned := reg.Push(t, "pooled/busybox:1", imagetest.BusyboxImage(t, "moved"))
	moved := digestOf(movedPinned)
	old := oci.ImagePoolEntries(p)
	if _, err := p.PullImage(ctx, tagged, nil); err != nil {
		t.Fatal(err)
	}
	ref, obs := fromImage(t, p, tagged)
	if obs.State != sandbox.ObservedReady || old[oci.Container(p, ref)] != "" {
		t.Fatalf("a create of the moved tag: %+v, container %s (old entries %v)", obs, oci.Container(p, ref), old)
	}
	if res := sh(t, p, ref, "cat /etc/greeting"); res.Stdout != "moved\n" {
		t.Fatalf("a create of the moved tag runs %+v", res)
	}
	if err := p.Release(ctx, ref); err != nil {
		t.Fatal(err)
	}
	waitImageEntries(t, p, 2, moved)
	ref, _ = fromImage(t, p, tagged)
	if c := oci.Container(p, ref); !strings.HasPrefix(c, "pool-") || old[c] != "" {
		t.Fatalf("a create of the moved tag once the pool moved: container %s", c)
	}
	if err := p.RemoveImage(ctx, digest); err != nil {
		t.Fatalf("remove the old digest once the pool moved: %v", err)
	}
}

// TestImageWarmPoolTemplate: a pool of a template keeps entries of its newest version, and moves to a
// new version once there is one; a template that does not exist yet is warmed once it does. A sandbox
// taken from an image's pool can be snapshotted, as any other.
func TestImageWarmPoolTemplate(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, pinned := reg.Push(t, "tpl/busybox:1", imagetest.BusyboxImage(t, "base"))
	p := newProviderWith(t, imagePoolConfig(t, testenv.StateDir(t), reg, oci.ImagePool{Ref: "tools", Template: true, Size: 1},
		oci.ImagePool{Ref: tagged, Size: 1}))
	ctx := ctxFor(t)
	version := func(content string) string {
		t.Helper()
		templateEntries(t, p, digestOf(pinned))
		src, obs := fromImage(t, p, tagged)
		if obs.State != sandbox.ObservedReady || !strings.HasPrefix(oci.Container(p, src), "pool-") {
			t.Fatalf("a sandbox of the image's pool: %+v, container %s", obs, oci.Container(p, src))
		}
		if res := sh(t, p, src, "echo "+content+" > /srv/version"); code(res) != 0 {
			t.Fatalf("%+v", res)
		}
		sn, err := p.Snapshot(ctx, src, sandbox.SnapshotOptions{Name: "tools"})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Release(ctx, src); err != nil {
			t.Fatal(err)
		}
		return sn.Digest
	}
	fromTemplate := func() sandbox.Ref {
		t.Helper()
		ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
		obs, err := p.Allocate(ctx, ref, sandbox.Spec{ClientRequestID: "t", Template: "tools"})
		if err != nil || obs.State != sandbox.ObservedReady {
			t.Fatalf("allocate of the template: %+v %v", obs, err)
		}
		return ref
	}
	v1 := version("one")
	idle := templateEntries(t, p, v1)
	first := fromTemplate()
	if idle[oci.Container(p, first)] != v1 {
		t.Fatalf("container %s, not one of %v", oci.Container(p, first), idle)
	}
	if res := sh(t, p, first, "cat /srv/version /etc/greeting"); res.Stdout != "one\nbase\n" {
		t.Fatalf("%+v", res)
	}
	old := templateEntries(t, p, v1)
	v2 := version("two")
	ref := fromTemplate()
	if old[oci.Container(p, ref)] != "" {
		t.Fatalf("a create of the template's new version took %s, an entry of the old one", oci.Container(p, ref))
	}
	if res := sh(t, p, ref, "cat /srv/version"); res.Stdout != "two\n" {
		t.Fatalf("%+v", res)
	}
	templateEntries(t, p, v2)
	// Once its sandbox is gone, the old version is held by nothing: the pool let it go.
	if err := p.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveTemplate(ctx, "tools@1"); err != nil {
		t.Fatalf("remove the old version: %v", err)
	}
}

// templateEntries waits until an idle entry is of digest, and returns the idle entries.
func templateEntries(t *testing.T, p *oci.Provider, digest string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := oci.ImagePoolEntries(p)
		if slices.Contains(slices.Collect(maps.Values(got)), digest) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the image pools hold %v, none of %s", got, digest)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestImageWarmPoolRestart: a provider that died leaves its idle entries of an image and their holds;
// the next one discards both and warms its own, and adopts the sandbox that took an entry. Close
// removes the idle entries and gives up their holds, and nothing is left once the sandbox is released.
func TestImageWarmPoolRestart(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, pinned := reg.Push(t, "restart/busybox:1", imagetest.BusyboxImage(t, "restart"))
	digest := digestOf(pinned)
	dir := testenv.StateDir(t)
	before := measure(t, dir)
	cfg := imagePoolConfig(t, dir, reg, oci.ImagePool{Ref: tagged, Size: 2})
	p, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	idle := waitImageEntries(t, p, 2, digest)
	ref, obs := fromImage(t, p, tagged)
	if obs.State != sandbox.ObservedReady || idle[oci.Container(p, ref)] == "" {
		t.Fatalf("%+v, container %s", obs, oci.Container(p, ref))
	}
	if res := sh(t, p, ref, "echo kept > /srv/note"); code(res) != 0 {
		t.Fatalf("%+v", res)
	}
	left := waitImageEntries(t, p, 2, digest)
	oci.Abandon(p)

	p2, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := waitImageEntries(t, p2, 2, digest)
	for name := range left {
		if now[name] != "" {
			t.Fatalf("the dead provider's entry %s is idle again", name)
		}
		if _, err := os.Stat(filepath.Join(dir, "pool", name)); !os.IsNotExist(err) {
			t.Fatalf("the dead provider's entry %s is still there: %v", name, err)
		}
	}
	if info, err := p2.Image(ctxFor(t), digest); err != nil || info.Users != 3 {
		t.Fatalf("after the restart %+v %v: want 3 holders, the sandbox and the new entries", info, err)
	}
	if obs, err := p2.Observe(ctxFor(t), ref); err != nil || obs.State != sandbox.ObservedReady {
		t.Fatalf("the sandbox after the restart: %+v %v", obs, err)
	}
	if res := sh(t, p2, ref, "cat /srv/note /etc/greeting"); res.Stdout != "kept\nrestart\n" {
		t.Fatalf("%+v", res)
	}
	if err := p2.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "pool")); len(ents) != 0 {
		t.Fatalf("pool entries after close: %v", ents)
	}
	p3, err := oci.New(withoutPools(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Close()
	if info, err := p3.Image(ctxFor(t), digest); err != nil || info.Users != 1 {
		t.Fatalf("after close %+v %v: want the sandbox alone to hold the image", info, err)
	}
	if err := p3.Release(ctxFor(t), ref); err != nil {
		t.Fatal(err)
	}
	if err := p3.RemoveImage(ctxFor(t), tagged); err != nil {
		t.Fatal(err)
	}
	if after := measure(t, dir); after != before {
		t.Fatalf("left behind: before %+v, after %+v", before, after)
	}
}

// withoutPools is cfg without its image pools.
func withoutPools(cfg oci.Config) oci.Config {
	cfg.ImagePools = nil
	return cfg
}

// TestImageWarmPoolHostile: an image whose containers cannot start (its user is unknown to it) keeps
// its pool empty, backing off, and a create of it fails as without a pool; a pool configured on
// gVisor, or of a reference that does not parse, is refused.
func TestImageWarmPoolHostile(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	bad, _ := reg.Push(t, "bad/user:1", imagetest.Image(t, v1.Config{User: "nobody-here"}, imagetest.BusyboxLayer(t)))
	good, goodPinned := reg.Push(t, "good/busybox:1", imagetest.BusyboxImage(t, "good"))
	dir := testenv.StateDir(t)
	p := newProviderWith(t, imagePoolConfig(t, dir, reg, oci.ImagePool{Ref: bad, Size: 1}, oci.ImagePool{Ref: good, Size: 1}))
	waitImageEntries(t, p, 1, digestOf(goodPinned))
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if obs, err := p.Allocate(ctxFor(t), ref, sandbox.Spec{ClientRequestID: "t", Image: bad}); err == nil && obs.State == sandbox.ObservedReady {
		t.Fatal("a sandbox whose image's user is unknown started")
	}
	if got := oci.ImagePoolEntries(p); len(got) != 1 {
		t.Fatalf("idle entries %v: want the good image's alone", got)
	}
	for name, cfg := range map[string]oci.Config{
		"gvisor": func() oci.Config {
			c := imagePoolConfig(t, dir, reg, oci.ImagePool{Ref: good, Size: 1})
			c.Runtime = gvisorRuntime(t)
			return c
		}(),
		"malformed": imagePoolConfig(t, dir, reg, oci.ImagePool{Ref: "Not A Reference", Size: 1}),
		"template":  imagePoolConfig(t, dir, reg, oci.ImagePool{Ref: "Not/A/Name", Template: true, Size: 1}),
		"size":      imagePoolConfig(t, dir, reg, oci.ImagePool{Ref: good, Size: 0}),
		"twice":     imagePoolConfig(t, dir, reg, oci.ImagePool{Ref: good, Size: 1}, oci.ImagePool{Ref: good, Size: 2}),
	} {
		if q, err := oci.New(cfg); err == nil {
			q.Close()
			t.Fatalf("%s: a provider started with %+v", name, cfg.ImagePools)
		}
	}
}

// TestImageWarmPoolPin: a sandbox that takes an entry of its tag holds the image under its own name,
// the entry's hold become its own, and is pinned to the entry's digest: once the tag and the pool have
// moved, a recreate runs the first digest (from no entry), also after its provider died, while a new
// sandbox of the tag takes an entry of the new one. The first digest cannot be removed while the
// sandbox holds it.
func TestImageWarmPoolPin(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, pinned := reg.Push(t, "pin/busybox:1", imagetest.BusyboxImage(t, "first"))
	digest := digestOf(pinned)
	cfg := imagePoolConfig(t, testenv.StateDir(t), reg, oci.ImagePool{Ref: tagged, Size: 1})
	p, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	idle := waitImageEntries(t, p, 1, digest)
	ref, obs := fromImage(t, p, tagged)
	entry := oci.Container(p, ref)
	if obs.State != sandbox.ObservedReady || idle[entry] == "" {
		t.Fatalf("%+v, container %s, not one of %v", obs, entry, idle)
	}
	if users, err := p.ImageStore().Users(digest); err != nil || !slices.Contains(users, ref.Name()) || slices.Contains(users, entry) {
		t.Fatalf("holders %v %v: want the sandbox %s, not the entry it took", users, err, ref.Name())
	}

	_, movedPinned := reg.Push(t, "pin/busybox:1", imagetest.BusyboxImage(t, "moved"))
	if _, err := p.PullImage(ctx, tagged, nil); err != nil {
		t.Fatal(err)
	}
	waitImageEntries(t, p, 1, digestOf(movedPinned))
	if err := p.RemoveImage(ctx, digest); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("remove of the digest a pooled sandbox runs: %v, want ErrInvalidState", err)
	}
	recreate := func(p *oci.Provider, gen sandbox.Generation) sandbox.Ref {
		t.Helper()
		if err := p.Release(ctx, ref); err != nil {
			t.Fatal(err)
		}
		ref = sandbox.Ref{ID: ref.ID, Generation: gen}
		obs, err := p.Allocate(ctx, ref, sandbox.Spec{ClientRequestID: "t", Image: tagged})
		if err != nil || obs.State != sandbox.ObservedReady || oci.Container(p, ref) != ref.Name() {
			t.Fatalf("recreate %d: %+v %v, container %s", gen, obs, err, oci.Container(p, ref))
		}
		if res := sh(t, p, ref, "cat /etc/greeting"); res.Stdout != "first\n" {
			t.Fatalf("recreate %d runs %+v, want the pinned digest", gen, res)
		}
		return ref
	}
	recreate(p, 2)
	oci.Abandon(p)

	p2, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	recreate(p2, 3)
	waitImageEntries(t, p2, 1, digestOf(movedPinned))
	fresh, obs := fromImage(t, p2, tagged)
	if res := sh(t, p2, fresh, "cat /etc/greeting"); obs.State != sandbox.ObservedReady || res.Stdout != "moved\n" ||
		!strings.HasPrefix(oci.Container(p2, fresh), "pool-") {
		t.Fatalf("a new sandbox of the moved tag: %+v %+v, container %s", obs, res, oci.Container(p2, fresh))
	}
	for _, r := range []sandbox.Ref{ref, fresh} {
		if err := p2.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
}
