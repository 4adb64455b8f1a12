package oci_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
	"github.com/sandboxd/sandbox/provider/providertest"
)

// newSparedProviderAt is newProviderAt with n spares and no warm pool.
func newSparedProviderAt(t testing.TB, dir string, n int) *oci.Provider {
	t.Helper()
	cfg := testConfig(t, dir)
	cfg.Spares = n
	return newProviderWith(t, cfg)
}

// waitSpares waits until p holds n idle spares, and returns their uid ranges.
func waitSpares(t *testing.T, p *oci.Provider, n int) []uint32 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ids := oci.SpareIDBases(p)
		if len(ids) == n {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle spares, want %d", len(ids), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The whole provider contract holds with spares: most allocations of the suite take one.
func TestConformanceSpares(t *testing.T) {
	providertest.Run(t, func(t *testing.T) sandbox.Provider { return newSparedProviderAt(t, testenv.StateDir(t), 2) })
}

// TestSpares: a sandbox with the default disk takes a spare (its uid range is the spare's), and is a
// sandbox like any other (its disk, its limits, exec, files, adoption by a restarted provider); one with
// another disk lays out its own; spares are made again; nothing is left behind by close.
func TestSpares(t *testing.T) {
	dir := testenv.StateDir(t)
	before := measure(t, dir)
	cfg := testConfig(t, dir)
	cfg.Spares = 2
	p, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			releaseAll(t, p)
			p.Close()
		}
	})
	spares := waitSpares(t, p, 2)

	ref := ready(t, p, &sandbox.Resources{MemoryMiB: 64})
	id, err := oci.IDBase(p, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spares, id) {
		t.Fatalf("the sandbox's uid range %d is none of the spares' %v", id, spares)
	}
	// The spare's disk is the sandbox's /workspace, of the default size, owned by its root; the
	// sandbox's memory limit is its own.
	res := sh(t, p, ref, "echo hi > /workspace/f && cat /workspace/f && stat -c %u /workspace && df -k /workspace | tail -1")
	out := strings.Fields(res.Stdout)
	if code(res) != 0 || len(out) < 4 || out[0] != "hi" || out[1] != "0" {
		t.Fatalf("in a sandbox laid out from a spare: %+v", res)
	}
	if kib, _ := strconv.Atoi(out[3]); kib < 900<<10 || kib > 1024<<10 {
		t.Fatalf("/workspace is %s KiB, want the default disk of 1024 MiB: %q", out[3], res.Stdout)
	}
	limit, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", oci.CgroupPrefix(dir)+ref.Name(), "memory.limit_in_bytes"))
	if err != nil || strings.TrimSpace(string(limit)) != strconv.Itoa(64<<20) {
		t.Fatalf("memory limit %q (%v), want %d", limit, err, 64<<20)
	}

	other := ready(t, p, &sandbox.Resources{DiskMiB: 8})
	if id, _ := oci.IDBase(p, other); slices.Contains(spares, id) {
		t.Fatalf("a sandbox with another disk size took the spare of range %d", id)
	}
	refilled := waitSpares(t, p, 2)
	if slices.Contains(refilled, id) {
		t.Fatalf("the taken spare's range %d is idle again: %v", id, refilled)
	}

	// A restarted provider adopts the sandbox as any other.
	closed = true
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "pool")); len(ents) != 0 {
		t.Fatalf("pool directory after close: %v", ents)
	}
	p = newProviderAt(t, dir)
	if res := sh(t, p, ref, "cat /workspace/f"); res.Stdout != "hi\n" {
		t.Fatalf("adopted sandbox: %+v", res)
	}
	for _, r := range []sandbox.Ref{ref, other} {
		if err := p.Release(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if after := measure(t, dir); after != before {
		t.Fatalf("left behind: before %+v, after %+v", before, after)
	}
}

// TestSparesLeftByACrash: the spares of a provider that died (their directories under the pool's, their
// disks mounted) are removed by the next provider on the state directory, which reuses their uid ranges.
func TestSparesLeftByACrash(t *testing.T) {
	dir := testenv.StateDir(t)
	before := measure(t, dir)
	cfg := testConfig(t, dir)
	cfg.Spares = 3
	p, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitSpares(t, p, 3)
	oci.Abandon(p)
	if ents, _ := os.ReadDir(filepath.Join(dir, "pool")); len(ents) != 3 {
		t.Fatalf("an abandoned provider's pool directory holds %d spares, want 3", len(ents))
	}
	p2 := newProviderAt(t, dir)
	waitEmpty(t, filepath.Join(dir, "pool"))
	ref := ready(t, p2, nil)
	if err := p2.Release(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	if after := measure(t, dir); after != before {
		t.Fatalf("left behind: before %+v, after %+v", before, after)
	}
}
