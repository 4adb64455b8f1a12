package sqlite

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	sandbox "github.com/sandboxd/sandbox"
)

// tailMax is how many of the newest events the tail keeps; it drops the older half past it.
const tailMax = 4096

// tail holds the newest committed events in memory, so that a reader at the head of the log (an event
// stream woken by an append) costs no query. Like the sandbox cache it is written only after a commit,
// while the write lock is held, so it never runs ahead of the file. It holds every event with a cursor
// above base, in order, and the pruned cursor as committed; a query it cannot answer exactly goes to
// the file.
type tail struct {
	mu     sync.RWMutex
	ok     bool
	base   int64
	pruned int64
	evs    []sandbox.Event

	// lastOf is the cursor of each sandbox's newest event appended since the store opened, kept
	// whatever the tail drops or the log prunes (and of sandboxes looked up in the file, see LastEventOf).
	lastOf map[sandbox.ID]int64
}

// pending is what the write transaction in progress will add to the tail once it commits, and the log's
// head as it will be then.
type pending struct {
	evs    []sandbox.Event
	pruned int64
	head   logHead
}

// logHead is the event log's head: the newest pruned cursor and the newest cursor ever assigned. The
// store keeps it as committed, under the write lock, so that an append learns it without a query; ok
// is false until it is read from the file, and again whenever it may differ from the file (a commit
// that failed, a rollback that failed, an insert that failed).
type logHead struct {
	ok     bool
	pruned int64
	last   int64
	// young is the oldest retained event, when the age bound found it young: cursor pruned+1, its
	// timestamp youngNs. Until the age bound passes youngNs nothing can expire, and pruning skips
	// the query. Zero when not known.
	young, youngNs int64
}

// reset starts the tail empty at the log's current head.
func (t *tail) reset(last, pruned int64) {
	t.mu.Lock()
	t.ok, t.base, t.pruned, t.evs = true, last, pruned, nil
	t.mu.Unlock()
}

// commit records what a committed transaction appended and pruned.
func (t *tail) commit(p pending) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p.evs) > 0 && t.lastOf == nil {
		t.lastOf = make(map[sandbox.ID]int64)
	}
	for _, e := range p.evs {
		t.lastOf[e.SandboxID] = max(t.lastOf[e.SandboxID], e.Cursor)
	}
	if !t.ok {
		return
	}
	if len(p.evs) > 0 {
		if p.evs[0].Cursor != t.base+int64(len(t.evs))+1 {
			// Not the next cursor: start again after these events rather than hold a gap.
			t.base, t.evs = p.evs[len(p.evs)-1].Cursor, nil
		} else {
			t.evs = append(t.evs, p.evs...)
		}
	}
	if p.pruned > t.pruned {
		t.pruned = p.pruned
	}
	drop := 0
	if len(t.evs) > tailMax {
		drop = len(t.evs) - tailMax/2
	}
	if n := int(t.pruned - t.base); n > drop {
		drop = min(n, len(t.evs))
	}
	if drop > 0 {
		t.base += int64(drop)
		// Shift within the array the tail already has, which readers never hold on to (they copy
		// under the lock), so that trimming and the appends after it allocate nothing; a tail
		// grown far past tailMax by one big batch gets a new array of its size.
		if cap(t.evs) > 2*tailMax {
			t.evs = append([]sandbox.Event(nil), t.evs[drop:]...)
		} else {
			n := copy(t.evs, t.evs[drop:])
			clear(t.evs[n:])
			t.evs = t.evs[:n]
		}
	}
}

// last is the newest committed cursor, when the tail is started.
func (t *tail) last() (int64, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.base + int64(len(t.evs)), t.ok
}

// page answers q from memory when it can: q.After at or past both the tail's base and the pruned
// cursor. ok is false when the file must answer.
func (t *tail) page(q sandbox.EventQuery, limit int) (out []sandbox.Event, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if !t.ok || q.After < t.base || q.After < t.pruned {
		return nil, false
	}
	out = []sandbox.Event{}
	for i := min(int(q.After-t.base), len(t.evs)); i < len(t.evs) && len(out) < limit; i++ {
		if q.SandboxID == "" || t.evs[i].SandboxID == q.SandboxID {
			out = append(out, t.evs[i])
		}
	}
	return out, true
}

// lastEventOf returns the cursor of id's newest event, when the tail knows it.
func (t *tail) lastEventOf(id sandbox.ID) (int64, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	c, ok := t.lastOf[id]
	return c, ok
}

// learn records c as id's newest event, read from the file, unless a commit has told the tail since.
func (t *tail) learn(id sandbox.ID, c int64) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if have, ok := t.lastOf[id]; ok {
		return have
	}
	if t.lastOf == nil {
		t.lastOf = make(map[sandbox.ID]int64)
	}
	t.lastOf[id] = c
	return c
}

// startTail reads the head of the log and starts the tail there; with Config.NoTail the tail stays
// unstarted, so that every read goes to the file. It reads under the write lock: the journal's
// flusher runs from before the tail starts, and a query on the write connection while the flusher's
// transaction is open would read the head that transaction would leave, which it may roll back (a
// move of a crash's events on a full disk), and start the tail past what the file holds.
func (s *Store) startTail(ctx context.Context) error {
	if s.noTail {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	var pruned, last int64
	if err := s.wc.QueryRowContext(ctx, qPruned).Scan(&pruned); err != nil {
		return fmt.Errorf("event tail: %w", err)
	}
	if err := s.wc.QueryRowContext(ctx, qLastCursor).Scan(&last); err != nil {
		return fmt.Errorf("event tail: %w", err)
	}
	s.tail.reset(last, pruned)
	if s.jn != nil && len(s.jn.pending) > 0 {
		s.tail.commit(pending{evs: s.jn.pending}) // replayed, not yet in the file (journal.go)
	}
	return nil
}

// ownData gives events, copies made for the tail, their own data, so no caller's buffer is shared.
func ownData(evs []sandbox.Event) []sandbox.Event {
	for i := range evs {
		if evs[i].Data != nil {
			evs[i].Data = bytes.Clone(evs[i].Data)
		}
	}
	return evs
}
