package sqlite

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
)

// openStore opens the store at path for the test, which closes it at its end.
func openStore(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitMoved waits until s's journal has nothing pending.
func waitMoved(t *testing.T, s *Store) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.wmu.Lock()
		n := len(s.jn.pending)
		s.wmu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the flusher never moved the journal")
		}
	}
}

// journalEvent is the n-th event of the journal tests: a command's completion or a file written, with
// data, on one of two sandboxes.
func journalEvent(n int) sandbox.Event {
	ref := sandbox.Ref{ID: sandbox.ID(fmt.Sprintf("sbx_j%d", n%2)), Generation: 1}
	at := time.Date(2026, 1, 2, 3, 4, 5, n, time.UTC)
	if n%3 == 0 {
		return sandbox.NewEvent(sandbox.EventFileWritten, ref, at, sandbox.FileWrittenData{Path: fmt.Sprint("/f", n), Size: int64(n)})
	}
	code := n % 7
	return sandbox.NewEvent(sandbox.EventCommandCompleted, ref, at, sandbox.CommandCompletedData{ExitCode: &code, DurationMs: int64(n)})
}

// journalWork appends events one and two at a time, with a sandbox created and updated in between
// (write transactions, which move the journal first), and returns every event it was answered, in
// order. The last appends stay in the journal: the flusher waits an hour.
func journalWork(t *testing.T, s *Store) []sandbox.Event {
	t.Helper()
	ctx := context.Background()
	var acked []sandbox.Event
	at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	sb := &sandbox.Sandbox{ID: "sbx_j0", Generation: 1, State: sandbox.StateStarting, Provider: "host", CreatedAt: at, UpdatedAt: at}
	for n := 0; n < 40; n++ {
		batch := []sandbox.Event{journalEvent(n)}
		if n%5 == 4 {
			batch = append(batch, journalEvent(1000+n))
		}
		got, err := s.AppendEvents(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, got...)
		switch n {
		case 10:
			created := sandbox.NewEvent(sandbox.EventStateChanged, sb.Ref(), at, sandbox.StateChangedData{From: "", To: sandbox.StateStarting})
			_, _, err = s.Create(ctx, sb, sandbox.Intent{Key: "k", Spec: []byte(`{}`)}, []sandbox.Event{created})
		case 25:
			var evs []sandbox.Event
			_, evs, err = s.Update(ctx, sb.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
				sb.State = sandbox.StateReady
				return sandbox.Change{Events: []sandbox.Event{sandbox.NewEvent(sandbox.EventStateChanged, sb.Ref(), at,
					sandbox.StateChangedData{From: sandbox.StateStarting, To: sandbox.StateReady})}}, nil
			})
			acked = append(acked, evs...)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return acked
}

// allEvents reads the whole log from the file, through the read connections.
func allEvents(t *testing.T, s *Store) []sandbox.Event {
	t.Helper()
	ctx := context.Background()
	var out []sandbox.Event
	for after := int64(0); ; {
		page, err := s.Events(ctx, sandbox.EventQuery{After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return out
		}
		out = append(out, page...)
		after = page[len(page)-1].Cursor
	}
}

// dense fails unless evs have cursors 1, 2, 3...: a log with no gap, in order.
func dense(t *testing.T, evs []sandbox.Event) {
	t.Helper()
	for i, e := range evs {
		if e.Cursor != int64(i)+1 {
			t.Fatalf("event %d has cursor %d: the log has a gap or is out of order", i, e.Cursor)
		}
	}
}

func journalSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path + journalSuffix)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestJournalRefusesForeign: a journal whose events do not follow the database's, or that is not a
// journal, keeps the store from opening, with an error that names the file; nothing is lost.
func TestJournalRefusesForeign(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		journal []byte
	}{
		{"gap", func() []byte {
			e := journalEvent(1)
			e.Cursor = 5 // the database is empty: 1 comes next
			return appendRecord([]byte(journalHeader), e)
		}()},
		{"not a journal", []byte("something else\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.db")
			if err := os.WriteFile(path+journalSuffix, tc.journal, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(ctx, Config{Path: path})
			if err == nil {
				s.Close()
				t.Fatal("opened over a foreign journal")
			}
			if !strings.Contains(err.Error(), path+journalSuffix) {
				t.Fatalf("error does not name the journal: %v", err)
			}
			if b, _ := os.ReadFile(path + journalSuffix); !bytes.Equal(b, tc.journal) {
				t.Fatal("the refused journal was changed")
			}
		})
	}
}

// TestJournalHeaderCutShort: a journal whose header a crash cut short, as the file was made, holds no
// record; the store opens and uses it.
func TestJournalHeaderCutShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	if err := os.WriteFile(path+journalSuffix, []byte(journalHeader[:7]), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, path)
	got, err := s.AppendEvents(context.Background(), []sandbox.Event{journalEvent(1)})
	if err != nil || got[0].Cursor != 1 {
		t.Fatalf("append: %+v, %v", got, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path + journalSuffix)
	if err != nil || string(b) != journalHeader {
		t.Fatalf("journal after close: %q, %v; want its header alone", b, err)
	}
	if evs := allEvents(t, openStore(t, path)); len(evs) != 1 || !reflect.DeepEqual(evs[0], got[0]) {
		t.Fatalf("after reopening: %+v, want %+v", evs, got)
	}
}

// TestJournalWriteFails: when the journal cannot be written, appends go to the database, and none is
// lost or doubled.
func TestJournalWriteFails(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	s := openStore(t, path)
	first, err := s.AppendEvents(ctx, []sandbox.Event{journalEvent(1)})
	if err != nil {
		t.Fatal(err)
	}
	// Swap the journal's file for one opened read-only: every write fails.
	ro, err := os.Open(path + journalSuffix)
	if err != nil {
		t.Fatal(err)
	}
	s.wmu.Lock()
	good := s.jn.f
	s.jn.f = ro
	s.wmu.Unlock()
	second, err := s.AppendEvents(ctx, []sandbox.Event{journalEvent(2), journalEvent(3)})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.jn.pending) != 0 {
		t.Fatal("the append that failed to go to the journal left events pending")
	}
	s.wmu.Lock()
	s.jn.f = good
	s.wmu.Unlock()
	ro.Close()
	third, err := s.AppendEvents(ctx, []sandbox.Event{journalEvent(4)})
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(first, second...), third...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, path)
	if got := allEvents(t, s); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopening:\n got %+v\nwant %+v", got, want)
	}
}

// TestJournalFlushes: the flusher moves appended events into the database by itself, and a read the
// tail cannot answer sees them in the file.
func TestJournalFlushes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	s := openStore(t, path)
	if _, err := s.AppendEvents(ctx, []sandbox.Event{journalEvent(1), journalEvent(2)}); err != nil {
		t.Fatal(err)
	}
	waitMoved(t, s)
	if n := journalSize(t, path); n != int64(len(journalHeader)) {
		t.Fatalf("journal holds %d bytes after the move, want only its header", n)
	}
	var count int
	if err := s.wc.QueryRowContext(ctx, `SELECT COUNT(*) FROM events`).Scan(&count); err != nil || count != 2 {
		t.Fatalf("file holds %d events, %v; want 2", count, err)
	}
}

// FuzzJournalRecord: a record decodes to the event it was made of, whatever follows it; no strict
// prefix of it decodes to anything; and no input makes the decoder fail other than by stopping.
func FuzzJournalRecord(f *testing.F) {
	f.Add("sandbox.command_completed", "sbx_a", int64(3), int64(1700000000123456789), []byte(`{"exitCode":0}`), []byte{})
	f.Add("", "", int64(-1), int64(0), []byte{}, []byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4})
	f.Add("x\x00y", "sbx_\u00e9", int64(1<<40), int64(-1), []byte("\xff not json"), []byte("sandboxd event journal 1\n"))
	f.Fuzz(func(t *testing.T, typ, id string, cursor, ns int64, data, junk []byte) {
		decodeRecords(junk)
		e := sandbox.Event{Cursor: cursor, Type: sandbox.EventType(typ), SandboxID: sandbox.ID(id), Generation: sandbox.Generation(cursor / 3),
			Timestamp: time.Unix(0, ns).UTC(), Data: data}
		if len(e.Data) == 0 {
			e.Data = nil
		}
		rec := appendRecord(nil, e)
		if got := decodeRecords(append(bytes.Clone(rec), junk...)); len(got) == 0 || !reflect.DeepEqual(got[0], e) {
			t.Fatalf("decoded %+v, want %+v", got, e)
		}
		for i := range rec {
			if got := decodeRecords(rec[:i]); len(got) != 0 {
				t.Fatalf("a record cut at %d of %d bytes decoded to %+v", i, len(rec), got)
			}
		}
	})
}

// TestTailStartsAtTheCommittedHead: the tail starts at the head of the log as the file has committed
// it, never at the one a write transaction under way on the write connection would leave. The
// journal's flusher runs from before the tail starts, and on a full disk its move of what a crash
// left in the journal rolls back: a tail started inside that transaction began past the events the
// file holds, and a reader of the whole log stopped at the file's end (TestJournalFullDiskAtOpen
// failed so about once in ten runs).
func TestTailStartsAtTheCommittedHead(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, filepath.Join(t.TempDir(), "s.db"))
	if _, err := s.AppendEvents(ctx, []sandbox.Event{journalEvent(1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.flushJournal(ctx); err != nil {
		t.Fatal(err)
	}
	inTx, undo := make(chan struct{}), make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		wrote <- s.write(ctx, func() error {
			if _, err := s.appendEvents(ctx, []sandbox.Event{journalEvent(2)}); err != nil {
				return err
			}
			close(inTx)
			<-undo
			return fmt.Errorf("rolled back, as a commit on a full disk is")
		}, nil)
	}()
	<-inTx
	started := make(chan error, 1)
	go func() { started <- s.startTail(ctx) }()
	time.Sleep(100 * time.Millisecond) // room for a start that does not wait for the transaction
	close(undo)
	if err := <-wrote; err == nil {
		t.Fatal("the write committed")
	}
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if last, ok := s.tail.last(); !ok || last != 1 {
		t.Fatalf("the tail starts after cursor %d (%v), the file holds 1", last, ok)
	}
	if got := allEvents(t, s); len(got) != 1 || got[0].Cursor != 1 {
		t.Fatalf("the log read whole: %+v", got)
	}
}
