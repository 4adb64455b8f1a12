//go:build unix

package sqlite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
)

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
