package sqlite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// crashes are what TestJournalCrash's child leaves in the journal when it kills itself: the records of
// its last appends; besides them, the records of a write cut short or corrupt (the process died in
// it); or records the database already holds (it died after the commit that moved them and before the
// cut).
var crashes = map[string]func(t *testing.T, s *Store, path string){
	"pending": nil,
	"moved already": func(t *testing.T, s *Store, path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.flushJournal(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	},
	"record cut short": tornTail(func(rec []byte) []byte { return rec[:len(rec)-3] }),
	"header cut short": tornTail(func(rec []byte) []byte { return rec[:5] }),
	"corrupt record":   tornTail(func(rec []byte) []byte { rec[len(rec)-1] ^= 0xff; return rec }),
	"garbage length":   tornTail(func([]byte) []byte { return []byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, 1} }),
}

// tornTail adds to the journal what cut makes of the record of one more event, never acknowledged.
func tornTail(cut func(rec []byte) []byte) func(t *testing.T, s *Store, path string) {
	return func(t *testing.T, s *Store, path string) {
		next := journalEvent(500)
		next.Cursor = s.head.last + 1
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(cut(appendRecord(nil, next))); err != nil {
			t.Fatal(err)
		}
	}
}

// crashChild runs TestJournalCrash's child on the store at path, with the crash named, and returns
// the events it was answered.
func crashChild(t *testing.T, path, crash string) []sandbox.Event {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestJournalCrash$")
	cmd.Env = append(os.Environ(), "SQLITE_JOURNAL_CHILD="+path, "SQLITE_JOURNAL_CRASH="+crash)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var acked []sandbox.Event
	if err := json.NewDecoder(strings.NewReader(stdout.String())).Decode(&acked); err != nil {
		t.Fatalf("child's events: %v\n%s", err, stdout.String())
	}
	if journalSize(t, path) <= int64(len(journalHeader)) {
		t.Fatal("the child left an empty journal")
	}
	return acked
}

// TestJournalCrash runs journalWork in a child process that then kills itself, its last appends only
// in the journal, which holds what each of crashes leaves, and opens the store it left: every event it
// was answered is there, in the file, with its cursor and content, the log has no gap and ends at the
// last of them, the journal is cut back to its header, and appends go on from there.
func TestJournalCrash(t *testing.T) {
	if path := os.Getenv("SQLITE_JOURNAL_CHILD"); path != "" {
		journalFlushDelay = time.Hour
		s, err := Open(context.Background(), Config{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		acked := journalWork(t, s)
		if len(s.jn.pending) == 0 {
			t.Fatal("nothing left in the journal: the crash would test nothing")
		}
		if crash := crashes[os.Getenv("SQLITE_JOURNAL_CRASH")]; crash != nil {
			crash(t, s, path+journalSuffix)
		}
		if err := json.NewEncoder(os.Stdout).Encode(acked); err != nil {
			t.Fatal(err)
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	for name := range crashes {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.db")
			acked := crashChild(t, path, name)

			s := openStore(t, path)
			if n := journalSize(t, path); n != int64(len(journalHeader)) {
				t.Fatalf("journal holds %d bytes after the replay, want only its header", n)
			}
			got := allEvents(t, s)
			dense(t, got)
			byCursor := map[int64]sandbox.Event{}
			for _, e := range got {
				byCursor[e.Cursor] = e
			}
			for _, want := range acked {
				if e, ok := byCursor[want.Cursor]; !ok || !reflect.DeepEqual(e, want) {
					t.Fatalf("acknowledged event %+v\nafter the crash: %+v (found: %v)", want, e, ok)
				}
			}
			last := acked[len(acked)-1].Cursor
			if got[len(got)-1].Cursor != last {
				t.Fatalf("the log ends at %d, the last acknowledged event is %d", got[len(got)-1].Cursor, last)
			}
			more, err := s.AppendEvents(context.Background(), []sandbox.Event{journalEvent(99)})
			if err != nil || more[0].Cursor != last+1 {
				t.Fatalf("append after the replay: %+v, %v; want cursor %d", more, err, last+1)
			}
		})
	}
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.wmu.Lock()
		n := len(s.jn.pending)
		s.wmu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the flusher never moved the journal")
		}
		time.Sleep(time.Millisecond)
	}
	if n := journalSize(t, path); n != int64(len(journalHeader)) {
		t.Fatalf("journal holds %d bytes after the move, want only its header", n)
	}
	var count int
	if err := s.wc.QueryRowContext(ctx, `SELECT COUNT(*) FROM events`).Scan(&count); err != nil || count != 2 {
		t.Fatalf("file holds %d events, %v; want 2", count, err)
	}
}

// TestJournalFullDiskAtOpen: a store whose crash left events in the journal opens on a full disk, where
// the database cannot take them: it serves them (its log has every acknowledged event, in order) and
// moves them once space is freed.
func TestJournalFullDiskAtOpen(t *testing.T) {
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mounting a tmpfs (the CI runs as root): %v", err)
		}
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	path := filepath.Join(mnt, "s.db")
	acked := crashChild(t, path, "pending")

	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for chunk := make([]byte, 64<<10); ; {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			if len(chunk) == 1 {
				break
			}
			chunk = chunk[:len(chunk)/2]
		}
	}
	f.Close()

	ctx := context.Background()
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatalf("open on a full disk: %v", err)
	}
	defer s.Close()
	s.wmu.Lock()
	pending := len(s.jn.pending)
	s.wmu.Unlock()
	if pending == 0 {
		t.Fatal("the replay moved the journal on a full disk: the test checks nothing")
	}
	checkAcked := func(what string) {
		t.Helper()
		got := allEvents(t, s)
		dense(t, got)
		if got[len(got)-1].Cursor != acked[len(acked)-1].Cursor {
			t.Fatalf("%s: the log ends at %d, the last acknowledged event is %d", what, got[len(got)-1].Cursor, acked[len(acked)-1].Cursor)
		}
		for _, want := range acked {
			if e := got[want.Cursor-1]; !reflect.DeepEqual(e, want) {
				t.Fatalf("%s: acknowledged event %+v, the store has %+v", what, want, e)
			}
		}
	}
	checkAcked("disk full")

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for pending > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the flusher never moved the journal once space was freed")
		}
		time.Sleep(5 * time.Millisecond)
		s.wmu.Lock()
		pending = len(s.jn.pending)
		s.wmu.Unlock()
	}
	checkAcked("space freed")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, path)
	checkAcked("reopened")
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
