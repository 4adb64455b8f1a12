package sqlite

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	sandbox "github.com/sandboxd/sandbox"
)

// The event journal. Appends of events that change no sandbox (a command completed, a file written)
// are the most frequent writes, one on every command; each cost a SQLite transaction (≈100 µs of
// locks, two WAL frames and the VDBE) before its call could answer. Instead, such an append is made
// durable by one write(2) of its records to a file beside the database, Path+"-events", with the same
// durability as a commit under synchronous=NORMAL: it survives a crash of the process, not
// necessarily of the host. The events take their cursors and go into the tail at once, so readers
// see them as soon as the append returns. A flusher moves them into the database soon after, in one
// transaction, and every write transaction moves whatever is pending before its own statements, so
// the database's log never has a gap and stays in cursor order. Reads the tail cannot answer move the
// pending events first too. After the transaction that moved them commits, the file is cut back to
// its header. Opening the store replays what a crash left: records past the database's newest cursor
// are inserted; records it already holds (moved, then the crash came before the cut) are skipped; a
// record cut short or corrupt ends the replay, for it was being written when the process died and its
// append never returned. While the database cannot take pending events (a full disk), they stay in
// the journal and in memory, and the flusher tries again.
//
// An append goes to the database in a transaction, taking whatever is pending with it, when the journal
// cannot take it without changing what the store answers: when it would make the log prune (so the
// pruning stays exact), when the log's head cannot be known (after a failed commit it is read from the
// file again), when too many events are pending, or when the journal's file failed.

const (
	// journalSuffix names the journal beside the database file.
	journalSuffix = "-events"
	// journalHeader starts every journal file; a file that does not start with it is not replayed.
	journalHeader = "sandboxd event journal 1\n"
	// journalMaxPending bounds the events waiting in the journal; an append past it goes to the
	// database, with them.
	journalMaxPending = 256
)

// journalFlushDelay is how long after an append into an empty journal the flusher moves it into the
// database, so that a burst of appends shares one transaction.
var journalFlushDelay = 10 * time.Millisecond

// journal is the file and the events in it that the database lacks. Guarded by the store's wmu.
type journal struct {
	f       *os.File
	size    int64           // bytes in f
	pending []sandbox.Event // in f, not yet in the database, oldest first
	moving  int             // how many of pending the open write transaction inserted
	broken  bool            // a write failed and could not be undone: appends go to the database
	buf     []byte
	running bool // the flusher was started

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// replayJournal opens the journal at path and moves the events a crash left in it into the database.
// When the database cannot take them now (a full disk), they stay pending: the store serves them from
// memory like any journaled event, and the flusher tries again.
func (s *Store) replayJournal(ctx context.Context, path string) error {
	pruned, last := s.head.pruned, s.head.last // read by init's prune write, just committed
	j, err := openJournal(path, last)
	if err != nil {
		return err
	}
	s.jn = j
	if len(j.pending) == 0 {
		return nil
	}
	// The log's head counts them, as it counts journaled appends.
	head := logHead{ok: true, pruned: pruned, last: last + int64(len(j.pending))}
	s.head = head
	if err := s.write(ctx, func() error { return nil }, nil); err != nil {
		s.head = head // a failed commit leaves the head unknown; it is this
	}
	return nil
}

// openJournal opens (or creates) the journal at path and reads the events a crash left in it that the
// database lacks: the database's newest cursor is last, and the records after it must follow it with
// no gap.
func openJournal(path string, last int64) (*journal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("event journal: %w", err)
	}
	j := &journal{f: f, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	b, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("event journal %s: %w", path, err)
	}
	switch {
	case len(b) < len(journalHeader) && bytes.HasPrefix([]byte(journalHeader), b):
		// New, or its header cut short by a crash as it was made: no record was ever written.
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, fmt.Errorf("event journal %s: %w", path, err)
		}
		if _, err := f.WriteString(journalHeader); err != nil {
			f.Close()
			return nil, fmt.Errorf("event journal %s: %w", path, err)
		}
		j.size = int64(len(journalHeader))
		return j, nil
	case !bytes.HasPrefix(b, []byte(journalHeader)):
		f.Close()
		return nil, fmt.Errorf("event journal %s: not a journal of this version (move it away to open the store without it)", path)
	}
	j.size = int64(len(b))
	evs := decodeRecords(b[len(journalHeader):])
	for _, e := range evs {
		switch {
		case e.Cursor <= last:
			continue // moved into the database before the crash
		case e.Cursor != last+int64(len(j.pending))+1:
			f.Close()
			return nil, fmt.Errorf("event journal %s: event %d does not follow the database's newest, %d (a journal of another database? move it away to open the store without it)",
				path, e.Cursor, last+int64(len(j.pending)))
		}
		j.pending = append(j.pending, e)
	}
	if len(j.pending) == 0 {
		// Nothing to replay: start the file over now rather than after a transaction.
		if err := j.truncate(); err != nil {
			f.Close()
			return nil, err
		}
	}
	return j, nil
}

// append writes events, their cursors assigned, as one write. On failure the file is cut back to
// what it held; if even that fails the journal is broken and takes no more appends.
func (j *journal) append(evs []sandbox.Event) error {
	j.buf = j.buf[:0]
	for _, e := range evs {
		j.buf = appendRecord(j.buf, e)
	}
	n, err := j.f.Write(j.buf)
	if err != nil {
		if n > 0 {
			if terr := j.f.Truncate(j.size); terr != nil {
				j.broken = true
			}
		}
		return fmt.Errorf("event journal: %w", err)
	}
	j.size += int64(n)
	if len(j.buf) > 64<<10 {
		j.buf = nil // a large batch's buffer is not kept
	}
	return nil
}

// moved drops the events the committed transaction inserted and starts the file over when nothing is
// left pending.
func (j *journal) moved() {
	j.pending = j.pending[j.moving:]
	j.moving = 0
	if len(j.pending) == 0 {
		j.pending = nil
		// A cut that fails leaves records the database holds, which a replay skips.
		_ = j.truncate()
	}
}

func (j *journal) truncate() error {
	if j.size == int64(len(journalHeader)) {
		return nil
	}
	if err := j.f.Truncate(int64(len(journalHeader))); err != nil {
		return fmt.Errorf("event journal: %w", err)
	}
	j.size = int64(len(journalHeader))
	return nil
}

// Records: the payload's length and its CRC-32C, four bytes each, little-endian, then the payload: the
// cursor and generation as varints, then the type, sandbox id, timestamp (RFC 3339, as the database
// keeps it) and data, each a uvarint length and its bytes.
// The table is made on first use: this package is linked into every agent, and making it at
// initialisation cost each agent's start 0.2-0.6 ms.
var crcTable = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

func appendRecord(b []byte, e sandbox.Event) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	b = binary.AppendVarint(b, e.Cursor)
	b = binary.AppendVarint(b, int64(e.Generation))
	var ts [64]byte
	for _, f := range [][]byte{[]byte(e.Type), []byte(e.SandboxID), e.Timestamp.UTC().AppendFormat(ts[:0], time.RFC3339Nano), e.Data} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	payload := b[start+8:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, crcTable()))
	return b
}

// decodeRecords returns the events of the whole records at the start of b, up to the first one cut
// short or corrupt.
func decodeRecords(b []byte) []sandbox.Event {
	var out []sandbox.Event
	for len(b) >= 8 {
		n := binary.LittleEndian.Uint32(b)
		if uint64(n) > uint64(len(b)-8) {
			break
		}
		payload := b[8 : 8+n]
		if crc32.Checksum(payload, crcTable()) != binary.LittleEndian.Uint32(b[4:]) {
			break
		}
		e, err := decodeRecord(payload)
		if err != nil {
			break
		}
		out = append(out, e)
		b = b[8+n:]
	}
	return out
}

var errBadRecord = errors.New("bad journal record")

func decodeRecord(p []byte) (sandbox.Event, error) {
	var e sandbox.Event
	cursor, n := binary.Varint(p)
	if n <= 0 {
		return e, errBadRecord
	}
	p = p[n:]
	gen, n := binary.Varint(p)
	if n <= 0 {
		return e, errBadRecord
	}
	p = p[n:]
	var fields [4][]byte
	for i := range fields {
		l, n := binary.Uvarint(p)
		if n <= 0 || l > uint64(len(p)-n) {
			return e, errBadRecord
		}
		fields[i], p = p[n:n+int(l)], p[n+int(l):]
	}
	if len(p) != 0 {
		return e, errBadRecord
	}
	ts, err := time.Parse(time.RFC3339Nano, string(fields[2]))
	if err != nil {
		return e, errBadRecord
	}
	e = sandbox.Event{Cursor: cursor, Type: sandbox.EventType(fields[0]), SandboxID: sandbox.ID(fields[1]),
		Generation: sandbox.Generation(gen), Timestamp: ts}
	if len(fields[3]) > 0 {
		e.Data = bytes.Clone(fields[3])
	}
	return e, nil
}

// appendToJournal appends events to the journal when it can take them (see above): it returns them with
// their cursors and true, or false when the caller must write them to the database. The caller holds
// wmu and has checked the events.
func (s *Store) appendToJournal(events []sandbox.Event) ([]sandbox.Event, bool) {
	j := s.jn
	if j == nil || s.noJournal || j.broken || len(j.pending)+len(events) > journalMaxPending || !s.knowHead() || s.wouldPrune(len(events)) {
		return nil, false
	}
	cursors := make([]int64, len(events))
	for i := range events {
		cursors[i] = s.head.last + 1 + int64(i)
	}
	evs := withCursors(events, cursors)
	if err := j.append(evs); err != nil {
		return nil, false // the database takes them
	}
	s.head.last += int64(len(events))
	kept := ownData(slices.Clone(evs)) // the journal's and the tail's, sharing no caller's data
	wasEmpty := len(j.pending) == 0
	j.pending = append(j.pending, kept...)
	s.tail.commit(pending{evs: kept})
	if wasEmpty {
		select {
		case j.kick <- struct{}{}:
		default:
		}
	}
	return evs, true
}

// knowHead reads the log's head from the file, outside any transaction, when memory does not know it
// (a commit failed: on a full disk, say), so that appends can go on to the journal. The pending
// events follow the file's newest, unless the commit that failed had in fact moved them. It reports
// whether the head is known. The caller holds wmu.
func (s *Store) knowHead() bool {
	if s.head.ok {
		return true
	}
	var pruned, last int64
	if err := s.ws.scan(context.Background(), qLogState, nil, &pruned, &last); err != nil {
		return false
	}
	j := s.jn
	if n := len(j.pending); n > 0 {
		switch {
		case last >= j.pending[n-1].Cursor: // in the file already
			j.moving = n
			j.moved()
		case last == j.pending[0].Cursor-1:
			last += int64(n)
		default:
			return false // not what the journal holds: the next transaction reads the head
		}
	}
	s.head = logHead{ok: true, pruned: pruned, last: last}
	return true
}

// wouldPrune reports whether appending n events would make prune delete anything (or have to look), by
// the log's committed head.
func (s *Store) wouldPrune(n int) bool {
	h := s.head
	if h.last+int64(n)-h.pruned > s.retention+s.slack {
		return true
	}
	return s.maxAge > 0 && !(h.young == h.pruned+1 && h.youngNs >= s.now().Add(-s.maxAge).UnixNano())
}

// moveJournal inserts the journal's pending events in the open write transaction.
func (s *Store) moveJournal(ctx context.Context) error {
	j := s.jn
	if j == nil || len(j.pending) == 0 {
		return nil
	}
	ins, err := s.ws.get(qInsertEvent)
	if err != nil {
		return fmt.Errorf("event journal: %w", err)
	}
	ctx = context.WithoutCancel(ctx) // the caller's transaction checks ctx before it commits
	for _, e := range j.pending {
		if err := insertEvent(ctx, ins, e); err != nil {
			return fmt.Errorf("event journal: %w", err)
		}
	}
	j.moving = len(j.pending)
	return nil
}

// flushJournal moves the journal's pending events into the database, when there are any.
func (s *Store) flushJournal(ctx context.Context) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.jn == nil || len(s.jn.pending) == 0 {
		return nil
	}
	return s.writeLocked(ctx, func() error { return nil }, nil)
}

// flusher moves the journal into the database journalFlushDelay after an append found it empty, until
// stopped. A move that fails (a full disk) is tried again after twice the wait, up to a second; a
// write transaction moves it too.
func (s *Store) flusher() {
	j := s.jn
	defer close(j.done)
	delay := journalFlushDelay
	for {
		select {
		case <-j.stop:
			return
		case <-j.kick:
		}
		t := time.NewTimer(delay)
		select {
		case <-j.stop:
			t.Stop()
			return
		case <-t.C:
		}
		if err := s.flushJournal(context.Background()); err != nil {
			delay = min(2*delay, time.Second)
			select {
			case j.kick <- struct{}{}:
			default:
			}
			continue
		}
		delay = journalFlushDelay
	}
}

// startFlusher starts the journal's flusher, kicked at once if a replay left events pending.
func (s *Store) startFlusher() {
	s.jn.running = true
	if len(s.jn.pending) > 0 {
		s.jn.kick <- struct{}{}
	}
	go s.flusher()
}

// closeJournal stops the flusher, moves what is pending and closes the file.
func (s *Store) closeJournal() error {
	j := s.jn
	if j == nil {
		return nil
	}
	close(j.stop)
	if j.running {
		<-j.done
	}
	var errs []error
	if s.wc != nil {
		errs = append(errs, s.flushJournal(context.Background()))
	}
	errs = append(errs, j.f.Close())
	return errors.Join(errs...)
}
