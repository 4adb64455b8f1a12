package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
)

func openRaw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path, "immediate", false))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func tables(t *testing.T, db *sql.DB) map[string]bool {
	t.Helper()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 't%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		got[n] = true
	}
	return got
}

// TestMigrateAppliesOnlyMissingSteps runs steps that fail when run twice, so a step applied again
// would show as an error.
func TestMigrateAppliesOnlyMissingSteps(t *testing.T) {
	ctx := context.Background()
	db := openRaw(t, filepath.Join(t.TempDir(), "m.db"))
	steps := []string{
		`CREATE TABLE t1 (a INTEGER)`,
		`CREATE TABLE t2 (a INTEGER); INSERT INTO t2 VALUES (1)`,
		`CREATE TABLE t3 (a INTEGER)`,
	}
	if err := migrate(ctx, db, steps[:1]); err != nil {
		t.Fatal(err)
	}
	if got := tables(t, db); len(got) != 1 || !got["t1"] {
		t.Fatalf("after one step: %v", got)
	}
	if err := migrate(ctx, db, steps); err != nil {
		t.Fatalf("applying the missing steps: %v", err)
	}
	if err := migrate(ctx, db, steps); err != nil {
		t.Fatalf("migrating a current file: %v", err)
	}
	if got := tables(t, db); len(got) != 3 {
		t.Fatalf("after three steps: %v", got)
	}
	var v, n int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != 3 {
		t.Fatalf("version %d, %v; want 3", v, err)
	}
	if err := db.QueryRow("SELECT count(*) FROM t2").Scan(&n); err != nil || n != 1 {
		t.Fatalf("t2 rows %d, %v; want 1", n, err)
	}
	if err := migrate(ctx, db, steps[:2]); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("migrating with fewer steps than applied: %v, want ErrSchemaTooNew", err)
	}
}

// TestMigrateFailedStepLeavesVersion checks a failing step rolls back whole, version included.
func TestMigrateFailedStepLeavesVersion(t *testing.T) {
	ctx := context.Background()
	db := openRaw(t, filepath.Join(t.TempDir(), "m.db"))
	steps := []string{
		`CREATE TABLE t1 (a INTEGER)`,
		`CREATE TABLE t2 (a INTEGER); INSERT INTO nowhere VALUES (1)`,
	}
	if err := migrate(ctx, db, steps); err == nil {
		t.Fatal("a failing step migrated")
	}
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != 1 {
		t.Fatalf("version %d, %v; want 1", v, err)
	}
	if got := tables(t, db); got["t2"] {
		t.Fatal("the failed step's table is there")
	}
}

// TestMigrateEventsKeepCursors takes files written before step 3, one with retained events and one
// pruned empty, through the step: the events keep their cursors, and the next append continues the
// sequence instead of reusing a cursor.
func TestMigrateEventsKeepCursors(t *testing.T) {
	for _, tc := range []struct {
		name        string
		prune       string // SQL run on the old file after five appends
		wantCursors []int64
	}{
		{"retained", `DELETE FROM events WHERE cursor <= 2; UPDATE event_log SET pruned_through = 2`, []int64{3, 4, 5, 6}},
		{"pruned empty", `DELETE FROM events; UPDATE event_log SET pruned_through = 5`, []int64{6}},
		{"emptied without a record", `DELETE FROM events`, []int64{6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "old.db")
			db := openRaw(t, path)
			if err := migrate(ctx, db, migrations[:2]); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 5; i++ {
				if _, err := db.Exec(`INSERT INTO events (type, sandbox_id, generation, ts, ts_ns)
					VALUES ('sandbox.created', 'sbx_old', 1, '2025-01-01T00:00:00Z', 0)`); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := db.Exec(tc.prune); err != nil {
				t.Fatal(err)
			}
			db.Close()

			s, err := Open(ctx, Config{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if last, err := s.LastCursor(ctx); err != nil || last != 5 {
				t.Fatalf("last cursor after the step: %d, %v; want 5", last, err)
			}
			ev := sandbox.NewEvent(sandbox.EventCommandCompleted, sandbox.Ref{ID: "sbx_new", Generation: 1},
				time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC), nil)
			got, err := s.AppendEvents(ctx, []sandbox.Event{ev})
			if err != nil || len(got) != 1 || got[0].Cursor != 6 {
				t.Fatalf("append after the step: %+v, %v; want cursor 6", got, err)
			}
			if err := s.flushJournal(ctx); err != nil { // the append went to the journal
				t.Fatal(err)
			}
			rows, err := s.wc.QueryContext(ctx, `SELECT cursor FROM events ORDER BY cursor`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var cursors []int64
			for rows.Next() {
				var c int64
				if err := rows.Scan(&c); err != nil {
					t.Fatal(err)
				}
				cursors = append(cursors, c)
			}
			if !slices.Equal(cursors, tc.wantCursors) {
				t.Fatalf("cursors %v, want %v", cursors, tc.wantCursors)
			}
		})
	}
}
