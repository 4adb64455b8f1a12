package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	sandbox "github.com/sandboxd/sandbox"
)

// TestUpdateWithoutChangeWritesNothing: an update that leaves the document as stored, with no event
// and no intent (a reconcile that found the sandbox as recorded), runs no statement; one that changes
// anything, or carries an event, is written.
func TestUpdateWithoutChangeWritesNothing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	s := openStore(t, path)
	changes := func() int64 {
		t.Helper()
		var n int64
		s.wmu.Lock()
		defer s.wmu.Unlock()
		if err := s.wc.QueryRowContext(ctx, "SELECT total_changes()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	sb := &sandbox.Sandbox{ID: "sbx_same", Generation: 1, State: sandbox.StateReady, Provider: "host", CreatedAt: at, UpdatedAt: at}
	if _, _, err := s.Create(ctx, sb, sandbox.Intent{Key: "k", Spec: []byte(`{}`)}, nil); err != nil {
		t.Fatal(err)
	}
	before := changes()
	got, evs, err := s.Update(ctx, sb.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		sb.State = sandbox.StateReady // the same value set again
		return sandbox.Change{}, nil
	})
	if err != nil || got.State != sandbox.StateReady || !got.UpdatedAt.Equal(at) || len(evs) != 0 {
		t.Fatalf("unchanged update: %+v %+v %v", got, evs, err)
	}
	if n := changes() - before; n != 0 {
		t.Fatalf("an update that changed nothing changed %d rows", n)
	}
	// An event alone is written, and so is a changed field.
	ev := sandbox.NewEvent(sandbox.EventStateChanged, sb.Ref(), at, sandbox.StateChangedData{From: sandbox.StateReady, To: sandbox.StateReady})
	if _, evs, err := s.Update(ctx, sb.ID, func(*sandbox.Sandbox) (sandbox.Change, error) {
		return sandbox.Change{Events: []sandbox.Event{ev}}, nil
	}); err != nil || len(evs) != 1 || evs[0].Cursor != 1 {
		t.Fatalf("update with an event: %+v %v", evs, err)
	}
	later := at.Add(time.Second)
	if got, _, err := s.Update(ctx, sb.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		sb.UpdatedAt = later
		return sandbox.Change{}, nil
	}); err != nil || !got.UpdatedAt.Equal(later) {
		t.Fatalf("update of a field: %+v %v", got, err)
	}
	if n := changes() - before; n < 2 {
		t.Fatalf("two writing updates changed %d rows", n)
	}
	// What the file holds agrees with the cache.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got, err := s2.Get(ctx, sb.ID); err != nil || !got.UpdatedAt.Equal(later) {
		t.Fatalf("after reopening: %+v %v", got, err)
	}
}
