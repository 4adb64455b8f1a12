package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	sandbox "github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/store/sqlite"
)

// seed creates n sandboxes and returns their ids.
func seed(b *testing.B, s *sqlite.Store, n int) []sandbox.ID {
	b.Helper()
	ctx := context.Background()
	at := time.Date(2025, 1, 1, 0, 0, 0, 123456789, time.UTC)
	ids := make([]sandbox.ID, n)
	for i := range ids {
		key := fmt.Sprintf("req-%d", i)
		spec := sandbox.Spec{ClientRequestID: key, Image: "alpine:3", Resources: &sandbox.Resources{CPUMillis: 500, MemoryMiB: 256}}
		canon, err := spec.CanonicalJSON()
		if err != nil {
			b.Fatal(err)
		}
		sb := &sandbox.Sandbox{ID: sandbox.NewID(), Generation: 1, State: sandbox.StateReady, Spec: spec, Provider: "host",
			Endpoint: &sandbox.Endpoint{BaseURL: "http://127.0.0.1:1"}, CreatedAt: at, UpdatedAt: at}
		ev := sandbox.NewEvent(sandbox.EventCreated, sb.Ref(), at, sandbox.CreatedData{ClientRequestID: key, Spec: spec})
		if _, _, err := s.Create(ctx, sb, sandbox.Intent{Key: key, Spec: canon}, []sandbox.Event{ev}); err != nil {
			b.Fatal(err)
		}
		ids[i] = sb.ID
	}
	return ids
}

func benchStore(b *testing.B) *sqlite.Store {
	b.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(b.TempDir(), "bench.db")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkGet reads one sandbox from 64 concurrent goroutines.
func BenchmarkGet(b *testing.B) {
	s := benchStore(b)
	ids := seed(b, s, 1000)
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := s.Get(context.Background(), ids[i%len(ids)]); err != nil {
				b.Error(err)
				return
			}
			i += 7
		}
	})
}

func BenchmarkList1000(b *testing.B) {
	s := benchStore(b)
	seed(b, s, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		list, err := s.List(context.Background())
		if err != nil || len(list) != 1000 {
			b.Fatalf("list: %d, %v", len(list), err)
		}
	}
}

// BenchmarkUpdate changes one sandbox's state and appends its event.
func BenchmarkUpdate(b *testing.B) {
	s := benchStore(b)
	ids := seed(b, s, 100)
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		_, _, err := s.Update(context.Background(), ids[i%len(ids)], func(sb *sandbox.Sandbox) (sandbox.Change, error) {
			from := sb.State
			sb.State = sandbox.StatePaused
			if from == sandbox.StatePaused {
				sb.State = sandbox.StateReady
			}
			sb.UpdatedAt = at
			return sandbox.Change{Events: []sandbox.Event{sandbox.NewEvent(sandbox.EventStateChanged, sb.Ref(), at,
				sandbox.StateChangedData{From: from, To: sb.State})}}, nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendEvents appends one event per call to a log at its retention bound, so pruning runs.
func BenchmarkAppendEvents(b *testing.B) {
	benchAppend(b, 0, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
}

// BenchmarkAppendEventsMaxAge is BenchmarkAppendEvents with an age bound that no event reaches: what the
// bound costs an append that expires nothing.
func BenchmarkAppendEventsMaxAge(b *testing.B) {
	benchAppend(b, time.Hour, time.Now()) // young for the whole run
}

// BenchmarkFanOut100 is one append followed by the reads of 100 event streams woken by it, each asking
// for the page after the cursor it had, filtered on the sandbox it follows: from the tail (the default)
// and from the file (Config.NoTail, the plain path).
func BenchmarkFanOut100(b *testing.B) {
	for _, p := range []struct {
		name   string
		noTail bool
	}{{"tail", false}, {"NoTail", true}} {
		b.Run(p.name, func(b *testing.B) {
			s, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(b.TempDir(), "bench.db"), NoTail: p.noTail})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			ids := seed(b, s, 100)
			at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			code := 0
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				id := ids[i%len(ids)]
				i++
				ev := sandbox.NewEvent(sandbox.EventCommandCompleted, sandbox.Ref{ID: id, Generation: 1}, at, sandbox.CommandCompletedData{ExitCode: &code})
				evs, err := s.AppendEvents(ctx, []sandbox.Event{ev})
				if err != nil {
					b.Fatal(err)
				}
				for range 100 {
					page, err := s.Events(ctx, sandbox.EventQuery{After: evs[0].Cursor - 1, SandboxID: id})
					if err != nil || len(page) != 1 {
						b.Fatalf("page: %d events, %v", len(page), err)
					}
				}
			}
		})
	}
}

func benchAppend(b *testing.B, maxAge time.Duration, at time.Time) {
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(b.TempDir(), "bench.db"), Retention: 10000, MaxAge: maxAge})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	code := 0
	ev := sandbox.NewEvent(sandbox.EventCommandCompleted, ref, at, sandbox.CommandCompletedData{ExitCode: &code, DurationMs: 3})
	batch := make([]sandbox.Event, 500)
	for i := range batch {
		batch[i] = ev
	}
	for range 21 {
		if _, err := s.AppendEvents(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.AppendEvents(context.Background(), []sandbox.Event{ev}); err != nil {
			b.Fatal(err)
		}
	}
}
