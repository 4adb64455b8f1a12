package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrSchemaTooNew is returned by Open for a file written by a newer program, whose schema version
// this program does not know.
var ErrSchemaTooNew = errors.New("store schema is newer than this program")

// migrations are the schema steps in order; the file's PRAGMA user_version is how many have been
// applied. Append new steps; never edit or reorder a released one.
var migrations = []string{
	// 1: sandboxes and create intents. seq keeps the order in which sandboxes were created.
	`CREATE TABLE sandboxes (
		seq        INTEGER PRIMARY KEY AUTOINCREMENT,
		id         TEXT    NOT NULL UNIQUE,
		generation INTEGER NOT NULL,
		state      TEXT    NOT NULL,
		doc        TEXT    NOT NULL
	);
	CREATE TABLE intents (
		key        TEXT    PRIMARY KEY,
		sandbox_id TEXT    NOT NULL,
		generation INTEGER NOT NULL,
		spec       BLOB    NOT NULL
	) WITHOUT ROWID;
	CREATE INDEX intents_by_sandbox ON intents (sandbox_id, generation);`,

	// 2: the event log. AUTOINCREMENT keeps the newest cursor in sqlite_sequence, so a cursor is never
	// reused after its row is deleted (until step 3). event_log.pruned_through is the newest pruned
	// cursor: events with cursor <= it are gone, also when the table is empty.
	`CREATE TABLE events (
		cursor     INTEGER PRIMARY KEY AUTOINCREMENT,
		type       TEXT    NOT NULL,
		sandbox_id TEXT    NOT NULL,
		generation INTEGER NOT NULL,
		ts         TEXT    NOT NULL,
		ts_ns      INTEGER NOT NULL,
		data       BLOB
	);
	CREATE INDEX events_by_sandbox ON events (sandbox_id, cursor);
	CREATE TABLE event_log (
		id             INTEGER PRIMARY KEY CHECK (id = 1),
		pruned_through INTEGER NOT NULL
	);
	INSERT INTO event_log (id, pruned_through) VALUES (1, 0);`,

	// 3: events without AUTOINCREMENT, whose sqlite_sequence row was one more page written by every
	// append. The store gives each event its cursor itself, one past the newest: the larger of the
	// newest row and event_log.pruned_through, which covers a log pruned empty. Rows go only as a
	// prefix, so a log that is not empty ends at its sequence; one that is moves its sequence into
	// pruned_through here, and no cursor handed out before comes back.
	`CREATE TABLE events_v3 (
		cursor     INTEGER PRIMARY KEY,
		type       TEXT    NOT NULL,
		sandbox_id TEXT    NOT NULL,
		generation INTEGER NOT NULL,
		ts         TEXT    NOT NULL,
		ts_ns      INTEGER NOT NULL,
		data       BLOB
	);
	INSERT INTO events_v3 (cursor, type, sandbox_id, generation, ts, ts_ns, data)
		SELECT cursor, type, sandbox_id, generation, ts, ts_ns, data FROM events ORDER BY cursor;
	UPDATE event_log SET pruned_through = MAX(pruned_through,
		COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0))
		WHERE NOT EXISTS (SELECT 1 FROM events);
	DROP TABLE events;
	ALTER TABLE events_v3 RENAME TO events;
	CREATE INDEX events_by_sandbox ON events (sandbox_id, cursor);`,
}

// migrate applies the steps the file lacks, each in its own transaction together with the new
// user_version, so a crash leaves the file at a whole step. db must begin transactions IMMEDIATE so
// that two processes opening one file do not apply a step twice.
func migrate(ctx context.Context, db *sql.DB, steps []string) error {
	for {
		done, err := migrateOne(ctx, db, steps)
		if err != nil || done {
			return err
		}
	}
}

// migrateOne applies the next missing step and reports whether none was missing.
func migrateOne(ctx context.Context, db *sql.DB, steps []string) (done bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return false, fmt.Errorf("migrate: read version: %w", err)
	}
	switch {
	case v > len(steps):
		return false, fmt.Errorf("schema version %d, this program knows up to %d: %w", v, len(steps), ErrSchemaTooNew)
	case v < 0:
		return false, fmt.Errorf("migrate: bad schema version %d", v)
	case v == len(steps):
		return true, nil
	}
	if _, err := tx.ExecContext(ctx, steps[v]); err != nil {
		return false, fmt.Errorf("migrate: step %d: %w", v+1, err)
	}
	// PRAGMA takes no parameters; v+1 is an integer this code computed.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
		return false, fmt.Errorf("migrate: step %d: set version: %w", v+1, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migrate: step %d: commit: %w", v+1, err)
	}
	return false, nil
}

// SchemaVersion is the schema version this program writes: the number of migration steps.
func SchemaVersion() int { return len(migrations) }
