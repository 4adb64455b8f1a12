package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// lastCursor is the newest cursor ever assigned, in a query on event_log: the newest row, or the newest
// pruned one when the log was pruned empty.
const lastCursor = `MAX(pruned_through, COALESCE((SELECT MAX(cursor) FROM events), 0))`

// The queries of the write connection.
const (
	qInsertEvent   = `INSERT INTO events (cursor, type, sandbox_id, generation, ts, ts_ns, data) VALUES (?, ?, ?, ?, ?, ?, ?)`
	qLogState      = `SELECT pruned_through, ` + lastCursor + ` FROM event_log`
	qFirstYoung    = `SELECT cursor, ts_ns FROM events WHERE cursor > ? AND ts_ns >= ? ORDER BY cursor LIMIT 1`
	qDeleteEvents  = `DELETE FROM events WHERE cursor <= ?`
	qSetPruned     = `UPDATE event_log SET pruned_through = ?`
	qGetIntent     = `SELECT sandbox_id, generation, spec FROM intents WHERE key = ?`
	qInsertSandbox = `INSERT INTO sandboxes (id, generation, state, doc) VALUES (?, ?, ?, ?)`
	qUpdateSandbox = `UPDATE sandboxes SET generation = ?, state = ?, doc = ? WHERE id = ?`
	qInsertIntent  = `INSERT INTO intents (key, sandbox_id, generation, spec) VALUES (?, ?, ?, ?)
		ON CONFLICT (key) DO NOTHING`
	// The write transaction. IMMEDIATE takes the write lock at BEGIN, so two writers never deadlock
	// upgrading a read lock.
	qBegin    = `BEGIN IMMEDIATE`
	qCommit   = `COMMIT`
	qRollback = `ROLLBACK`
)

// The queries of the read connections.
const (
	qPruned        = `SELECT pruned_through FROM event_log`
	qEvents        = `SELECT cursor, type, sandbox_id, generation, ts, data FROM events WHERE cursor > ? ORDER BY cursor LIMIT ?`
	qSandboxEvents = `SELECT cursor, type, sandbox_id, generation, ts, data FROM events WHERE sandbox_id = ? AND cursor > ? ORDER BY cursor LIMIT ?`
	qLastCursor    = `SELECT ` + lastCursor + ` FROM event_log`
	qLastOf        = `SELECT COALESCE(MAX(cursor), 0) FROM events WHERE sandbox_id = ?`
)

var (
	writeQueries = []string{qInsertEvent, qLogState, qFirstYoung, qDeleteEvents, qSetPruned, qGetIntent, qInsertSandbox, qUpdateSandbox, qInsertIntent,
		qBegin, qCommit, qRollback}
	readQueries = []string{qPruned, qEvents, qSandboxEvents, qLastCursor, qLastOf}
)

// stmts keeps each query prepared once per pool or connection, so a hot path parses no SQL. The
// queries are prepared before the pool is used: preparing needs a connection.
type stmts struct {
	db preparer
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// preparer is a *sql.DB (the read pool) or a *sql.Conn (the write connection).
type preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

func newStmts(db preparer) *stmts { return &stmts{db: db, m: map[string]*sql.Stmt{}} }

// prepare prepares queries on the pool.
func (c *stmts) prepare(ctx context.Context, queries []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range queries {
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", q, err)
		}
		c.m[q] = st
	}
	return nil
}

// get returns query as prepared by prepare.
func (c *stmts) get(query string) (*sql.Stmt, error) {
	c.mu.Lock()
	st, ok := c.m[query]
	c.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("query not prepared: %q", query)
	}
	return st, nil
}

// in returns query prepared, bound to tx.
func (c *stmts) in(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	st, err := c.get(query)
	if err != nil {
		return nil, err
	}
	return tx.StmtContext(ctx, st), nil
}

// exec runs query on the statements' own connection, outside any sql.Tx: on the write connection, in
// the transaction the Store began there.
func (c *stmts) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := c.get(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// scan runs a one-row query as exec does and scans it into dest.
func (c *stmts) scan(ctx context.Context, query string, args []any, dest ...any) error {
	st, err := c.get(query)
	if err != nil {
		return err
	}
	return st.QueryRowContext(ctx, args...).Scan(dest...)
}

// queryRow runs a one-row query in tx and scans it into dest.
func (c *stmts) queryRow(ctx context.Context, tx *sql.Tx, query string, args []any, dest ...any) error {
	st, err := c.in(ctx, tx, query)
	if err != nil {
		return err
	}
	return st.QueryRowContext(ctx, args...).Scan(dest...)
}

func (c *stmts) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, st := range c.m {
		errs = append(errs, st.Close())
	}
	c.m = map[string]*sql.Stmt{}
	return errors.Join(errs...)
}
