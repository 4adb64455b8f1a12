package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

// TestEarlierJournal: the journal an earlier version kept beside the database is removed when it holds
// only its header, and the store refuses to open while it holds records.
func TestEarlierJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	journal := path + "-events"
	if err := os.WriteFile(journal, []byte(earlierJournalHeader+"\x05\x00\x00\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(context.Background(), Config{Path: path}); err == nil || !strings.Contains(err.Error(), "earlier sandboxd") {
		if err == nil {
			s.Close()
		}
		t.Fatalf("open beside a journal with records: %v", err)
	}
	if err := os.WriteFile(journal, []byte(earlierJournalHeader), 0o600); err != nil {
		t.Fatal(err)
	}
	openStore(t, path)
	if _, err := os.Stat(journal); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the empty journal is still there: %v", err)
	}
}
