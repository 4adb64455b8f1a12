package fault_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/provider/fault"
	"github.com/sandboxd/sandbox/provider/host"
	"github.com/sandboxd/sandbox/provider/providertest"
)

func newFault(t *testing.T) (*fault.Provider, *host.Provider) {
	t.Helper()
	inner, err := host.New(host.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return fault.New(inner), inner
}

// With no hooks the wrapper is the inner provider: it passes the whole suite.
func TestConformanceWithoutHooks(t *testing.T) {
	providertest.Run(t, func(t *testing.T) sandbox.Provider { p, _ := newFault(t); return p })
}

func ref() sandbox.Ref { return sandbox.Ref{ID: sandbox.NewID(), Generation: 1} }

func observe(t *testing.T, p sandbox.Provider, r sandbox.Ref) sandbox.ObservedState {
	t.Helper()
	obs, err := p.Observe(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return obs.State
}

func TestFail(t *testing.T) {
	p, inner := newFault(t)
	p.OnAllocate = fault.Fail[sandbox.Observation](sandbox.ErrProviderUnavailable)
	r := ref()
	if _, err := p.Allocate(context.Background(), r, sandbox.Spec{}); !errors.Is(err, sandbox.ErrProviderUnavailable) {
		t.Fatalf("allocate: %v", err)
	}
	if s := observe(t, inner, r); s != sandbox.ObservedAbsent {
		t.Fatalf("a failed allocate reached the inner provider: %s", s)
	}
	if p.Calls("Allocate") != 1 || p.Calls("Observe") != 0 {
		t.Fatalf("calls: allocate %d, observe %d", p.Calls("Allocate"), p.Calls("Observe"))
	}
}

func TestHang(t *testing.T) {
	p, _ := newFault(t)
	p.OnObserve = fault.Hang[sandbox.Observation]()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Observe(ctx, ref()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("observe: %v", err)
	}
}

func TestHold(t *testing.T) {
	p, _ := newFault(t)
	h, entered, release := fault.Hold[sandbox.Observation]()
	p.OnAllocate = h
	r := ref()
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := p.Allocate(context.Background(), r, sandbox.Spec{})
			done <- err
		}()
	}
	<-entered
	select {
	case err := <-done:
		t.Fatalf("a held allocate returned before the release: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	release()
	release() // a second release is harmless
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := observe(t, p, r); got != sandbox.ObservedReady {
		t.Fatalf("after the release: %s", got)
	}
	// A held call gives up with its context.
	h, _, _ = fault.Hold[sandbox.Observation]()
	p.SetHooks(func(p *fault.Provider) { p.OnObserve = h })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.Observe(ctx, r); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a held observe past its deadline: %v", err)
	}
}

func TestCrash(t *testing.T) {
	p, inner := newFault(t)
	p.OnAllocate = fault.Crash[sandbox.Observation](sandbox.ErrProviderUnavailable)
	p.OnRelease = fault.Crash[struct{}](sandbox.ErrProviderUnavailable)
	r := ref()
	if _, err := p.Allocate(context.Background(), r, sandbox.Spec{}); !errors.Is(err, sandbox.ErrProviderUnavailable) {
		t.Fatalf("allocate: %v", err)
	}
	if s := observe(t, inner, r); s != sandbox.ObservedReady {
		t.Fatalf("the crashed allocate did not run: %s", s)
	}
	if err := p.Release(context.Background(), r); !errors.Is(err, sandbox.ErrProviderUnavailable) {
		t.Fatalf("release: %v", err)
	}
	if s := observe(t, inner, r); s != sandbox.ObservedAbsent {
		t.Fatalf("the crashed release did not run: %s", s)
	}
}

func TestMangle(t *testing.T) {
	p, _ := newFault(t)
	ctx := context.Background()
	p.OnManifest = fault.Mangle(func(m sandbox.Manifest) sandbox.Manifest { m.Name = ""; return m })
	p.OnObserve = fault.Mangle(func(o sandbox.Observation) sandbox.Observation { o.Ref.Generation++; return o })
	p.OnExec = fault.Mangle(func(r sandbox.CommandResult) sandbox.CommandResult { r.TimedOut = true; return r })
	p.OnListFiles = fault.Mangle(func(es []sandbox.FileEntry) []sandbox.FileEntry {
		return append(es, sandbox.FileEntry{Path: "", Kind: "socket"})
	})

	m, err := p.Manifest(ctx)
	if err != nil || !errors.Is(m.Validate(), sandbox.ErrProviderProtocol) {
		t.Fatalf("mangled manifest %+v passes validation (%v)", m, err)
	}
	r := ref()
	if _, err := p.Allocate(ctx, r, sandbox.Spec{}); err != nil {
		t.Fatal(err)
	}
	obs, err := p.Observe(ctx, r)
	if err != nil || !errors.Is(obs.Validate(r), sandbox.ErrProviderProtocol) {
		t.Fatalf("mangled observation %+v passes validation (%v)", obs, err)
	}
	cmd := sandbox.Command{Argv: []string{"true"}, MaxOutputBytes: 10}
	res, err := p.Exec(ctx, r, cmd)
	if err != nil || !errors.Is(res.Validate(cmd), sandbox.ErrProviderProtocol) {
		t.Fatalf("mangled result %+v passes validation (%v)", res, err)
	}
	entries, err := p.ListFiles(ctx, r, "/")
	if err != nil || len(entries) != 1 || entries[0].Kind != "socket" {
		t.Fatalf("mangled listing %+v, %v", entries, err)
	}
	// A mangler never sees a failed call: the error passes through.
	if _, err := p.ListFiles(ctx, r, "missing"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("list missing: %v", err)
	}
}

func TestOnly(t *testing.T) {
	p, _ := newFault(t)
	ctx := context.Background()
	bad, good := ref(), ref()
	p.OnAllocate = fault.Only(bad, fault.Fail[sandbox.Observation](sandbox.ErrProviderUnavailable))
	if _, err := p.Allocate(ctx, bad, sandbox.Spec{}); !errors.Is(err, sandbox.ErrProviderUnavailable) {
		t.Fatalf("allocate bad: %v", err)
	}
	if obs, err := p.Allocate(ctx, good, sandbox.Spec{}); err != nil || obs.State != sandbox.ObservedReady {
		t.Fatalf("allocate good: %+v, %v", obs, err)
	}
}

func TestLose(t *testing.T) {
	p, _ := newFault(t)
	ctx := context.Background()
	r := ref()
	if _, err := p.Allocate(ctx, r, sandbox.Spec{}); err != nil {
		t.Fatal(err)
	}
	if err := p.Lose(ctx, r); err != nil {
		t.Fatal(err)
	}
	if s := observe(t, p, r); s != sandbox.ObservedAbsent {
		t.Fatalf("lost resource observed %s", s)
	}
	if p.Calls("Release") != 0 {
		t.Fatal("Lose went through the wrapper's Release")
	}
}

func TestSetHooksWhileRunning(t *testing.T) {
	p, _ := newFault(t)
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 100; i++ {
			_, _ = p.Resources(ctx)
		}
	}()
	p.SetHooks(func(p *fault.Provider) { p.OnResources = fault.Fail[[]sandbox.Ref](sandbox.ErrProviderUnavailable) })
	<-done
	if _, err := p.Resources(ctx); !errors.Is(err, sandbox.ErrProviderUnavailable) {
		t.Fatalf("resources after SetHooks: %v", err)
	}
}

// bare implements only sandbox.Provider.
type bare struct{ sandbox.Provider }

func TestMissingInterfaces(t *testing.T) {
	_, inner := newFault(t)
	p := fault.New(bare{inner})
	ctx := context.Background()
	r := ref()
	checks := map[string]error{
		"Exec":      second(p.Exec(ctx, r, sandbox.Command{Argv: []string{"true"}})),
		"ReadFile":  second(p.ReadFile(ctx, r, "x")),
		"WriteFile": p.WriteFile(ctx, r, "x", nil),
		"ListFiles": second(p.ListFiles(ctx, r, "/")),
		"Pause":     p.Pause(ctx, r),
		"Resume":    p.Resume(ctx, r),
	}
	for method, err := range checks {
		if !errors.Is(err, sandbox.ErrUnsupportedCapability) {
			t.Errorf("%s on a provider without it: %v", method, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }
