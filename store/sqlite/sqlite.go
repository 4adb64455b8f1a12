// Package sqlite is the durable sandbox.Store: sandboxes, create intents and the event log in one
// embedded SQLite file (modernc.org/sqlite, pure Go) in WAL mode.
//
// Its main invariant: every write (a sandbox with its events and intent) is one serialized
// transaction on a single write connection, so a read-modify-write never loses an update, and event
// cursors come from an AUTOINCREMENT key, so a cursor is never reused, not after pruning and not
// after a restart. Reads use a separate pool of connections and are never blocked by a writer.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"time"

	sandbox "github.com/sandboxd/sandbox"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// DefaultRetention is how many events the log keeps when Config.Retention is zero.
const DefaultRetention = 100000

// busyTimeout bounds how long a connection waits for a lock held by another connection.
const busyTimeout = 10 * time.Second

// Config configures a Store.
type Config struct {
	// Path is the database file. Its directory must exist.
	Path string
	// Retention is the most events the log keeps; 0 means DefaultRetention. Pruning runs in batches,
	// so the log may hold up to Retention/64 (at most 1024) events more for a while.
	Retention int
	// MaxAge, when set, also prunes events older than this. Pruning runs when events are appended and
	// when the store opens.
	MaxAge time.Duration
	// Now is the clock used for age pruning; nil means time.Now.
	Now func() time.Time
}

// Store is a sandbox.Store on one SQLite file. It is safe for concurrent use.
type Store struct {
	w         *sql.DB // one connection: every write transaction, BEGIN IMMEDIATE
	r         *sql.DB // read-only connections
	retention int64
	slack     int64 // events above retention tolerated before a count prune
	maxAge    time.Duration
	now       func() time.Time

	getStmt  *sql.Stmt
	listStmt *sql.Stmt
}

var _ sandbox.Store = (*Store)(nil)

// Open opens or creates the store at cfg.Path and brings its schema up to date. A file whose schema is
// newer than this program knows is refused with ErrSchemaTooNew.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Path == "" {
		return nil, errors.New("sqlite store: no path")
	}
	if strings.ContainsRune(cfg.Path, '?') || strings.HasPrefix(cfg.Path, "file:") || strings.HasPrefix(cfg.Path, ":") {
		return nil, fmt.Errorf("sqlite store: unsupported path %q", cfg.Path)
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("sqlite store: negative retention %d", cfg.Retention)
	}
	if cfg.MaxAge < 0 {
		return nil, fmt.Errorf("sqlite store: negative max age %s", cfg.MaxAge)
	}
	s := &Store{retention: int64(cfg.Retention), maxAge: cfg.MaxAge, now: cfg.Now}
	if s.retention == 0 {
		s.retention = DefaultRetention
	}
	s.slack = min(s.retention/64, 1024)
	if s.now == nil {
		s.now = time.Now
	}

	w, err := sql.Open("sqlite", dsn(cfg.Path, "immediate", false))
	if err != nil {
		return nil, fmt.Errorf("sqlite store: open %s: %w", cfg.Path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s.w = w
	if err := s.init(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite store: open %s: %w", cfg.Path, err)
	}

	r, err := sql.Open("sqlite", dsn(cfg.Path, "deferred", true))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite store: open %s: %w", cfg.Path, err)
	}
	n := max(4, 2*runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	r.SetConnMaxLifetime(0)
	r.SetConnMaxIdleTime(0)
	s.r = r
	if err := s.prepare(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite store: open %s: %w", cfg.Path, err)
	}
	return s, nil
}

// dsn builds the driver's data source name. The write connection takes the write lock when its
// transaction begins, so two writers never deadlock upgrading a read lock; readers are query-only.
func dsn(path, txlock string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", txlock)
	if readOnly {
		q.Set("_query_only", "1")
	} else {
		// WAL persists in the file; NORMAL is durable against a crash of the process, and after a
		// power loss the file is consistent though the last commits may be lost.
		q.Set("_journal_mode", "WAL")
		q.Set("_synchronous", "NORMAL")
	}
	return path + "?" + q.Encode()
}

// init checks the journal mode, migrates the schema and prunes what the retention bounds expire.
func (s *Store) init(ctx context.Context) error {
	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, not wal", mode)
	}
	if err := migrate(ctx, s.w, migrations); err != nil {
		return err
	}
	return s.write(ctx, func(tx *sql.Tx) error { return s.prune(ctx, tx) })
}

func (s *Store) prepare(ctx context.Context) error {
	var err error
	if s.getStmt, err = s.r.PrepareContext(ctx, `SELECT doc FROM sandboxes WHERE id = ?`); err != nil {
		return err
	}
	if s.listStmt, err = s.r.PrepareContext(ctx, `SELECT doc FROM sandboxes ORDER BY seq`); err != nil {
		return err
	}
	return nil
}

// write runs fn in one write transaction and commits it when fn returns nil.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin write: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// Close releases the store's connections.
func (s *Store) Close() error {
	var errs []error
	for _, st := range []*sql.Stmt{s.getStmt, s.listStmt} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	return errors.Join(errs...)
}
