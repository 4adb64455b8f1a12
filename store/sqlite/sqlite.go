// Package sqlite is the durable sandbox.Store: sandboxes, create intents and the event log in one
// embedded SQLite file (modernc.org/sqlite, pure Go) in WAL mode.
//
// Its main invariant: every write (a sandbox with its events and intent) is one serialized
// transaction on a single write connection, held for the store's lifetime and driven with prepared
// BEGIN IMMEDIATE, COMMIT and ROLLBACK, so a read-modify-write never loses an update; the store gives
// each event its cursor, one past the newest ever assigned, so a cursor is never reused, not after
// pruning and not after a restart. Events that change no sandbox (a command completed, a file
// written) are made durable in an append-only journal beside the file instead, and moved into it in
// batches; every transaction moves them first, so the log in the file has no gap (journal.go).
// Sandboxes are also kept decoded in memory, updated after each commit under the write lock, so Get
// and List never wait for a writer nor decode JSON; the newest events are kept in memory too, and the
// rest of the log is read through a separate pool of read-only connections. One Store at a time may
// use a file.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	sandbox "github.com/sandboxd/sandbox"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// DefaultRetention is how many events the log keeps when Config.Retention is zero.
const DefaultRetention = 100000

// ErrLocked is returned by Open when another Store, in this process or another, has the file open.
var ErrLocked = errors.New("store file is in use")

// busyTimeout bounds how long a connection waits for a lock held by another connection.
const busyTimeout = 10 * time.Second

// Config configures a Store.
type Config struct {
	// Path is the database file. Its directory must exist. Beside it live SQLite's -wal and -shm
	// files, Path+"-events", the journal of events not yet in the database (journal.go), and
	// Path+"-lock", which keeps a second Store off the file.
	Path string
	// Retention is the most events the log keeps; 0 means DefaultRetention. Pruning runs in batches,
	// so the log may hold up to Retention/64 (at most 1024) events more for a while.
	Retention int
	// MaxAge, when set, also prunes events older than this. Pruning runs when events are appended and
	// when the store opens.
	MaxAge time.Duration
	// Now is the clock used for age pruning; nil means time.Now.
	Now func() time.Time
	// NoTail answers every read of the event log from the file, as a store without the in-memory
	// tail of the newest events does: the tail's plain path (docs/design/event-tail.md).
	NoTail bool
	// NoJournal appends every event in a SQLite transaction of its own, as a store without the event
	// journal would (journal.go): the plain path of the journal, for comparisons. NoTail implies it,
	// since the tail serves the journal's events until they are moved into the file.
	NoJournal bool
	// ObserveCommit, when set, is told how long each write transaction's commit took.
	ObserveCommit func(time.Duration)
}

// Store is a sandbox.Store on one SQLite file. It is safe for concurrent use.
type Store struct {
	lock      *os.File // held while open: one Store per file
	closeOnce sync.Once
	closeErr  error
	wmu       sync.Mutex    // serializes write transactions together with their cache updates
	w         *sql.DB       // one connection: the schema migration, then wc
	wc        *sql.Conn     // w's connection, held from init to Close: every write transaction
	r         *sql.DB       // read-only connections, for the event log
	ck        *checkpointer // WAL checkpoints, beside the writes (checkpoint.go)
	ws        *stmts        // prepared on wc
	rs        *stmts        // prepared on r
	cache     cache
	tail      tail     // the newest committed events
	jn        *journal // events appended but not yet in the database (journal.go)
	pend      pending  // what the write in progress adds to tail; guarded by wmu
	head      logHead  // the event log's head as committed; guarded by wmu
	retention int64
	slack     int64 // events above retention tolerated before a count prune
	maxAge    time.Duration
	now       func() time.Time
	noTail    bool
	noJournal bool // Config.NoJournal or NoTail
	onCommit  func(time.Duration)
}

var _ sandbox.Store = (*Store)(nil)

// Open opens or creates the store at cfg.Path and brings its schema up to date. A file whose schema is
// newer than this program knows is refused with ErrSchemaTooNew, and a file another Store has open
// with ErrLocked.
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
	s := &Store{retention: int64(cfg.Retention), maxAge: cfg.MaxAge, now: cfg.Now, noTail: cfg.NoTail, noJournal: cfg.NoJournal || cfg.NoTail, onCommit: cfg.ObserveCommit}
	if s.retention == 0 {
		s.retention = DefaultRetention
	}
	s.slack = min(s.retention/64, 1024)
	if s.now == nil {
		s.now = time.Now
	}

	// The database holds every spec (environment values included): its owner's alone. SQLite gives its
	// -wal and -shm files the database file's mode.
	if err := ownerOnly(cfg.Path); err != nil {
		return nil, fmt.Errorf("sqlite store: open: %w", err)
	}
	lock, err := lockFile(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: open: %w", err)
	}
	s.lock = lock
	w, err := sql.Open("sqlite", dsn(cfg.Path, "immediate", false))
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("sqlite store: open %s: %w", cfg.Path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s.w = w
	if err := s.init(ctx, cfg.Path+journalSuffix); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite store: open %s: %w", cfg.Path, err)
	}
	s.startFlusher()

	r, err := sql.Open("sqlite", dsn(cfg.Path, "deferred", true))
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite store: open %s: %w", cfg.Path, err)
	}
	n := max(4, 2*runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	r.SetConnMaxLifetime(0)
	r.SetConnMaxIdleTime(0)
	s.r = r
	ck, err := sql.Open("sqlite", dsn(cfg.Path, "deferred", false))
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite store: open %s: %w", cfg.Path, err)
	}
	ck.SetMaxOpenConns(1)
	s.ck = startCheckpointer(ck, &s.wmu)
	s.rs = newStmts(r)
	if err := s.rs.prepare(ctx, readQueries); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite store: open %s: %w", cfg.Path, err)
	}
	if err := s.startTail(ctx); err != nil {
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
		// Not in the commits: the store's checkpointer does it beside them (checkpoint.go).
		q.Add("_pragma", "wal_autocheckpoint(0)")
	}
	return path + "?" + q.Encode()
}

// init checks the journal mode, migrates the schema, takes the write connection, prunes what the
// retention bounds expire, opens the event journal at journalPath and moves what a crash left in it
// into the database, and loads the sandboxes.
func (s *Store) init(ctx context.Context, journalPath string) error {
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
	// Every write runs on this one connection; holding it spares each transaction database/sql's
	// per-transaction context and goroutine, and lets BEGIN and COMMIT be prepared once.
	wc, err := s.w.Conn(ctx)
	if err != nil {
		return err
	}
	s.wc = wc
	s.ws = newStmts(wc)
	if err := s.ws.prepare(ctx, writeQueries); err != nil {
		return err
	}
	if err := s.write(ctx, func() error { return s.prune(ctx) }, nil); err != nil {
		return err
	}
	if err := s.replayJournal(ctx, journalPath); err != nil {
		return err
	}
	return s.load(ctx)
}

// write runs fn in one write transaction on the write connection and commits it when fn returns nil;
// then it runs committed, if set, before the next write can begin. When fn fails (or panics), or ctx
// is done before the commit, the transaction is rolled back and nothing is written.
func (s *Store) write(ctx context.Context, fn func() error, committed func()) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.writeLocked(ctx, fn, committed)
}

// writeLocked is write for a caller that holds wmu.
func (s *Store) writeLocked(ctx context.Context, fn func() error, committed func()) error {
	if _, err := s.ws.exec(ctx, qBegin); err != nil {
		s.rollback(ctx) // an interrupted BEGIN may have begun
		return fmt.Errorf("begin write: %w", err)
	}
	s.pend = pending{head: s.head}
	done := false
	defer func() {
		if !done {
			s.rollback(ctx)
			if s.jn != nil {
				s.jn.moving = 0
			}
		}
		s.pend = pending{}
	}()
	// Events appended to the journal go first, so that the log in the file has no gap (journal.go).
	if err := s.moveJournal(ctx); err != nil {
		return err
	}
	if err := fn(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	// Not cancelled half-way: a commit that has begun is let finish.
	start := time.Now()
	if _, err := s.ws.exec(context.WithoutCancel(ctx), qCommit); err != nil {
		s.head.ok = false // committed or not: read the head again
		return fmt.Errorf("commit: %w", err)
	}
	if s.onCommit != nil {
		s.onCommit(time.Since(start))
	}
	done = true
	if s.jn != nil && s.jn.moving > 0 {
		s.jn.moved()
	}
	if s.ck != nil {
		s.ck.committed()
	}
	s.head = s.pend.head
	s.tail.commit(s.pend)
	if committed != nil {
		committed()
	}
	return nil
}

// rollback ends the write transaction, if one is open, discarding it. The head is read again when
// that fails, for then what the file holds is not known.
func (s *Store) rollback(ctx context.Context) {
	if _, err := s.ws.exec(context.WithoutCancel(ctx), qRollback); err != nil {
		s.head.ok = false
	}
}

// Close releases the store's connections and its lock on the file. Closing again returns the first
// result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Store) close() error {
	errs := []error{s.closeJournal()} // moves what is pending, so first
	if s.ck != nil {
		s.ck.stop()
		errs = append(errs, s.ck.db.Close())
	}
	for _, c := range []*stmts{s.rs, s.ws} {
		if c != nil {
			errs = append(errs, c.close())
		}
	}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.wc != nil {
		errs = append(errs, s.wc.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Close()) // closing the file releases the lock
	}
	return errors.Join(errs...)
}

// ownerOnly makes the database file at path, or takes the one there, readable and writable by its owner
// alone, and its -wal and -shm files too when they exist.
func ownerOnly(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}
