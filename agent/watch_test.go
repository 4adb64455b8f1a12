package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/fsroot"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestWatchOverflow: changes the reader does not take in time are dropped, and an overflow change
// says so before the next one that fits; the watch ends when its directory is removed.
func TestWatchOverflow(t *testing.T) {
	testenv.NoLeaks(t)
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "w"), 0o755)
	root, err := fsroot.Open(dir, "/")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var f Files
	w, err := f.Watch(root, "k", "w", false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 3 * watchQueue {
		if err := os.WriteFile(filepath.Join(dir, "w", strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // the watch reads what the kernel queued, and drops
	overflow := false
	deadline := time.After(10 * time.Second)
	for !overflow {
		select {
		case c := <-w.Changes():
			overflow = c.Kind == sandbox.FileOverflow
		case <-deadline:
			t.Fatal("no overflow")
		}
		if !overflow && len(w.Changes()) == 0 {
			// Drained: one more change brings the overflow first.
			os.WriteFile(filepath.Join(dir, "w", "last"), nil, 0o644)
		}
	}
	os.RemoveAll(filepath.Join(dir, "w"))
	for range w.Changes() {
	}
	if err := w.Err(); err == nil {
		t.Fatal("the watch ended without an error after its directory went")
	}
	if _, err := f.Watch(root, "k", "missing", false); err == nil {
		t.Fatal("a watch of a missing directory")
	}
}

// TestWatchBound: at most sandbox.MaxWatches per key.
func TestWatchBound(t *testing.T) {
	dir := t.TempDir()
	root, _ := fsroot.Open(dir, "/")
	defer root.Close()
	var f Files
	var ws []*Watch
	for range sandbox.MaxWatches {
		w, err := f.Watch(root, "k", ".", false)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	if _, err := f.Watch(root, "k", ".", false); err == nil {
		t.Fatal("one too many")
	}
	if w, err := f.Watch(root, "other", ".", false); err != nil {
		t.Fatal(err)
	} else {
		w.Close()
	}
	for _, w := range ws {
		w.Close()
	}
}
