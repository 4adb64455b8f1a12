package oci_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

// withVolumes allocates a sandbox mounting vols and returns its observation.
func withVolumes(t *testing.T, p *oci.Provider, vols string) (sandbox.Ref, sandbox.Observation) {
	t.Helper()
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	obs, err := p.Allocate(ctxFor(t), ref, sandbox.Spec{ClientRequestID: "v",
		Extensions: map[string]json.RawMessage{sandbox.VolumesKey: json.RawMessage(vols)}})
	if err != nil {
		t.Fatalf("allocate with %s: %v", vols, err)
	}
	return ref, obs
}

func mustVolumes(t *testing.T, p *oci.Provider, vols string) sandbox.Ref {
	t.Helper()
	ref, obs := withVolumes(t, p, vols)
	if obs.State != sandbox.ObservedReady {
		t.Fatalf("allocate with %s: %+v", vols, obs)
	}
	return ref
}

// TestVolumes: a volume's files, and their owners as the sandbox sees them (its root), outlive the
// sandbox that wrote them and a restart of the provider, in a sandbox of another uid range, which may
// write them; a second writer of a
// volume that is not shared fails with volume_in_use while a reader may mount it; a full volume
// refuses writes and the sandbox works on; a volume mounted is not deleted; a read-only mount cannot
// be written; nothing of a volume's mounts is left once no sandbox mounts it.
func TestVolumes(t *testing.T) {
	dir := testenv.StateDir(t)
	before := measure(t, dir)
	p := newProviderAt(t, dir)
	m, _ := p.Manifest(ctxFor(t))
	if onGVisor(t, p) {
		if m.Capabilities.PersistentVolume {
			t.Error("the manifest says persistentVolume on gVisor")
		}
		t.Skip("volumes are runc's: gVisor's file server has no idmapped mount; TestVolumesHTTP checks the refusal there")
	}
	if !m.Capabilities.PersistentVolume {
		t.Fatal("the manifest says persistentVolume false on runc")
	}
	if _, err := p.CreateVolume(ctxFor(t), "cache", 16, false); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CreateVolume(ctxFor(t), "cache", 16, false); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("a second volume of the name: %v", err)
	}
	for _, bad := range []string{"../x", "", "UP", strings.Repeat("a", 64)} {
		if _, err := p.CreateVolume(ctxFor(t), bad, 16, false); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("volume name %q: %v", bad, err)
		}
	}
	a := mustVolumes(t, p, `[{"name":"cache","mountPath":"/data"}]`)
	if r := sh(t, p, a, `echo kept > /data/f && mkdir /data/u && echo mine > /data/u/g && stat -c '%u' /data/u/g`); code(r) != 0 || strings.TrimSpace(string(r.Stdout)) != "0" {
		t.Fatalf("writing the volume: %+v", r)
	}
	// A second writer fails; a reader may mount it meanwhile, and cannot write it.
	if _, obs := withVolumes(t, p, `[{"name":"cache","mountPath":"/data"}]`); obs.State != sandbox.ObservedFailed || obs.Reason != "volume_in_use" {
		t.Fatalf("a second writer: %+v", obs)
	}
	ro := mustVolumes(t, p, `[{"name":"cache","mountPath":"/mnt/ro","readOnly":true}]`)
	if r := sh(t, p, ro, `cat /mnt/ro/f; echo x > /mnt/ro/h`); code(r) == 0 || string(r.Stdout) != "kept\n" {
		t.Fatalf("the reader: %+v", r)
	}
	if err := p.DeleteVolume(ctxFor(t), "cache"); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("delete while mounted: %v", err)
	}
	if v, err := p.GetVolume(ctxFor(t), "cache"); err != nil || len(v.AttachedTo) != 2 {
		t.Fatalf("get: %+v %v", v, err)
	}
	// Full: writes fail with ENOSPC, the sandbox works on.
	if r := sh(t, p, a, `head -c 64000000 /dev/zero > /data/big; echo status=$?`); !strings.Contains(string(r.Stdout), "status=1") ||
		!strings.Contains(string(r.Stderr), "No space left") {
		t.Fatalf("filling the volume: %+v", r)
	}
	if r := sh(t, p, a, `rm /data/big && echo fine > /workspace/w && cat /workspace/w`); code(r) != 0 || string(r.Stdout) != "fine\n" {
		t.Fatalf("after the volume filled: %+v", r)
	}
	releaseRefs(t, p, a, ro)

	// The provider restarts; a sandbox of another uid range finds the files, their owners its own.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = newProviderAt(t, dir)
	b := mustVolumes(t, p, `[{"name":"cache","mountPath":"/srv/cache"}]`)
	if r := sh(t, p, b, `cat /srv/cache/f /srv/cache/u/g; stat -c '%u %g' /srv/cache/u /srv/cache/u/g; echo more >> /srv/cache/u/g`); code(r) != 0 ||
		string(r.Stdout) != "kept\nmine\n0 0\n0 0\n" {
		t.Fatalf("the next sandbox: %+v", r)
	}
	releaseRefs(t, p, b)
	if v, err := p.GetVolume(ctxFor(t), "cache"); err != nil || len(v.AttachedTo) != 0 {
		t.Fatalf("get after release: %+v %v", v, err)
	}
	// A volume that does not exist fails the allocation; mount paths are checked.
	if _, err := p.Allocate(ctxFor(t), sandbox.Ref{ID: sandbox.NewID(), Generation: 1}, sandbox.Spec{ClientRequestID: "x",
		Extensions: map[string]json.RawMessage{sandbox.VolumesKey: json.RawMessage(`[{"name":"nope","mountPath":"/data"}]`)}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a missing volume: %v", err)
	}
	for _, bad := range []string{`[{"name":"cache","mountPath":"/proc/x"}]`, `[{"name":"cache","mountPath":"rel"}]`,
		`[{"name":"cache","mountPath":"/a/../b"}]`, `[{"name":"cache","mountPath":"/"}]`, `[{"name":"cache","mountPath":"/.sandboxd"}]`,
		`[{"name":"cache","mountPath":"/a"},{"name":"cache","mountPath":"/b"}]`} {
		if _, err := sandbox.VolumeMounts(sandbox.Spec{Extensions: map[string]json.RawMessage{sandbox.VolumesKey: json.RawMessage(bad)}}); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if err := p.DeleteVolume(ctxFor(t), "cache"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.GetVolume(ctxFor(t), "cache"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if after := measure(t, dir); after != before {
		t.Errorf("left behind: before %+v, after %+v", before, after)
	}
}

// TestVolumeCycles: many sandboxes mount and leave a volume in turn (a shared one, two at a time)
// and leave no mount or loop device behind.
func TestVolumeCycles(t *testing.T) {
	dir := testenv.StateDir(t)
	before := measure(t, dir)
	p := newProviderAt(t, dir)
	if onGVisor(t, p) {
		t.Skip("volumes are runc's: gVisor's file server has no idmapped mount; TestVolumesHTTP checks the refusal there")
	}
	if _, err := p.CreateVolume(ctxFor(t), "shared", 8, true); err != nil {
		t.Fatal(err)
	}
	n := 100
	if testing.Short() {
		n = 10
	}
	for i := 0; i < n; i += 2 {
		x := mustVolumes(t, p, `[{"name":"shared","mountPath":"/mnt/s"}]`)
		y := mustVolumes(t, p, `[{"name":"shared","mountPath":"/mnt/s"}]`)
		if r := sh(t, p, x, `echo $$ >> /mnt/s/log`); code(r) != 0 {
			t.Fatalf("cycle %d: %+v", i, r)
		}
		if r := sh(t, p, y, `wc -l < /mnt/s/log`); code(r) != 0 || strings.TrimSpace(string(r.Stdout)) != strconv.Itoa(i/2+1) {
			t.Fatalf("cycle %d: the second sandbox sees %q", i, r.Stdout)
		}
		releaseRefs(t, p, x, y)
	}
	if err := p.DeleteVolume(ctxFor(t), "shared"); err != nil {
		t.Fatal(err)
	}
	if after := measure(t, dir); after != before {
		t.Errorf("left behind after %d sandboxes: before %+v, after %+v", n, before, after)
	}
}

func releaseRefs(t *testing.T, p *oci.Provider, refs ...sandbox.Ref) {
	t.Helper()
	for _, r := range refs {
		if err := p.Release(ctxFor(t), r); err != nil {
			t.Fatal(err)
		}
	}
}
