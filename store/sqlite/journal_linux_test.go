package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

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
