package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
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
