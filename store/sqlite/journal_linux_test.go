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

	"github.com/sandboxd/sandbox"
)

// smallDisk mounts a 4 MiB tmpfs for the test and returns it. It needs root (CAP_SYS_ADMIN); without it
// the test is skipped, except in CI.
func smallDisk(t *testing.T) string {
	t.Helper()
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mounting a tmpfs (the CI runs as root): %v", err)
		}
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	return mnt
}

// fillDisk writes a file in dir until its filesystem has no byte left, and returns its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for chunk := make([]byte, 64<<10); ; {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			if len(chunk) == 1 {
				return filler
			}
			chunk = chunk[:len(chunk)/2]
		}
	}
}

// TestJournalKeepsEventsOnFullDisk: once a write has failed for want of space, a command's event still
// goes to the journal (whose file has room in its first block), is served, and reaches the database
// once space is freed.
func TestJournalKeepsEventsOnFullDisk(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(smallDisk(t), "s.db")
	s := openStore(t, path)
	at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	sb := &sandbox.Sandbox{ID: "sbx_full", Generation: 1, State: sandbox.StateReady, Provider: "host", CreatedAt: at, UpdatedAt: at}
	if _, _, err := s.Create(ctx, sb, sandbox.Intent{Key: "k", Spec: []byte(`{}`)}, nil); err != nil {
		t.Fatal(err)
	}
	filler := fillDisk(t, filepath.Dir(path))
	failed := false
	for i := 0; i < 200 && !failed; i++ {
		_, _, err := s.Update(ctx, sb.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
			sb.UpdatedAt = sb.UpdatedAt.Add(time.Second)
			return sandbox.Change{Events: []sandbox.Event{journalEvent(i)}}, nil
		})
		failed = err != nil
	}
	if !failed {
		t.Fatal("every update was committed on a full disk: the test checks nothing")
	}
	got, err := s.AppendEvents(ctx, []sandbox.Event{journalEvent(7)})
	if err != nil {
		t.Fatalf("append on a full disk, after a failed commit: %v", err)
	}
	if page, err := s.Events(ctx, sandbox.EventQuery{After: got[0].Cursor - 1}); err != nil || len(page) != 1 || !reflect.DeepEqual(page[0], got[0]) {
		t.Fatalf("the appended event, read back on the full disk: %+v, %v", page, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitMoved(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	evs := allEvents(t, openStore(t, path))
	dense(t, evs)
	if last := evs[len(evs)-1]; !reflect.DeepEqual(last, got[0]) {
		t.Fatalf("after reopening, the log ends with %+v, want %+v", last, got[0])
	}
}

// TestJournalFullDiskAtOpen: a store whose crash left events in the journal opens on a full disk, where
// the database cannot take them: it serves them (its log has every acknowledged event, in order) and
// moves them once space is freed.
func TestJournalFullDiskAtOpen(t *testing.T) {
	mnt := smallDisk(t)
	path := filepath.Join(mnt, "s.db")
	acked := crashChild(t, path, "pending")
	filler := fillDisk(t, mnt)

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
	waitMoved(t, s)
	checkAcked("space freed")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, path)
	checkAcked("reopened")
}
