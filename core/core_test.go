package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/corestack"
	"github.com/sandboxd/sandbox/provider/fault"
	"github.com/sandboxd/sandbox/provider/host"
)

// env is a runtime over a real SQLite file and the host provider, wrapped in the fault injector.
type env struct {
	rt    *core.Runtime
	store sandbox.Store
	prov  *fault.Provider
	inner *host.Provider
}

func newEnv(t *testing.T, tweak ...func(*core.Config)) *env {
	t.Helper()
	inner, err := host.New(host.Config{Dir: filepath.Join(t.TempDir(), "host")})
	if err != nil {
		t.Fatal(err)
	}
	prov := fault.New(inner)
	s := corestack.New(t, prov, corestack.Unstarted(), corestack.Core(func(c *core.Config) {
		c.ReconcileInterval, c.ProviderTimeout = -1, 2*time.Second
		for _, f := range tweak {
			f(c)
		}
	}))
	return &env{rt: s.Runtime, store: s.Store, prov: prov, inner: inner}
}

func spec(key string) sandbox.Spec { return sandbox.Spec{ClientRequestID: key} }

func (e *env) create(t *testing.T, key string) *sandbox.Sandbox {
	t.Helper()
	sb, err := e.rt.Create(context.Background(), spec(key))
	if err != nil {
		t.Fatal(err)
	}
	return e.waitState(t, sb.ID, sandbox.StateReady)
}

// waitState polls until the sandbox is in want (readiness is observed in the background).
// recordRequested stores a create that was recorded but never handed to the provider, as after a crash.
func (e *env) recordRequested(t *testing.T, key string) *sandbox.Sandbox {
	t.Helper()
	now := time.Now().UTC()
	sb := &sandbox.Sandbox{ID: sandbox.NewID(), Generation: 1, State: sandbox.StateRequested, Spec: spec(key),
		Provider: "host", CreatedAt: now, UpdatedAt: now}
	canon, _ := sb.Spec.CanonicalJSON()
	if _, _, err := e.store.Create(context.Background(), sb, sandbox.Intent{Key: key, SandboxID: sb.ID, Generation: 1, Spec: canon},
		[]sandbox.Event{sandbox.NewEvent(sandbox.EventCreated, sb.Ref(), now, sandbox.CreatedData{ClientRequestID: key, Spec: sb.Spec})}); err != nil {
		t.Fatal(err)
	}
	return sb
}

func (e *env) waitState(t *testing.T, id sandbox.ID, want sandbox.State) *sandbox.Sandbox {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sb, err := e.rt.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == want {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s, want %s (failure %+v)", id, sb.State, want, sb.Failure)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *env) events(t *testing.T, id sandbox.ID) []sandbox.Event {
	t.Helper()
	evs, err := e.rt.Events(context.Background(), sandbox.EventQuery{SandboxID: id})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// transitions renders the state_changed events of a sandbox as "from>to" steps.
func transitions(t *testing.T, evs []sandbox.Event) string {
	t.Helper()
	var steps []string
	for _, ev := range evs {
		switch ev.Type {
		case sandbox.EventCreated:
			steps = append(steps, fmt.Sprintf("created@%d", ev.Generation))
		case sandbox.EventStateChanged:
			var d sandbox.StateChangedData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			steps = append(steps, string(d.From)+">"+string(d.To))
		}
	}
	return strings.Join(steps, " ")
}

func TestLifecycleRecordsEveryChange(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.create(t, "k1")
	if sb.Generation != 1 || sb.Provider != "host" {
		t.Fatalf("created %+v", sb)
	}
	if _, err := e.rt.Pause(ctx, sb.ID, 1); err != nil {
		t.Fatal(err)
	}
	if got, err := e.rt.Pause(ctx, sb.ID, 1); err != nil || got.State != sandbox.StatePaused {
		t.Fatalf("repeated pause: %v %+v", err, got)
	}
	if _, err := e.rt.Resume(ctx, sb.ID, 1); err != nil {
		t.Fatal(err)
	}
	got, err := e.rt.Terminate(ctx, sb.ID, 1)
	if err != nil || got.State != sandbox.StateTerminated {
		t.Fatalf("terminate: %v %+v", err, got)
	}
	got, err = e.rt.Recreate(ctx, sb.ID, 1, spec("k2"))
	if err != nil || got.Generation != 2 {
		t.Fatalf("recreate: %v %+v", err, got)
	}
	e.waitState(t, sb.ID, sandbox.StateReady)
	want := "created@1 requested>starting starting>ready ready>pausing pausing>paused paused>resuming resuming>ready " +
		"ready>terminating terminating>terminated created@2 terminated>requested requested>starting starting>ready"
	if got := transitions(t, e.events(t, sb.ID)); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	// The first generation's key is spent; the second's returns the sandbox.
	if _, err := e.rt.Create(ctx, spec("k1")); !errors.Is(err, sandbox.ErrIdempotencyConflict) {
		t.Fatalf("replay of a spent key: %v", err)
	}
	if again, err := e.rt.Create(ctx, spec("k2")); err != nil || again.ID != sb.ID || again.Generation != 2 {
		t.Fatalf("replay of the current key: %v %+v", err, again)
	}
}

func TestConcurrentIdenticalCreatesAllocateOnce(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	ids := make([]sandbox.ID, 50)
	errs := make([]error, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := e.rt.Create(context.Background(), spec("same"))
			errs[i] = err
			if sb != nil {
				ids[i] = sb.ID
			}
		}()
	}
	wg.Wait()
	for i := range 50 {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Fatalf("create %d: %v, id %s vs %s", i, errs[i], ids[i], ids[0])
		}
	}
	if n := e.prov.Calls("Allocate"); n != 1 {
		t.Fatalf("%d allocations, want 1", n)
	}
	all, _ := e.rt.List(context.Background())
	if len(all) != 1 {
		t.Fatalf("%d sandboxes, want 1", len(all))
	}
	if _, err := e.rt.Create(context.Background(), sandbox.Spec{ClientRequestID: "same", Image: "x"}); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Fatalf("image on host: %v", err)
	}
	if _, err := e.rt.Create(context.Background(), sandbox.Spec{ClientRequestID: "same",
		Resources: &sandbox.Resources{CPUMillis: 5}}); !errors.Is(err, sandbox.ErrIdempotencyConflict) {
		t.Fatalf("same key, other spec: %v", err)
	}
}

// TestConcurrentFencedActionsNeverApplyStale races 50 recreates and terminates that all present the
// generation they saw: exactly one recreate wins, and no action with the old generation applies after it.
func TestConcurrentFencedActionsNeverApplyStale(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.create(t, "fence")
	if _, err := e.rt.Terminate(ctx, sb.ID, 1); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, conflicts := 0, 0
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i%2 == 0 {
				_, err = e.rt.Recreate(ctx, sb.ID, 1, spec(fmt.Sprintf("fence-%d", i)))
			} else {
				_, err = e.rt.Terminate(ctx, sb.ID, 1)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && i%2 == 0:
				wins++
			case err == nil:
				// a terminate of generation 1 that ran before the recreate: terminated already
			case errors.Is(err, sandbox.ErrGenerationConflict):
				conflicts++
			default:
				t.Errorf("action %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d recreates won, want 1", wins)
	}
	got := e.waitState(t, sb.ID, sandbox.StateReady)
	if got.Generation != 2 {
		t.Fatalf("generation %d, want 2", got.Generation)
	}
	// Nothing stamped with generation 1 happened after the recreate.
	evs := e.events(t, sb.ID)
	seen2 := false
	for _, ev := range evs {
		if ev.Generation == 2 {
			seen2 = true
		} else if seen2 {
			t.Fatalf("event of generation %d after the recreate: %+v", ev.Generation, ev)
		}
	}
	if conflicts < 24 {
		t.Fatalf("only %d conflicts", conflicts)
	}
}

func TestCapabilityCheckComesBeforeAllocation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, err := e.rt.Create(ctx, sandbox.Spec{ClientRequestID: "net", RequiredCapabilities: []sandbox.Capability{sandbox.CapNetworkPolicy}})
	if !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Fatalf("got %v", err)
	}
	if n := e.prov.Calls("Allocate"); n != 0 {
		t.Fatalf("%d allocations after a refused create", n)
	}
	all, _ := e.rt.List(ctx)
	evs, _ := e.rt.Events(ctx, sandbox.EventQuery{})
	if len(all) != 0 || len(evs) != 0 {
		t.Fatalf("a refused create recorded %d sandboxes and %d events", len(all), len(evs))
	}
	// The key was not spent.
	if _, err := e.rt.Create(ctx, spec("net")); err != nil {
		t.Fatal(err)
	}
}

func TestAllocationFailureFailsTheSandbox(t *testing.T) {
	for name, tc := range map[string]struct {
		hook fault.Hook[sandbox.Observation]
		want error
	}{
		"unavailable": {fault.Fail[sandbox.Observation](fmt.Errorf("backend down: %w", sandbox.ErrProviderUnavailable)), sandbox.ErrProviderUnavailable},
		"plain error": {fault.Fail[sandbox.Observation](errors.New("exploded")), sandbox.ErrProviderUnavailable},
		"crash":       {fault.Crash[sandbox.Observation](errors.New("died mid-way")), sandbox.ErrProviderUnavailable},
		"hang":        {fault.Hang[sandbox.Observation](), sandbox.ErrProviderUnavailable},
		"malformed": {fault.Mangle(func(o sandbox.Observation) sandbox.Observation {
			o.State = "half-there"
			return o
		}), sandbox.ErrProviderProtocol},
		"other generation": {fault.Mangle(func(o sandbox.Observation) sandbox.Observation {
			o.Ref.Generation++
			return o
		}), sandbox.ErrProviderProtocol},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, func(c *core.Config) { c.ProviderTimeout = 200 * time.Millisecond })
			e.prov.OnAllocate = tc.hook
			ctx := context.Background()
			_, err := e.rt.Create(ctx, spec("f"))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			all, _ := e.rt.List(ctx)
			if len(all) != 1 || all[0].State != sandbox.StateFailed || all[0].Failure == nil ||
				all[0].Failure.Code != string(sandbox.ClassOf(tc.want).Code) {
				t.Fatalf("sandbox after failed allocation: %+v", all[0])
			}
			// A failed sandbox can always be terminated, and then nothing is left.
			e.prov.SetHooks(func(p *fault.Provider) { p.OnAllocate = nil })
			got, err := e.rt.Terminate(ctx, all[0].ID, 1)
			if err != nil || got.State != sandbox.StateTerminated {
				t.Fatalf("terminate a failed sandbox: %v %+v", err, got)
			}
			if held, _ := e.inner.Resources(ctx); len(held) != 0 {
				t.Fatalf("left behind: %v", held)
			}
		})
	}
}

func TestPauseFailureAndHangAreBounded(t *testing.T) {
	e := newEnv(t, func(c *core.Config) { c.ProviderTimeout = 200 * time.Millisecond })
	ctx := context.Background()
	sb := e.create(t, "p")
	e.prov.SetHooks(func(p *fault.Provider) { p.OnPause = fault.Hang[struct{}]() })
	if _, err := e.rt.Pause(ctx, sb.ID, 1); !errors.Is(err, sandbox.ErrProviderUnavailable) {
		t.Fatalf("hung pause: %v", err)
	}
	got, _ := e.rt.Get(ctx, sb.ID)
	if got.State != sandbox.StateFailed || got.Failure.Code != "provider_unavailable" {
		t.Fatalf("after a hung pause: %+v", got)
	}
	if got, err := e.rt.Terminate(ctx, sb.ID, 1); err != nil || got.State != sandbox.StateTerminated {
		t.Fatalf("terminate after a hung pause: %v %+v", err, got)
	}
}

func TestDataPlaneChecksInOrder(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.create(t, "d")
	if _, err := e.rt.Exec(ctx, "sbx_nope", 1, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("unknown sandbox: %v", err)
	}
	if _, err := e.rt.Pause(ctx, sb.ID, 1); err != nil {
		t.Fatal(err)
	}
	// Stale generation and wrong state: the generation is reported.
	if _, err := e.rt.ReadFile(ctx, sb.ID, 7, "missing"); !errors.Is(err, sandbox.ErrGenerationConflict) {
		t.Fatalf("stale and paused: %v", err)
	}
	if _, err := e.rt.Exec(ctx, sb.ID, 1, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("exec while paused: %v", err)
	}
	if _, err := e.rt.Resume(ctx, sb.ID, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt.ReadFile(ctx, sb.ID, 1, "missing"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("missing file: %v", err)
	}
	if err := e.rt.WriteFile(ctx, sb.ID, 1, "a/b.txt", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	res, err := e.rt.Exec(ctx, sb.ID, 1, sandbox.Command{Argv: []string{"cat", "a/b.txt"}})
	if err != nil || res.Stdout != "hi" || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	var types []sandbox.EventType
	for _, ev := range e.events(t, sb.ID) {
		types = append(types, ev.Type)
	}
	if n := len(types); n < 2 || types[n-2] != sandbox.EventFileWritten || types[n-1] != sandbox.EventCommandCompleted {
		t.Fatalf("event types %v", types)
	}
}

func TestMalformedResultsAreProtocolErrors(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.create(t, "m")
	e.prov.SetHooks(func(p *fault.Provider) {
		p.OnExec = fault.Mangle(func(r sandbox.CommandResult) sandbox.CommandResult {
			code := 999
			r.ExitCode = &code
			return r
		})
		p.OnListFiles = fault.Mangle(func([]sandbox.FileEntry) []sandbox.FileEntry {
			return []sandbox.FileEntry{{Path: "x", Kind: "socket"}}
		})
		p.OnReadFile = fault.Mangle(func([]byte) []byte { return make([]byte, sandbox.MaxFileBytes+1) })
	})
	if _, err := e.rt.Exec(ctx, sb.ID, 1, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrProviderProtocol) {
		t.Fatalf("exec: %v", err)
	}
	if _, err := e.rt.ListFiles(ctx, sb.ID, 1, "."); !errors.Is(err, sandbox.ErrProviderProtocol) {
		t.Fatalf("list: %v", err)
	}
	if err := e.rt.WriteFile(ctx, sb.ID, 1, "f", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt.ReadFile(ctx, sb.ID, 1, "f"); !errors.Is(err, sandbox.ErrProviderProtocol) {
		t.Fatalf("read: %v", err)
	}
}

func TestReconcileFindsALostResource(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.create(t, "lost")
	if err := e.prov.Lose(ctx, sb.Ref()); err != nil {
		t.Fatal(err)
	}
	got, err := e.rt.Reconcile(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != sandbox.StateFailed || got.Failure == nil || got.Failure.Code != "resource_lost" {
		t.Fatalf("after losing the resource: %+v", got)
	}
	e.prov.SetHooks(func(p *fault.Provider) { p.OnObserve = fault.Fail[sandbox.Observation](errors.New("down")) })
	sb2 := e.create(t, "lost2")
	if _, err := e.rt.Reconcile(ctx, sb2.ID); !errors.Is(err, sandbox.ErrProviderUnavailable) {
		t.Fatalf("reconcile with a failing provider: %v", err)
	}
}

func TestStartCompletesInterruptedWorkAndRemovesOrphans(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.recordRequested(t, "crash")
	// A resource of no sandbox.
	orphan := sandbox.Ref{ID: "sbx_orphan", Generation: 3}
	if _, err := e.inner.Allocate(ctx, orphan, spec("o")); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, sb.ID, sandbox.StateReady)
	held, _ := e.inner.Resources(ctx)
	if len(held) != 1 || held[0] != sb.Ref() {
		t.Fatalf("resources after start: %v", held)
	}
}

func TestTerminateRetriesAFailingRelease(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.create(t, "r")
	e.prov.SetHooks(func(p *fault.Provider) { p.OnRelease = fault.Fail[struct{}](errors.New("busy")) })
	got, err := e.rt.Terminate(ctx, sb.ID, 1)
	if err != nil || got.State != sandbox.StateTerminating {
		t.Fatalf("terminate with a failing release: %v %+v", err, got)
	}
	e.prov.SetHooks(func(p *fault.Provider) { p.OnRelease = nil })
	e.waitState(t, sb.ID, sandbox.StateTerminated)
	if held, _ := e.inner.Resources(ctx); len(held) != 0 {
		t.Fatalf("left behind: %v", held)
	}
}

func TestTerminateGivesUpAfterTheBoundAndNamesTheLeftover(t *testing.T) {
	e := newEnv(t, func(c *core.Config) { c.ReleaseBound = 50 * time.Millisecond })
	ctx := context.Background()
	sb := e.create(t, "g")
	e.prov.SetHooks(func(p *fault.Provider) { p.OnRelease = fault.Fail[struct{}](errors.New("stuck")) })
	if _, err := e.rt.Terminate(ctx, sb.ID, 1); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, sb.ID, sandbox.StateTerminated)
	evs := e.events(t, sb.ID)
	var d sandbox.StateChangedData
	_ = json.Unmarshal(evs[len(evs)-1].Data, &d)
	if !strings.Contains(d.Reason, sb.Ref().Name()) {
		t.Fatalf("last event does not name the leftover: %+v", d)
	}
}

func TestWatchSignalsWithoutBlocking(t *testing.T) {
	testenv.NoLeaks(t)
	e := newEnv(t)
	ch, stop := e.rt.Watch()
	defer stop()
	slow, stopSlow := e.rt.Watch() // never drained
	defer stopSlow()
	e.create(t, "w1")
	e.create(t, "w2") // does not block on the undrained watcher
	select {
	case <-ch:
	default:
		t.Fatal("no signal after events were appended")
	}
	if len(slow) != 1 {
		t.Fatalf("undrained watcher holds %d signals, want 1", len(slow))
	}
}

// background runs f in a goroutine; the returned function waits for its error.
func background(f func() error) (wait func() error) {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return func() error { return <-done }
}

// createAsync starts a create of key and returns a wait for its error.
func (e *env) createAsync(key string) (wait func() error) {
	return background(func() error {
		_, err := e.rt.Create(context.Background(), spec(key))
		return err
	})
}

// TestTerminateDuringAllocationLeavesNothing terminates a sandbox while the provider is still allocating
// it: the resource made after the terminate's release must be released too.
func TestTerminateDuringAllocationLeavesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	hold, entered, release := fault.Hold[sandbox.Observation]()
	e.prov.OnAllocate = hold
	created := e.createAsync("slow")
	<-entered
	all, _ := e.rt.List(ctx)
	if got, err := e.rt.Terminate(ctx, all[0].ID, 1); err != nil || got.State != sandbox.StateTerminated {
		t.Fatalf("terminate during allocation: %v %+v", err, got)
	}
	release()
	if err := created(); err != nil {
		t.Fatal(err)
	}
	if held, _ := e.inner.Resources(ctx); len(held) != 0 {
		t.Fatalf("left behind after a terminate during allocation: %v", held)
	}
	if got, _ := e.rt.Get(ctx, all[0].ID); got.State != sandbox.StateTerminated {
		t.Fatalf("state %s after the allocation finished", got.State)
	}
}

// pass starts ReconcileAll and holds it inside its observation of first, the first sandbox listed,
// until resume is called; meanwhile the test changes the sandboxes listed after first.
func pass(t *testing.T, e *env, first sandbox.Ref) (resume func() error) {
	t.Helper()
	hold, entered, release := fault.Hold[sandbox.Observation]()
	e.prov.SetHooks(func(p *fault.Provider) { p.OnObserve = fault.Only(first, hold) })
	passed := background(func() error { return e.rt.ReconcileAll(context.Background()) })
	<-entered
	return func() error {
		release()
		return passed()
	}
}

// TestReconcileAllNeverAllocatesATerminatedSandbox: a pass over every sandbox takes an observation each,
// so a long one reaches a sandbox well after listing it. A sandbox listed while its create was under way,
// then created and terminated before the pass reached it, must not be allocated again.
func TestReconcileAllNeverAllocatesATerminatedSandbox(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	first := e.create(t, "first")
	hold, entered, release := fault.Hold[sandbox.Observation]()
	e.prov.SetHooks(func(p *fault.Provider) { p.OnAllocate = hold })
	created := e.createAsync("second")
	<-entered // the pass lists the second as requested
	resume := pass(t, e, first.Ref())
	e.prov.SetHooks(func(p *fault.Provider) { p.OnAllocate = nil })
	release()
	if err := created(); err != nil {
		t.Fatal(err)
	}
	all, _ := e.rt.List(ctx)
	second := all[1]
	if got, err := e.rt.Terminate(ctx, second.ID, second.Generation); err != nil || got.State != sandbox.StateTerminated {
		t.Fatalf("terminate: %v %+v", err, got)
	}
	allocations := e.prov.Calls("Allocate")
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	if n := e.prov.Calls("Allocate"); n != allocations {
		t.Fatalf("the pass allocated the terminated sandbox again (%d allocations, %d before it)", n, allocations)
	}
	if held, _ := e.inner.Resources(ctx); len(held) != 1 || held[0] != first.Ref() {
		t.Fatalf("resources after the pass: %v, want only %s", held, first.Ref())
	}
}

// TestReconcileAllNeverPausesAResumedSandbox: a sandbox listed while pausing, then paused and resumed
// before the pass reached it, must not be paused again behind a state that says ready.
func TestReconcileAllNeverPausesAResumedSandbox(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	first := e.create(t, "first")
	second := e.create(t, "second")
	hold, entered, release := fault.Hold[struct{}]()
	e.prov.SetHooks(func(p *fault.Provider) { p.OnPause = hold })
	paused := background(func() error {
		_, err := e.rt.Pause(ctx, second.ID, second.Generation)
		return err
	})
	<-entered // the pass lists the second as pausing
	resume := pass(t, e, first.Ref())
	e.prov.SetHooks(func(p *fault.Provider) { p.OnPause = nil })
	release()
	if err := paused(); err != nil {
		t.Fatal(err)
	}
	if got, err := e.rt.Resume(ctx, second.ID, second.Generation); err != nil || got.State != sandbox.StateReady {
		t.Fatalf("resume: %v %+v", err, got)
	}
	pauses := e.prov.Calls("Pause")
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	if n := e.prov.Calls("Pause"); n != pauses {
		t.Fatalf("the pass paused the resumed sandbox again (%d pauses, %d before it)", n, pauses)
	}
	if obs, err := e.inner.Observe(ctx, second.Ref()); err != nil || obs.State != sandbox.ObservedReady {
		t.Fatalf("the provider holds the sandbox %v (%v), its record says ready", obs.State, err)
	}
}

// TestReconcileNeverAllocatesWhatWasTerminatedDuringItsObservation: a reconcile reads a sandbox left
// requested (as after a crash), then waits for the provider's observation; a terminate meanwhile must
// keep it from allocating.
func TestReconcileNeverAllocatesWhatWasTerminatedDuringItsObservation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.recordRequested(t, "crash")
	hold, entered, release := fault.Hold[sandbox.Observation]()
	e.prov.SetHooks(func(p *fault.Provider) { p.OnObserve = hold })
	reconciled := background(func() error {
		_, err := e.rt.Reconcile(ctx, sb.ID)
		return err
	})
	<-entered
	if got, err := e.rt.Terminate(ctx, sb.ID, 1); err != nil || got.State != sandbox.StateTerminated {
		t.Fatalf("terminate: %v %+v", err, got)
	}
	release()
	if err := reconciled(); err != nil {
		t.Fatal(err)
	}
	if n := e.prov.Calls("Allocate"); n != 0 {
		t.Fatalf("the reconcile allocated a terminated sandbox (%d allocations)", n)
	}
	if held, _ := e.inner.Resources(ctx); len(held) != 0 {
		t.Fatalf("left behind: %v", held)
	}
}

// recordMove moves sb's record to state to, with its state_changed event, as one step of an action
// would: what a daemon that stopped between an action's two steps leaves, or what an action's second
// step writes.
func (e *env) recordMove(t *testing.T, sb *sandbox.Sandbox, to sandbox.State, reason string) {
	t.Helper()
	_, _, err := e.store.Update(context.Background(), sb.ID, func(cur *sandbox.Sandbox) (sandbox.Change, error) {
		from := cur.State
		now := time.Now().UTC()
		cur.State, cur.UpdatedAt = to, now
		return sandbox.Change{Events: []sandbox.Event{sandbox.NewEvent(sandbox.EventStateChanged, cur.Ref(), now,
			sandbox.StateChangedData{From: from, To: to, Reason: reason})}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReconcileFinishesAnInterruptedPauseAndResume: a record left pausing (or resuming) with nothing
// carrying the move out, as after a daemon stopped between the two steps, is carried to its end.
func TestReconcileFinishesAnInterruptedPauseAndResume(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.create(t, "interrupted")
	e.recordMove(t, sb, sandbox.StatePausing, "pause requested")
	if got, err := e.rt.Reconcile(ctx, sb.ID); err != nil || got.State != sandbox.StatePaused {
		t.Fatalf("reconcile of a pause left pausing: %v %+v", err, got)
	}
	if obs, err := e.inner.Observe(ctx, sb.Ref()); err != nil || obs.State != sandbox.ObservedPaused {
		t.Fatalf("the provider holds the sandbox %v (%v), its record says paused", obs.State, err)
	}
	e.recordMove(t, sb, sandbox.StateResuming, "resume requested")
	if got, err := e.rt.Reconcile(ctx, sb.ID); err != nil || got.State != sandbox.StateReady {
		t.Fatalf("reconcile of a resume left resuming: %v %+v", err, got)
	}
	if obs, err := e.inner.Observe(ctx, sb.Ref()); err != nil || obs.State != sandbox.ObservedReady {
		t.Fatalf("the provider holds the sandbox %v (%v), its record says ready", obs.State, err)
	}
}

// TestReconcileNeverRepeatsAPauseOrResumeThatEndedDuringItsObservation: a reconcile reads a sandbox
// pausing whose pause nothing marks as under way (the client's call between its two steps), and waits
// for the provider's observation; the pause ends meanwhile and a resume follows. The repair chosen on
// the first read (pause it) must not be carried out: it would freeze a sandbox whose record says
// ready. The same for a resume that ends and a pause that follows.
func TestReconcileNeverRepeatsAPauseOrResumeThatEndedDuringItsObservation(t *testing.T) {
	for _, tc := range []struct {
		name              string
		left, ended, then sandbox.State
		carry             func(context.Context, *host.Provider, sandbox.Ref) error // the move's second step
		follow            func(context.Context, *core.Runtime, *sandbox.Sandbox) (*sandbox.Sandbox, error)
		repeated          string // the provider's method the stale repair would call
		observed          sandbox.ObservedState
	}{
		{"pause", sandbox.StatePausing, sandbox.StatePaused, sandbox.StateReady,
			func(ctx context.Context, p *host.Provider, ref sandbox.Ref) error { return p.Pause(ctx, ref) },
			func(ctx context.Context, rt *core.Runtime, sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
				return rt.Resume(ctx, sb.ID, sb.Generation)
			}, "Pause", sandbox.ObservedReady},
		{"resume", sandbox.StateResuming, sandbox.StateReady, sandbox.StatePaused,
			func(ctx context.Context, p *host.Provider, ref sandbox.Ref) error { return p.Resume(ctx, ref) },
			func(ctx context.Context, rt *core.Runtime, sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
				return rt.Pause(ctx, sb.ID, sb.Generation)
			}, "Resume", sandbox.ObservedPaused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			sb := e.create(t, tc.name)
			if tc.left == sandbox.StateResuming {
				if _, err := e.rt.Pause(ctx, sb.ID, sb.Generation); err != nil {
					t.Fatal(err)
				}
			}
			e.recordMove(t, sb, tc.left, tc.name+" requested")
			hold, entered, release := fault.Hold[sandbox.Observation]()
			e.prov.SetHooks(func(p *fault.Provider) { p.OnObserve = hold })
			reconciled := background(func() error {
				_, err := e.rt.Reconcile(ctx, sb.ID)
				return err
			})
			<-entered // the reconcile read the record and waits for its observation
			if err := tc.carry(ctx, e.inner, sb.Ref()); err != nil {
				t.Fatal(err)
			}
			e.recordMove(t, sb, tc.ended, tc.name+"d")
			if got, err := tc.follow(ctx, e.rt, sb); err != nil || got.State != tc.then {
				t.Fatalf("the action that follows: %v %+v", err, got)
			}
			calls := e.prov.Calls(tc.repeated)
			release()
			if err := reconciled(); err != nil {
				t.Fatal(err)
			}
			if n := e.prov.Calls(tc.repeated); n != calls {
				t.Fatalf("the reconcile called %s again (%d calls, %d before it)", tc.repeated, n, calls)
			}
			if obs, err := e.inner.Observe(ctx, sb.Ref()); err != nil || obs.State != tc.observed {
				t.Fatalf("the provider holds the sandbox %v (%v), its record says %s", obs.State, err, tc.then)
			}
			if got, err := e.rt.Get(ctx, sb.ID); err != nil || got.State != tc.then {
				t.Fatalf("the record: %v %+v", err, got)
			}
		})
	}
}
