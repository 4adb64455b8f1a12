// Package sqlitetest opens SQLite stores for the tests of the packages above the store.
package sqlitetest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandbox/store/sqlite"
)

// Open opens a store with cfg, in a file of the test's temporary directory when cfg.Path is empty, and
// closes it when the test ends (after whatever the test registers later, such as a runtime on it).
func Open(t testing.TB, cfg sqlite.Config) *sqlite.Store {
	t.Helper()
	if cfg.Path == "" {
		cfg.Path = filepath.Join(t.TempDir(), "sandboxd.db")
	}
	st, err := sqlite.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}
