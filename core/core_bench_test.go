package core_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/internal/testenv/corestack"
)

// nopProvider answers every call at once and holds nothing but a set of refs: the benchmarks below
// measure the core and the store, not a provider.
type nopProvider struct{}

func (nopProvider) Manifest(context.Context) (sandbox.Manifest, error) {
	return sandbox.Manifest{Name: "nop", Version: "1", RuntimeClass: "none",
		Capabilities: sandbox.Capabilities{PauseResume: true, FileAccess: true}}, nil
}
func (nopProvider) Allocate(_ context.Context, ref sandbox.Ref, _ sandbox.Spec) (sandbox.Observation, error) {
	return sandbox.Observation{Ref: ref, State: sandbox.ObservedReady}, nil
}
func (nopProvider) Observe(_ context.Context, ref sandbox.Ref) (sandbox.Observation, error) {
	return sandbox.Observation{Ref: ref, State: sandbox.ObservedReady}, nil
}
func (nopProvider) Release(context.Context, sandbox.Ref) error                    { return nil }
func (nopProvider) Resources(context.Context) ([]sandbox.Ref, error)              { return nil, nil }
func (nopProvider) Pause(context.Context, sandbox.Ref) error                      { return nil }
func (nopProvider) Resume(context.Context, sandbox.Ref) error                     { return nil }
func (nopProvider) ReadFile(context.Context, sandbox.Ref, string) ([]byte, error) { return nil, nil }
func (nopProvider) WriteFile(context.Context, sandbox.Ref, string, []byte) error  { return nil }
func (nopProvider) ListFiles(context.Context, sandbox.Ref, string) ([]sandbox.FileEntry, error) {
	return []sandbox.FileEntry{}, nil
}

// benchRuntime is a runtime over a real SQLite file and nopProvider.
func benchRuntime(b *testing.B) *core.Runtime {
	b.Helper()
	return corestack.New(b, nopProvider{}, corestack.Unstarted(), corestack.Core(func(c *core.Config) {
		c.Logger, c.ReconcileInterval = slog.New(slog.DiscardHandler), -1
	})).Runtime
}

// BenchmarkCreate is the create path: validation, the intent and created event in one transaction,
// allocation, and the ready transition in a second one.
func BenchmarkCreate(b *testing.B) {
	rt := benchRuntime(b)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		sb, err := rt.Create(ctx, sandbox.Spec{ClientRequestID: fmt.Sprint("bench-", i)})
		if err != nil || sb.State != sandbox.StateReady {
			b.Fatalf("%+v %v", sb, err)
		}
	}
}

// BenchmarkFencedUpdate is a pause or resume with the right generation: two fenced updates each (to the
// transitional state, then to its end), with their events.
func BenchmarkFencedUpdate(b *testing.B) {
	rt := benchRuntime(b)
	ctx := context.Background()
	sb, err := rt.Create(ctx, sandbox.Spec{ClientRequestID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		op, want := rt.Pause, sandbox.StatePaused
		if i%2 == 1 {
			op, want = rt.Resume, sandbox.StateReady
		}
		got, err := op(ctx, sb.ID, sb.Generation)
		if err != nil || got.State != want {
			b.Fatalf("%+v %v", got, err)
		}
	}
}

// BenchmarkFencedConflict is an action with a stale generation: refused inside the transaction.
func BenchmarkFencedConflict(b *testing.B) {
	rt := benchRuntime(b)
	ctx := context.Background()
	sb, err := rt.Create(ctx, sandbox.Spec{ClientRequestID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := rt.Pause(ctx, sb.ID, sb.Generation+1); err == nil {
			b.Fatal("a stale generation was accepted")
		}
	}
}

// BenchmarkEventFanout appends one event (a file write) and waits until every watcher has woken and
// read it from the log, as an event stream does.
func BenchmarkEventFanout(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) {
			rt := benchRuntime(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sb, err := rt.Create(ctx, sandbox.Spec{ClientRequestID: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			start, err := rt.LastCursor(ctx)
			if err != nil {
				b.Fatal(err)
			}
			seen := make(chan int64, n)
			for w := 0; w < n; w++ {
				wake, stop := rt.Watch()
				go func() {
					defer stop()
					after := start
					for {
						select {
						case <-ctx.Done():
							return
						case <-wake:
						}
						evs, err := rt.Events(ctx, sandbox.EventQuery{After: after, SandboxID: sb.ID})
						if err != nil || len(evs) == 0 {
							continue
						}
						after = evs[len(evs)-1].Cursor
						select {
						case seen <- after:
						case <-ctx.Done():
							return
						}
					}
				}()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := rt.WriteFile(ctx, sb.ID, sb.Generation, "f", []byte("x")); err != nil {
					b.Fatal(err)
				}
				want := start + int64(i) + 1
				for done := 0; done < n; {
					if <-seen >= want {
						done++
					}
				}
			}
		})
	}
}

// BenchmarkReconcileIdle is what a periodic reconcile pass costs the core and the store per idle ready
// sandbox whose provider observes it unchanged (ns/op is per sandbox).
func BenchmarkReconcileIdle(b *testing.B) {
	rt := benchRuntime(b)
	ctx := context.Background()
	const n = 100
	for i := 0; i < n; i++ {
		if _, err := rt.Create(ctx, sandbox.Spec{ClientRequestID: fmt.Sprint("idle-", i)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += n {
		if err := rt.ReconcileAll(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
