package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"

	sandbox "github.com/sandboxd/sandbox"
)

// RunDurable checks that what a store wrote is there after it is closed and opened again. open opens
// the store kept in dir; the same dir must give the same data. The suite closes every store it gets.
func RunDurable(t *testing.T, open func(t *testing.T, dir string) sandbox.Store) {
	t.Run("Reopen", func(t *testing.T) { testReopen(t, open) })
	t.Run("CursorNotReusedAfterReopen", func(t *testing.T) { testCursorAfterReopen(t, open) })
}

func mustClose(t *testing.T, s sandbox.Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func testReopen(t *testing.T, open func(t *testing.T, dir string) sandbox.Store) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	a := mustCreate(t, s, "req-a")
	b := mustCreate(t, s, "req-b")
	b2, _ := recreate(t, s, b.ID, "req-b2")
	mustAppend(t, s, fileEvents(a.Ref(), 0, 4))
	wantList, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantEvents := mustEvents(t, s, sandbox.EventQuery{})
	wantLast := mustLast(t, s)
	mustClose(t, s)

	s = open(t, dir)
	defer mustClose(t, s)
	gotList, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotList, wantList) {
		t.Fatalf("list after reopen:\n got %+v\nwant %+v", gotList, wantList)
	}
	equalSandbox(t, "get after reopen", mustGet(t, s, b.ID), b2)
	if got := mustEvents(t, s, sandbox.EventQuery{}); !reflect.DeepEqual(got, wantEvents) {
		t.Fatalf("events after reopen:\n got %+v\nwant %+v", got, wantEvents)
	}
	if l := mustLast(t, s); l != wantLast {
		t.Fatalf("last cursor after reopen %d, want %d", l, wantLast)
	}
	// The intents survive: a retry is idempotent, an old generation's key conflicts.
	retry, in, evs := newSandbox(t, "req-a", "alpine:3")
	got, created, err := s.Create(ctx, retry, in, evs)
	if err != nil || created || got.ID != a.ID {
		t.Fatalf("retried create after reopen: %v, created=%v, %v", got, created, err)
	}
	old, in, evs := newSandbox(t, "req-b", "alpine:3")
	if _, _, err := s.Create(ctx, old, in, evs); !errors.Is(err, sandbox.ErrIdempotencyConflict) {
		t.Fatalf("create with an old generation's key after reopen: %v, want ErrIdempotencyConflict", err)
	}
}

func testCursorAfterReopen(t *testing.T, open func(t *testing.T, dir string) sandbox.Store) {
	dir := t.TempDir()
	ref := sandbox.Ref{ID: "sbx_c", Generation: 1}
	s := open(t, dir)
	first := mustAppend(t, s, fileEvents(ref, 0, 3))
	mustClose(t, s)

	s = open(t, dir)
	second := mustAppend(t, s, fileEvents(ref, 3, 2))
	mustClose(t, s)
	if second[0].Cursor <= first[2].Cursor {
		t.Fatalf("cursor %d after reopen is not after %d", second[0].Cursor, first[2].Cursor)
	}

	s = open(t, dir)
	defer mustClose(t, s)
	if l := mustLast(t, s); l != second[1].Cursor {
		t.Fatalf("last cursor %d, want %d", l, second[1].Cursor)
	}
	all := mustEvents(t, s, sandbox.EventQuery{})
	if !reflect.DeepEqual(all, append(first, second...)) {
		t.Fatalf("log after two reopens:\n got %+v\nwant %+v", all, append(first, second...))
	}
}

// RunRetention checks the bounded event log. open opens the store kept in dir keeping at most
// retention events; the suite passes retention 10 and closes every store it gets. A store may prune
// in batches, but it must keep the newest retention events and must have pruned everything older
// than the newest 2*retention.
func RunRetention(t *testing.T, open func(t *testing.T, dir string, retention int) sandbox.Store) {
	const retention = 10
	ctx := context.Background()
	dir := t.TempDir()
	ref := sandbox.Ref{ID: "sbx_r", Generation: 1}
	s := open(t, dir, retention)
	var appended []sandbox.Event
	for i := range 10 * retention {
		appended = append(appended, mustAppend(t, s, fileEvents(ref, i, 1))...)
	}
	for i := 1; i < len(appended); i++ {
		if appended[i].Cursor <= appended[i-1].Cursor {
			t.Fatalf("cursor %d after %d", appended[i].Cursor, appended[i-1].Cursor)
		}
	}
	newest := appended[len(appended)-1].Cursor
	if l := mustLast(t, s); l != newest {
		t.Fatalf("last cursor %d after pruning, want %d", l, newest)
	}
	check := func(s sandbox.Store) {
		t.Helper()
		// The newest retention events are kept.
		keep := appended[len(appended)-retention-1].Cursor
		got, err := s.Events(ctx, sandbox.EventQuery{After: keep})
		if err != nil {
			t.Fatalf("events after %d, within retention: %v", keep, err)
		}
		if !reflect.DeepEqual(got, appended[len(appended)-retention:]) {
			t.Fatalf("retained events after %d: %d, want %d", keep, len(got), retention)
		}
		// History older than the newest 2*retention is gone, also for one sandbox's events.
		old := appended[len(appended)-2*retention-2].Cursor
		for _, q := range []sandbox.EventQuery{{}, {After: old}, {After: old, SandboxID: ref.ID}, {SandboxID: "sbx_other"}} {
			if _, err := s.Events(ctx, q); !errors.Is(err, sandbox.ErrEventHistoryUnavailable) {
				t.Fatalf("events %+v after pruning: %v, want ErrEventHistoryUnavailable", q, err)
			}
		}
		// Paging from the oldest retained event reads the rest of the log.
		if rest, err := s.Events(ctx, sandbox.EventQuery{After: newest - 1}); err != nil || len(rest) != 1 {
			t.Fatalf("events after %d: %d, %v", newest-1, len(rest), err)
		}
	}
	check(s)
	mustClose(t, s)

	// After a reopen the history bound holds and the sequence goes on: no cursor is reused.
	s = open(t, dir, retention)
	defer mustClose(t, s)
	check(s)
	next := mustAppend(t, s, fileEvents(ref, 999, 1))
	if next[0].Cursor <= newest {
		t.Fatalf("cursor %d after pruning and reopen, newest was %d", next[0].Cursor, newest)
	}
	if l := mustLast(t, s); l != next[0].Cursor {
		t.Fatalf("last cursor %d, want %d", l, next[0].Cursor)
	}
}
