package host_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/version"
	"github.com/sandboxd/sandbox/provider/host"
	"github.com/sandboxd/sandbox/provider/providertest"
)

func newProvider(t *testing.T) *host.Provider {
	t.Helper()
	p, err := host.New(host.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) sandbox.Provider { return newProvider(t) })
}

func TestManifest(t *testing.T) {
	m, err := newProvider(t).Manifest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := sandbox.Capabilities{CommandExecution: true, FileAccess: true, PauseResume: true,
		InteractiveTerminal: true} // TestTerminals
	if m.Name != "host" || m.RuntimeClass != "host-process" || m.Capabilities != want {
		t.Fatalf("manifest %+v", m)
	}
	if m.Version != version.Version {
		t.Errorf("manifest version %q, want the build's %q", m.Version, version.Version)
	}
}

func TestAllocateRefusals(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if _, err := p.Allocate(ctx, ref, sandbox.Spec{Image: "debian:12"}); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Fatalf("allocate with an image: %v", err)
	}
	for _, bad := range []sandbox.Ref{{ID: "a/b", Generation: 1}, {ID: "..", Generation: 1}, {ID: "x", Generation: 0}, {ID: "", Generation: 1}} {
		if _, err := p.Allocate(ctx, bad, sandbox.Spec{}); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("allocate %+v: %v", bad, err)
		}
	}
	if _, err := p.Exec(ctx, ref, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("exec in an unallocated sandbox: %v", err)
	}
	if _, err := p.ReadFile(ctx, ref, "x"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("read in an unallocated sandbox: %v", err)
	}
}

func TestCwdStaysInside(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	obs, err := p.Allocate(ctx, ref, sandbox.Spec{})
	if err != nil || obs.State != sandbox.ObservedReady {
		t.Fatalf("allocate: %+v, %v", obs, err)
	}
	res, err := p.Exec(ctx, ref, sandbox.Command{Argv: []string{"pwd"}})
	if err != nil {
		t.Fatal(err)
	}
	home := res.Stdout
	res, err = p.Exec(ctx, ref, sandbox.Command{Argv: []string{"pwd"}, Cwd: "../../.."})
	if err != nil || res.Stdout != home {
		t.Fatalf("cwd ../../.. ran in %q, %v; want the sandbox directory %q", res.Stdout, err, home)
	}
	if _, err := p.Exec(ctx, ref, sandbox.Command{Argv: []string{"true"}, Cwd: "missing"}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("missing cwd: %v", err)
	}
}

// TestPauseSurvivesRestart: a new provider on the same directory still reports the sandbox paused,
// refuses commands in it, and resumes it.
func TestPauseSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	p1, err := host.New(host.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 3}
	if _, err := p1.Allocate(ctx, ref, sandbox.Spec{}); err != nil {
		t.Fatal(err)
	}
	if err := p1.Pause(ctx, ref); err != nil {
		t.Fatal(err)
	}
	p2, err := host.New(host.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if obs, err := p2.Observe(ctx, ref); err != nil || obs.State != sandbox.ObservedPaused {
		t.Fatalf("observe after restart: %+v, %v", obs, err)
	}
	if _, err := p2.Exec(ctx, ref, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("exec in a paused sandbox after restart: %v", err)
	}
	if err := p2.Resume(ctx, ref); err != nil {
		t.Fatal(err)
	}
	res, err := p2.Exec(ctx, ref, sandbox.Command{Argv: []string{"true"}})
	if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("exec after resume: %+v, %v", res, err)
	}
	// The marker is not inside the sandbox, where the sandbox could see or forge it.
	entries, err := p2.ListFiles(ctx, ref, "/")
	if err != nil || len(entries) != 0 {
		t.Fatalf("sandbox root lists %+v, %v", entries, err)
	}
	if err := p2.Release(ctx, ref); err != nil {
		t.Fatal(err)
	}
	left, err := os.ReadDir(dir)
	if err != nil || len(left) != 0 {
		t.Fatalf("left after release: %v, %v", left, err)
	}
}

// TestReleaseKillsCommands: a command running when its sandbox is released ends as cancelled.
func TestReleaseKillsCommands(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if _, err := p.Allocate(ctx, ref, sandbox.Spec{}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		res sandbox.CommandResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := p.Exec(ctx, ref, sandbox.Command{Argv: []string{"sh", "-c", "touch started; exec sleep 600"}})
		done <- result{res, err}
	}()
	if err := waitFile(p, ref, "started"); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx, ref); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || !r.res.Cancelled || r.res.ExitCode != nil {
		t.Fatalf("command at release: %+v, %v", r.res, r.err)
	}
	if obs, err := p.Observe(ctx, ref); err != nil || obs.State != sandbox.ObservedAbsent {
		t.Fatalf("observe after release: %+v, %v", obs, err)
	}
}

func waitFile(p *host.Provider, ref sandbox.Ref, name string) error {
	for {
		_, err := p.ReadFile(context.Background(), ref, name)
		if !errors.Is(err, sandbox.ErrNotFound) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestResourcesIgnoresForeignEntries(t *testing.T) {
	dir := t.TempDir()
	p, err := host.New(host.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lost+found", "x-gabc", "x-g0", "notes-g1.paused"} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "file-g1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 12}
	if _, err := p.Allocate(context.Background(), ref, sandbox.Spec{}); err != nil {
		t.Fatal(err)
	}
	refs, err := p.Resources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 || refs[0] != ref {
		t.Fatalf("resources %v, want only %v", refs, ref)
	}
}
