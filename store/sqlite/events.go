package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	sandbox "github.com/sandboxd/sandbox"
)

// AppendEvents appends events that change no sandbox and returns them with their cursors, in order,
// as Events will return them: timestamps in UTC, empty Data as nil.
// An event whose timestamp RFC 3339 cannot write (a year outside 0..9999) is ErrInvalidRequest.
func (s *Store) AppendEvents(ctx context.Context, events []sandbox.Event) ([]sandbox.Event, error) {
	if len(events) == 0 {
		return []sandbox.Event{}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("append events: %w", err)
	}
	for _, e := range events {
		if err := checkEvent(e); err != nil {
			return nil, fmt.Errorf("append events: %w", err)
		}
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if evs, ok := s.appendToJournal(events); ok {
		return evs, nil
	}
	var cursors []int64
	err := s.writeLocked(ctx, func() error {
		var err error
		cursors, err = s.appendEvents(ctx, events)
		return err
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("append events: %w", err)
	}
	return withCursors(events, cursors), nil
}

// checkEvent refuses an event the log cannot keep.
func checkEvent(e sandbox.Event) error {
	if y := e.Timestamp.UTC().Year(); y < 0 || y > 9999 {
		return fmt.Errorf("event %s of %s: timestamp %s out of range: %w", e.Type, e.SandboxID, e.Timestamp.UTC(), sandbox.ErrInvalidRequest)
	}
	return nil
}

// insertEvent inserts e, its cursor assigned, with ins (qInsertEvent on the write connection).
func insertEvent(ctx context.Context, ins *sql.Stmt, e sandbox.Event) error {
	ts := e.Timestamp.UTC()
	var data any // NULL: no data, nil or empty alike
	if len(e.Data) > 0 {
		data = []byte(e.Data)
	}
	_, err := ins.ExecContext(ctx, e.Cursor, string(e.Type), string(e.SandboxID), int64(e.Generation),
		ts.Format(time.RFC3339Nano), ts.UnixNano(), data)
	return err
}

// appendEvents inserts events in order in the write transaction, returns their cursors and prunes the
// log.
func (s *Store) appendEvents(ctx context.Context, events []sandbox.Event) ([]int64, error) {
	if len(events) == 0 {
		return nil, nil
	}
	ins, err := s.ws.get(qInsertEvent)
	if err != nil {
		return nil, fmt.Errorf("insert event: %w", err)
	}
	head := &s.pend.head
	if err := s.readHead(ctx); err != nil {
		return nil, err
	}
	cursors := make([]int64, len(events))
	for i, e := range events {
		if err := checkEvent(e); err != nil {
			return nil, err
		}
		e.Cursor = head.last + 1
		if err := insertEvent(ctx, ins, e); err != nil {
			s.head.ok = false // a cursor refused means the head is not what the file holds: read it again
			return nil, fmt.Errorf("insert event: %w", err)
		}
		cursors[i], head.last = e.Cursor, e.Cursor
	}
	if err := s.prune(ctx); err != nil {
		return nil, err
	}
	if evs := ownData(withCursors(events, cursors)); s.pend.evs == nil {
		s.pend.evs = evs
	} else {
		s.pend.evs = append(s.pend.evs, evs...)
	}
	return cursors, nil
}

// readHead reads the log's head from the file, in the write transaction, unless memory knows it.
func (s *Store) readHead(ctx context.Context) error {
	head := &s.pend.head
	if head.ok {
		return nil
	}
	// In the transaction: what it appended is included, as it will be once it commits.
	*head = logHead{}
	if err := s.ws.scan(ctx, qLogState, nil, &head.pruned, &head.last); err != nil {
		return fmt.Errorf("reading the log's head: %w", err)
	}
	head.ok = true
	return nil
}

// prune deletes the oldest events beyond the retention bounds, always a prefix of the log, and records
// the newest deleted cursor. The count bound is enforced in batches of s.slack events, so an append
// usually deletes nothing; the age check reads only the oldest retained row unless some have expired.
// The log's head comes from memory (s.pend.head), so the count check alone costs no query; it is read
// from the file, in the write transaction, only when memory does not know it.
func (s *Store) prune(ctx context.Context) error {
	if err := s.readHead(ctx); err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	head := &s.pend.head
	pruned, last := head.pruned, head.last
	// Cursors are dense: each is one past the head, a rolled-back append leaves the committed head
	// where it was, and rows are only ever deleted as a prefix, so last - pruned is the number of
	// retained events.
	through := pruned
	if last-pruned > s.retention+s.slack {
		through = last - s.retention
	}
	// The age bound deletes every event before the oldest young one. When the count bound moves
	// nothing and the oldest retained event is the young one found last time, still young, that is
	// nothing: skip the query.
	if cutoff := s.now().Add(-s.maxAge).UnixNano(); s.maxAge > 0 &&
		!(through == pruned && head.young == pruned+1 && head.youngNs >= cutoff) {
		var first, firstNs int64
		err := s.ws.scan(ctx, qFirstYoung, []any{through, cutoff}, &first, &firstNs)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			through = last // every retained event has expired
			head.young = 0
		case err != nil:
			return fmt.Errorf("prune: %w", err)
		default:
			through = max(through, first-1)
			head.young, head.youngNs = first, firstNs
		}
	}
	if through <= pruned {
		return nil
	}
	if _, err := s.ws.exec(ctx, qDeleteEvents, through); err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	if _, err := s.ws.exec(ctx, qSetPruned, through); err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	s.pend.pruned = through
	head.pruned = through
	return nil
}

// Events returns the events after q.After, oldest first, at most q.Limit (0 or more than
// sandbox.MaxEventPage means sandbox.MaxEventPage), only q.SandboxID's when set. It returns
// ErrEventHistoryUnavailable when events after q.After have been pruned (q.After is older than the
// oldest retained cursor - 1), and ErrInvalidRequest for a negative After or Limit. A cursor beyond
// the newest event gives an empty page.
func (s *Store) Events(ctx context.Context, q sandbox.EventQuery) ([]sandbox.Event, error) {
	if q.After < 0 || q.Limit < 0 {
		return nil, fmt.Errorf("events after %d, limit %d: %w", q.After, q.Limit, sandbox.ErrInvalidRequest)
	}
	limit := q.Limit
	if limit == 0 || limit > sandbox.MaxEventPage {
		limit = sandbox.MaxEventPage
	}
	if out, ok := s.tail.page(q, limit); ok {
		return out, nil
	}
	// The file answers, once it holds what the journal does. Should it fail to take them (a full
	// disk), it answers what it holds: every event it lacks is newer than all it has, so a page
	// from it is the start of the right one.
	_ = s.flushJournal(ctx)
	// One read transaction: the history check and the page see the same snapshot.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	defer tx.Rollback()
	var pruned int64
	if err := s.rs.queryRow(ctx, tx, qPruned, nil, &pruned); err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	if q.After < pruned {
		return nil, fmt.Errorf("events after %d: history before cursor %d is pruned: %w", q.After, pruned+1, sandbox.ErrEventHistoryUnavailable)
	}
	query, args := qEvents, []any{q.After, limit}
	if q.SandboxID != "" {
		query, args = qSandboxEvents, []any{q.SandboxID, q.After, limit}
	}
	st, err := s.rs.in(ctx, tx, query)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	defer rows.Close()
	out := []sandbox.Event{}
	for rows.Next() {
		var (
			e    sandbox.Event
			ts   string
			data []byte
		)
		if err := rows.Scan(&e.Cursor, &e.Type, &e.SandboxID, &e.Generation, &ts, &data); err != nil {
			return nil, fmt.Errorf("events: %w", err)
		}
		if e.Timestamp, err = time.Parse(time.RFC3339Nano, ts); err != nil {
			return nil, fmt.Errorf("events: cursor %d: %w", e.Cursor, err)
		}
		if len(data) > 0 {
			e.Data = json.RawMessage(data)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return out, nil
}

// LastCursor is the cursor of the newest event ever appended, 0 if none; pruning does not lower it.
func (s *Store) LastCursor(ctx context.Context) (int64, error) {
	// Every event stream asks this on each wake: answer from the tail, which commits keep current.
	if last, ok := s.tail.last(); ok {
		return last, nil
	}
	var last int64
	st, err := s.rs.get(qLastCursor)
	if err != nil {
		return 0, fmt.Errorf("last cursor: %w", err)
	}
	if err := st.QueryRowContext(ctx).Scan(&last); err != nil {
		return 0, fmt.Errorf("last cursor: %w", err)
	}
	return last, nil
}

// LastEventOf is the cursor of sandbox id's newest event: any appended since the store opened (pruned
// or not), else the newest the file retains; 0 if none.
func (s *Store) LastEventOf(ctx context.Context, id sandbox.ID) (int64, error) {
	if c, ok := s.tail.lastEventOf(id); ok {
		return c, nil
	}
	// Read on the read connection's snapshot: an append that commits after it tells the tail, and
	// learn keeps what a commit told rather than this older answer.
	st, err := s.rs.get(qLastOf)
	if err != nil {
		return 0, fmt.Errorf("last event of %s: %w", id, err)
	}
	var c int64
	if err := st.QueryRowContext(ctx, string(id)).Scan(&c); err != nil {
		return 0, fmt.Errorf("last event of %s: %w", id, err)
	}
	return s.tail.learn(id, c), nil
}

// withCursors returns copies of events with their cursors set, timestamps in UTC and empty data nil,
// as Events returns them.
func withCursors(events []sandbox.Event, cursors []int64) []sandbox.Event {
	out := make([]sandbox.Event, len(events))
	for i, e := range events {
		e.Cursor = cursors[i]
		e.Timestamp = e.Timestamp.UTC()
		if len(e.Data) == 0 {
			e.Data = nil
		}
		out[i] = e
	}
	return out
}

// Pruned is the cursor up to which the log has been pruned (sandbox.PruneReporter): the oldest
// retained event is the one after it; 0 when nothing was pruned.
func (s *Store) Pruned(ctx context.Context) (int64, error) {
	var pruned int64
	st, err := s.rs.get(qPruned)
	if err != nil {
		return 0, fmt.Errorf("pruned cursor: %w", err)
	}
	if err := st.QueryRowContext(ctx).Scan(&pruned); err != nil {
		return 0, fmt.Errorf("pruned cursor: %w", err)
	}
	return pruned, nil
}
