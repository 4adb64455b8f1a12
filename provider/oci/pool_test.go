package oci_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
	"github.com/sandboxd/sandbox/provider/providertest"
)

// newPooledProviderAt is newProviderAt with a warm pool of n; its pool is closed when the test ends,
// after its sandboxes are released.
func newPooledProviderAt(t testing.TB, dir string, n int) *oci.Provider {
	t.Helper()
	cfg := testConfig(t, dir)
	cfg.WarmPool = n
	p, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		releaseAll(t, p)
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return p
}

// waitIdle waits until the pool holds n idle entries.
func waitIdle(t *testing.T, p *oci.Provider, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for oci.IdleEntries(p) != n {
		if time.Now().After(deadline) {
			t.Fatalf("the pool holds %d idle entries, want %d", oci.IdleEntries(p), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The whole provider contract holds with a pool: most allocations of the suite take an entry.
func TestConformanceWarmPool(t *testing.T) {
	providertest.Run(t, func(t *testing.T) sandbox.Provider { return newPooledProviderAt(t, testenv.StateDir(t), 2) })
}

// TestWarmPool: a sandbox with no limits takes an entry, so does one with memory and CPU limits (the
// limits' effect is TestMemoryLimit's and TestCPUQuota's), one with a disk starts its own container;
// the pool refills; a taken entry is a sandbox like any other (exec, files, pause, release, adoption by
// a restarted provider, which keeps its limits); and nothing is left behind.
func TestWarmPool(t *testing.T) {
	dir := testenv.StateDir(t)
	before := measure(t, dir)
	p := newPooledProviderAt(t, dir, 2)
	waitIdle(t, p, 2)

	ctx := ctxFor(t)
	pooled := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	obs, err := p.Allocate(ctx, pooled, sandbox.Spec{ClientRequestID: "t"})
	if err != nil || obs.State != sandbox.ObservedReady || !strings.HasPrefix(oci.Container(p, pooled), "pool-") {
		t.Fatalf("allocate from the pool: %+v %v, container %s", obs, err, oci.Container(p, pooled))
	}
	waitIdle(t, p, 2)
	limited := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	obs, err = p.Allocate(ctx, limited, sandbox.Spec{ClientRequestID: "t", Resources: &sandbox.Resources{MemoryMiB: 64, CPUMillis: 500}})
	if err != nil || obs.State != sandbox.ObservedReady || !strings.HasPrefix(oci.Container(p, limited), "pool-") {
		t.Fatalf("allocate with limits from the pool: %+v %v, container %s", obs, err, oci.Container(p, limited))
	}
	limitedCgroup := "sandboxd-*-" + oci.Container(p, limited)
	disk := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	obs, err = p.Allocate(ctx, disk, sandbox.Spec{ClientRequestID: "t", Resources: &sandbox.Resources{DiskMiB: 16}})
	if err != nil || obs.State != sandbox.ObservedReady || oci.Container(p, disk) != disk.Name() {
		t.Fatalf("allocate with a disk: %+v %v, container %s", obs, err, oci.Container(p, disk))
	}
	waitIdle(t, p, 2)

	if res := sh(t, p, pooled, "echo hi > f; cat f; ls /workspace; hostname"); code(res) != 0 || res.Stdout != "hi\nf\nsandbox\n" {
		t.Fatalf("exec in a pooled sandbox: %+v", res)
	}
	if err := p.WriteFile(ctx, pooled, "note", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := p.Pause(ctx, pooled); err != nil {
		t.Fatal(err)
	}
	if obs, err := p.Observe(ctx, pooled); err != nil || obs.State != sandbox.ObservedPaused {
		t.Fatalf("observe paused: %+v %v", obs, err)
	}
	if err := p.Resume(ctx, pooled); err != nil {
		t.Fatal(err)
	}
	if refs, err := p.Resources(ctx); err != nil || len(refs) != 3 {
		t.Fatalf("resources: %v %v (pool entries are not sandboxes)", refs, err)
	}

	// A restarted provider adopts the taken entry by its metadata, and discards the idle ones it finds.
	oci.Abandon(p)
	p2 := newPooledProviderAt(t, dir, 0)
	waitEmpty(t, filepath.Join(dir, "pool"))
	if obs, err := p2.Observe(ctx, pooled); err != nil || obs.State != sandbox.ObservedReady || !strings.HasPrefix(oci.Container(p2, pooled), "pool-") {
		t.Fatalf("observe after restart: %+v %v, container %s", obs, err, oci.Container(p2, pooled))
	}
	if got, err := p2.ReadFile(ctx, pooled, "note"); err != nil || string(got) != "kept" {
		t.Fatalf("read after restart: %q %v", got, err)
	}
	for file, want := range map[string]string{
		"memory/" + limitedCgroup + "/memory.limit_in_bytes": strconv.Itoa(64 << 20),
		"cpu/" + limitedCgroup + "/cpu.cfs_quota_us":         "50000",
	} {
		files, err := filepath.Glob("/sys/fs/cgroup/" + file)
		if err != nil || len(files) != 1 {
			t.Fatalf("%s: %v %v", file, files, err)
		}
		if got := cgroupValue(t, files[0]); got != want {
			t.Fatalf("%s after restart: %s, want %s", file, got, want)
		}
	}
	for _, ref := range []sandbox.Ref{pooled, limited, disk} {
		if err := p2.Release(ctx, ref); err != nil {
			t.Fatal(err)
		}
		if obs, err := p2.Observe(ctx, ref); err != nil || obs.State != sandbox.ObservedAbsent {
			t.Fatalf("observe released %s: %+v %v", ref, obs, err)
		}
	}
	if after := measure(t, dir); after != before {
		t.Fatalf("the pool left something behind: before %+v, after %+v", before, after)
	}
}

// TestWarmPoolClose: Close removes the idle entries and leaves the sandboxes.
func TestWarmPoolClose(t *testing.T) {
	dir := testenv.StateDir(t)
	before := measure(t, dir)
	cfg := testConfig(t, dir)
	cfg.WarmPool = 2
	p, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t, p, 2)
	ref := ready(t, p, nil)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "pool")); len(ents) != 0 {
		t.Fatalf("pool entries after close: %v", ents)
	}
	if res := sh(t, p, ref, "echo still"); res.Stdout != "still\n" {
		t.Fatalf("a sandbox after close: %+v", res)
	}
	if err := p.Release(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	if after := measure(t, dir); after != before {
		t.Fatalf("left behind: before %+v, after %+v", before, after)
	}
}

func waitEmpty(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ents, err := os.ReadDir(dir)
		if err == nil && len(ents) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still holds %d entries (%v)", dir, len(ents), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPoolBacksOff: a pool whose containers cannot start waits longer after each failure in a row
// (1 s, then 2 s, ...). The pool is on by default, so a machine where runc cannot run containers gets
// a warning now and then, not one a second.
func TestPoolBacksOff(t *testing.T) {
	dir := testenv.StateDir(t)
	runc, err := exec.LookPath(testRuntime)
	if err != nil {
		t.Fatal(err)
	}
	failing := filepath.Join(dir, "runc-failing")
	script := "#!/bin/sh\nfor a; do [ \"$a\" = run ] && { echo no containers here >&2; exit 1; }; done\nexec '" + runc + "' \"$@\"\n"
	if err := os.WriteFile(failing, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	waits := make(chan time.Duration, 16)
	p, err := oci.New(oci.Config{StateDir: filepath.Join(dir, "state"), AgentPath: testenv.BuildAgent(t), Runtime: failing,
		WarmPool: 1, Logger: slog.New(retryHandler(waits))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i, want := range []time.Duration{time.Second, 2 * time.Second} {
		select {
		case got := <-waits:
			if got != want {
				t.Fatalf("failure %d: retry in %v, want %v", i+1, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no warning of failure %d", i+1)
		}
	}
	if oci.IdleEntries(p) != 0 {
		t.Fatal("an entry is idle although no container could start")
	}
}

// retryHandler sends the retry_in of each warning about a pool entry to waits.
type retryHandler chan<- time.Duration

func (h retryHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h retryHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h retryHandler) WithGroup(string) slog.Handler            { return h }
func (h retryHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "starting a warm pool entry" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "retry_in" {
			h <- a.Value.Duration()
		}
		return true
	})
	return nil
}

// TestWarmPoolStats: the pool's counters count what creates found: a create that takes an entry is a
// hit; one that finds the pool empty (its refill failing meanwhile) is a miss and starts its own
// container; one the pool cannot serve (a disk of its own size) is neither.
func TestWarmPoolStats(t *testing.T) {
	dir := testenv.StateDir(t)
	runc, err := exec.LookPath(testRuntime)
	if err != nil {
		t.Fatal(err)
	}
	// A runtime that refuses to run a pool entry while the file stop exists.
	stop := filepath.Join(dir, "stop-pool")
	wrapper := filepath.Join(dir, "runc-pool-stop")
	script := "#!/bin/sh\nrun=; last=\nfor a; do [ \"$a\" = run ] && run=1; last=$a; done\n" +
		"if [ -n \"$run\" ] && [ -e '" + stop + "' ]; then case \"$last\" in pool-*) echo no pool entry now >&2; exit 1;; esac; fi\n" +
		"exec '" + runc + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, filepath.Join(dir, "state"))
	cfg.Runtime, cfg.WarmPool = wrapper, 1
	p := newProviderWith(t, cfg)
	waitIdle(t, p, 1)
	if s := p.PoolStats(); s != (sandbox.PoolStats{Idle: 1, Target: 1}) {
		t.Fatalf("stats of a full pool before any create: %+v", s)
	}
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	alloc := func(spec sandbox.Spec) sandbox.Ref {
		t.Helper()
		ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
		if obs, err := p.Allocate(ctx, ref, spec); err != nil || obs.State != sandbox.ObservedReady {
			t.Fatalf("allocate: %+v %v", obs, err)
		}
		return ref
	}
	hit := alloc(sandbox.Spec{ClientRequestID: "hit"})
	if !strings.HasPrefix(oci.Container(p, hit), "pool-") {
		t.Fatalf("the first create did not take the entry: container %s", oci.Container(p, hit))
	}
	if s := p.PoolStats(); s.Hits != 1 || s.Misses != 0 || s.Idle != 0 {
		t.Fatalf("after a hit: %+v", s)
	}
	miss := alloc(sandbox.Spec{ClientRequestID: "miss"})
	if strings.HasPrefix(oci.Container(p, miss), "pool-") {
		t.Fatalf("a create took an entry of a pool that cannot refill: container %s", oci.Container(p, miss))
	}
	if s := p.PoolStats(); s.Hits != 1 || s.Misses != 1 || s.Idle != 0 || s.Target != 1 {
		t.Fatalf("after a miss: %+v", s)
	}
	alloc(sandbox.Spec{ClientRequestID: "disk", Resources: &sandbox.Resources{DiskMiB: 16}})
	if s := p.PoolStats(); s.Hits != 1 || s.Misses != 1 {
		t.Fatalf("after a create the pool cannot serve: %+v", s)
	}
	// The pool refills once it can, and the next create is a hit again.
	if err := os.Remove(stop); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, p, 1)
	alloc(sandbox.Spec{ClientRequestID: "again"})
	if s := p.PoolStats(); s.Hits != 2 || s.Misses != 1 {
		t.Fatalf("after the refill and a hit: %+v", s)
	}
}
