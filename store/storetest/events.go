package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	sandbox "github.com/sandboxd/sandbox"
)

// fileEvents returns n file-written events of ref, numbered from first.
func fileEvents(ref sandbox.Ref, first, n int) []sandbox.Event {
	evs := make([]sandbox.Event, n)
	for i := range evs {
		evs[i] = sandbox.NewEvent(sandbox.EventFileWritten, ref, base.Add(time.Duration(first+i)*time.Millisecond),
			sandbox.FileWrittenData{Path: fmt.Sprintf("/f/%d", first+i), Size: int64(first + i)})
	}
	return evs
}

func mustAppend(t *testing.T, s sandbox.Store, evs []sandbox.Event) []sandbox.Event {
	t.Helper()
	got, err := s.AppendEvents(context.Background(), evs)
	if err != nil {
		t.Fatalf("append %d events: %v", len(evs), err)
	}
	if len(got) != len(evs) {
		t.Fatalf("append %d events returned %d", len(evs), len(got))
	}
	return got
}

func testAppendEvents(t *testing.T, s sandbox.Store) {
	ref := sandbox.Ref{ID: "sbx_a", Generation: 1}
	if got, err := s.AppendEvents(context.Background(), nil); err != nil || len(got) != 0 {
		t.Fatalf("append nothing: %v, %v", got, err)
	}
	if l := mustLast(t, s); l != 0 {
		t.Fatalf("appending nothing moved the last cursor to %d", l)
	}
	in := fileEvents(ref, 0, 5)
	got := mustAppend(t, s, in)
	prev := int64(0)
	for i, e := range got {
		if e.Cursor <= prev {
			t.Fatalf("event %d: cursor %d not after %d", i, e.Cursor, prev)
		}
		prev = e.Cursor
		want := in[i]
		want.Cursor = e.Cursor
		if !reflect.DeepEqual(e, want) {
			t.Fatalf("event %d:\n got %+v\nwant %+v", i, e, want)
		}
	}
	more := mustAppend(t, s, fileEvents(ref, 5, 1))
	if more[0].Cursor <= prev {
		t.Fatalf("next append: cursor %d not after %d", more[0].Cursor, prev)
	}
	if all := mustEvents(t, s, sandbox.EventQuery{}); !reflect.DeepEqual(all, append(got, more...)) {
		t.Fatalf("log:\n got %+v\nwant %+v", all, append(got, more...))
	}
}

func testEventsRoundTrip(t *testing.T, s sandbox.Store) {
	zone := time.FixedZone("Y", -7*3600)
	exit := 3
	ref := sandbox.Ref{ID: "sbx_rt", Generation: 4}
	in := []sandbox.Event{
		sandbox.NewEvent(sandbox.EventCommandCompleted, ref, base.In(zone), sandbox.CommandCompletedData{ExitCode: &exit, DurationMs: 12}),
		{Type: sandbox.EventStateChanged, SandboxID: ref.ID, Generation: ref.Generation, Timestamp: base.Add(999 * time.Nanosecond).In(zone),
			Data: json.RawMessage(`{"from":"ready","reason":"x \u00e9 \"q\"","to":"pausing"}`)},
	}
	got := mustAppend(t, s, in)
	logged := mustEvents(t, s, sandbox.EventQuery{})
	if !reflect.DeepEqual(logged, got) {
		t.Fatalf("logged events differ from appended:\n got %+v\nwant %+v", logged, got)
	}
	for i, e := range logged {
		if !e.Timestamp.Equal(in[i].Timestamp) || e.Timestamp.Location() != time.UTC {
			t.Fatalf("event %d timestamp %v, want %v in UTC", i, e.Timestamp, in[i].Timestamp)
		}
		if string(e.Data) != string(in[i].Data) || e.Type != in[i].Type || e.SandboxID != ref.ID || e.Generation != ref.Generation {
			t.Fatalf("event %d: got %+v, want %+v", i, e, in[i])
		}
	}
}

func testEventsPaging(t *testing.T, s sandbox.Store) {
	ref := sandbox.Ref{ID: "sbx_p", Generation: 1}
	all := mustAppend(t, s, fileEvents(ref, 0, 25))
	var pages [][]sandbox.Event
	after := int64(0)
	for {
		page, err := s.Events(context.Background(), sandbox.EventQuery{After: after, Limit: 10})
		if err != nil {
			t.Fatalf("events after %d: %v", after, err)
		}
		if len(page) == 0 {
			break
		}
		pages = append(pages, page)
		after = page[len(page)-1].Cursor
	}
	if len(pages) != 3 || len(pages[0]) != 10 || len(pages[1]) != 10 || len(pages[2]) != 5 {
		t.Fatalf("pages of 10 over 25 events: %d pages", len(pages))
	}
	var joined []sandbox.Event
	for _, p := range pages {
		joined = append(joined, p...)
	}
	if !reflect.DeepEqual(joined, all) {
		t.Fatal("pages joined differ from the appended events")
	}
	// Paging from the middle starts right after the given cursor.
	mid, err := s.Events(context.Background(), sandbox.EventQuery{After: all[11].Cursor, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(mid, all[12:15]) {
		t.Fatalf("page after %d: %+v", all[11].Cursor, mid)
	}
}

func testEventsPageLimit(t *testing.T, s sandbox.Store) {
	ref := sandbox.Ref{ID: "sbx_l", Generation: 1}
	mustAppend(t, s, fileEvents(ref, 0, sandbox.MaxEventPage+7))
	var page []sandbox.Event
	for _, limit := range []int{0, sandbox.MaxEventPage + 1, 1 << 30} {
		var err error
		page, err = s.Events(context.Background(), sandbox.EventQuery{Limit: limit})
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		if len(page) != sandbox.MaxEventPage {
			t.Fatalf("limit %d: page of %d, want %d", limit, len(page), sandbox.MaxEventPage)
		}
	}
	rest, err := s.Events(context.Background(), sandbox.EventQuery{After: page[len(page)-1].Cursor})
	if err != nil || len(rest) != 7 {
		t.Fatalf("second page: %d events, %v; want 7", len(rest), err)
	}
}

func testEventsSandboxFilter(t *testing.T, s sandbox.Store) {
	a := sandbox.Ref{ID: "sbx_a", Generation: 1}
	b := sandbox.Ref{ID: "sbx_b", Generation: 2}
	var wantA, wantB []sandbox.Event
	for i := range 12 {
		wantA = append(wantA, mustAppend(t, s, fileEvents(a, i, 1))...)
		wantB = append(wantB, mustAppend(t, s, fileEvents(b, i, 2))...)
	}
	gotA := mustEvents(t, s, sandbox.EventQuery{SandboxID: a.ID, Limit: 5})
	if !reflect.DeepEqual(gotA, wantA) {
		t.Fatalf("events of %s: %d, want %d", a.ID, len(gotA), len(wantA))
	}
	gotB := mustEvents(t, s, sandbox.EventQuery{SandboxID: b.ID, Limit: 7})
	if !reflect.DeepEqual(gotB, wantB) {
		t.Fatalf("events of %s: %d, want %d", b.ID, len(gotB), len(wantB))
	}
	// A filtered page after a cursor of another sandbox starts at the next event of this one.
	page, err := s.Events(context.Background(), sandbox.EventQuery{SandboxID: a.ID, After: wantB[3].Cursor, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 1 || !reflect.DeepEqual(page[0], wantA[2]) {
		t.Fatalf("filtered page after %d: %+v, want %+v", wantB[3].Cursor, page, wantA[2])
	}
	none, err := s.Events(context.Background(), sandbox.EventQuery{SandboxID: "sbx_none"})
	if err != nil || len(none) != 0 {
		t.Fatalf("events of an unknown sandbox: %d, %v", len(none), err)
	}
}

func testEventsBeyondNewest(t *testing.T, s sandbox.Store) {
	ctx := context.Background()
	for _, after := range []int64{0, 1, 1000} {
		page, err := s.Events(ctx, sandbox.EventQuery{After: after})
		if err != nil || len(page) != 0 {
			t.Fatalf("events after %d of an empty log: %d, %v", after, len(page), err)
		}
	}
	got := mustAppend(t, s, fileEvents(sandbox.Ref{ID: "sbx_n", Generation: 1}, 0, 3))
	last := got[2].Cursor
	for _, after := range []int64{last, last + 1, last + 1000} {
		page, err := s.Events(ctx, sandbox.EventQuery{After: after})
		if err != nil {
			t.Fatalf("events after %d, beyond the newest: %v", after, err)
		}
		if len(page) != 0 {
			t.Fatalf("events after %d, beyond the newest: %d events", after, len(page))
		}
	}
}

func testLastCursor(t *testing.T, s sandbox.Store) {
	if l := mustLast(t, s); l != 0 {
		t.Fatalf("last cursor of an empty log: %d", l)
	}
	sb := mustCreate(t, s, "req-1")
	evs := mustEvents(t, s, sandbox.EventQuery{})
	if l := mustLast(t, s); l != evs[len(evs)-1].Cursor {
		t.Fatalf("last cursor %d, newest event %d", l, evs[len(evs)-1].Cursor)
	}
	got := mustAppend(t, s, fileEvents(sb.Ref(), 0, 3))
	if l := mustLast(t, s); l != got[2].Cursor {
		t.Fatalf("last cursor %d, newest event %d", l, got[2].Cursor)
	}
	_, upd, err := s.Update(context.Background(), sb.ID, func(x *sandbox.Sandbox) (sandbox.Change, error) {
		return sandbox.Change{Events: []sandbox.Event{stateEvent(x, sandbox.StateRequested, sandbox.StateStarting)}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if l := mustLast(t, s); l != upd[0].Cursor || l <= got[2].Cursor {
		t.Fatalf("last cursor %d after update event %d", l, upd[0].Cursor)
	}
	if _, _, err := s.Update(context.Background(), sb.ID, func(*sandbox.Sandbox) (sandbox.Change, error) {
		return sandbox.Change{Events: fileEvents(sb.Ref(), 9, 2)}, errors.New("no")
	}); err == nil {
		t.Fatal("update with fn error succeeded")
	}
	if l := mustLast(t, s); l != upd[0].Cursor {
		t.Fatalf("failed update moved the last cursor to %d", l)
	}
}

func testLastEventOf(t *testing.T, s sandbox.Store) {
	ctx := context.Background()
	lastOf := func(id sandbox.ID) int64 {
		t.Helper()
		c, err := s.LastEventOf(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := lastOf(sandbox.NewID()); c != 0 {
		t.Fatalf("newest event of an unknown sandbox: %d", c)
	}
	a, b := mustCreate(t, s, "req-a"), mustCreate(t, s, "req-b")
	ga := mustAppend(t, s, fileEvents(a.Ref(), 0, 3))
	gb := mustAppend(t, s, fileEvents(b.Ref(), 0, 2))
	if c := lastOf(a.ID); c != ga[2].Cursor {
		t.Fatalf("newest event of a: %d, want %d", c, ga[2].Cursor)
	}
	if c := lastOf(b.ID); c != gb[1].Cursor {
		t.Fatalf("newest event of b: %d, want %d", c, gb[1].Cursor)
	}
	if _, _, err := s.Update(ctx, a.ID, func(*sandbox.Sandbox) (sandbox.Change, error) {
		return sandbox.Change{Events: fileEvents(a.Ref(), 9, 2)}, errors.New("no")
	}); err == nil {
		t.Fatal("update with fn error succeeded")
	}
	if c := lastOf(a.ID); c != ga[2].Cursor {
		t.Fatalf("a failed update moved a's newest event to %d", c)
	}
	_, upd, err := s.Update(ctx, a.ID, func(x *sandbox.Sandbox) (sandbox.Change, error) {
		return sandbox.Change{Events: []sandbox.Event{stateEvent(x, sandbox.StateRequested, sandbox.StateStarting)}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := lastOf(a.ID); c != upd[0].Cursor {
		t.Fatalf("newest event of a after an update: %d, want %d", c, upd[0].Cursor)
	}
	if c := lastOf(b.ID); c != gb[1].Cursor {
		t.Fatalf("a's update moved b's newest event to %d", c)
	}
}

// testReadersDuringWrites reads sandboxes and the log while writers append and update, and checks
// every reader sees a consistent, strictly increasing log that ends up complete.
func testReadersDuringWrites(t *testing.T, s sandbox.Store) {
	ctx := context.Background()
	sb := mustCreate(t, s, "req-1")
	const writers, writes, readers = 4, 25, 8
	done := make(chan struct{})
	errs := make(chan error, writers+readers)
	var wg, rg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range writes {
				var err error
				if i%2 == 0 {
					_, err = s.AppendEvents(ctx, fileEvents(sb.Ref(), w*writes+i, 2))
				} else {
					_, _, err = s.Update(ctx, sb.ID, func(x *sandbox.Sandbox) (sandbox.Change, error) {
						setCounter(x, counter(x)+1)
						return sandbox.Change{Events: []sandbox.Event{stateEvent(x, x.State, x.State)}}, nil
					})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range readers {
		rg.Add(1)
		go func() {
			defer rg.Done()
			after := int64(0)
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := s.Get(ctx, sb.ID); err != nil {
					errs <- err
					return
				}
				page, err := s.Events(ctx, sandbox.EventQuery{After: after, Limit: 7})
				if err != nil {
					errs <- err
					return
				}
				for _, e := range page {
					if e.Cursor <= after {
						errs <- fmt.Errorf("cursor %d after %d", e.Cursor, after)
						return
					}
					after = e.Cursor
				}
				if _, err := s.LastCursor(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	rg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent reads and writes: %v", err)
	}
	// 1 create event, and per writer 13 appends of 2 and 12 updates of 1.
	want := 1 + writers*((writes+1)/2*2+writes/2)
	if got := mustEvents(t, s, sandbox.EventQuery{}); len(got) != want {
		t.Fatalf("%d events, want %d", len(got), want)
	}
	if n := counter(mustGet(t, s, sb.ID)); n != writers*(writes/2) {
		t.Fatalf("counter %d, want %d", n, writers*(writes/2))
	}
}
