package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	sandbox "github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/store/sqlite"
	"github.com/sandboxd/sandbox/store/storetest"
)

func open(t testing.TB, cfg sqlite.Config) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open %s: %v", cfg.Path, err)
	}
	return s
}

// paths are the ways the store keeps and answers the event log: events journalled and the newest
// answered from memory (the default), every append a transaction of its own (Config.NoJournal), and
// every read from the file as well (Config.NoTail, which implies NoJournal). The store's suites run
// each.
var paths = []struct {
	name string
	cfg  sqlite.Config
}{
	{"tail", sqlite.Config{}},
	{"NoJournal", sqlite.Config{NoJournal: true}},
	{"NoTail", sqlite.Config{NoTail: true}},
}

// withPath is cfg on path p.
func withPath(cfg sqlite.Config, p sqlite.Config) sqlite.Config {
	cfg.NoTail, cfg.NoJournal = p.NoTail, p.NoJournal
	return cfg
}

func TestStore(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) sandbox.Store {
				return open(t, withPath(sqlite.Config{Path: filepath.Join(t.TempDir(), "sandboxd.db")}, p.cfg))
			})
		})
	}
}

func TestStoreDurable(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			storetest.RunDurable(t, func(t *testing.T, dir string) sandbox.Store {
				return open(t, withPath(sqlite.Config{Path: filepath.Join(dir, "sandboxd.db")}, p.cfg))
			})
		})
	}
}

func TestStoreRetention(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			storetest.RunRetention(t, func(t *testing.T, dir string, retention int) sandbox.Store {
				return open(t, withPath(sqlite.Config{Path: filepath.Join(dir, "sandboxd.db"), Retention: retention}, p.cfg))
			})
		})
	}
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestMaxAgePrunesEverything(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	clk := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg := sqlite.Config{Path: path, MaxAge: time.Hour, Now: clk.Now}
	s := open(t, cfg)
	ref := sandbox.Ref{ID: "sbx_age", Generation: 1}
	ev := func() sandbox.Event {
		return sandbox.NewEvent(sandbox.EventFileWritten, ref, clk.Now(), sandbox.FileWrittenData{Path: "/f"})
	}
	var old []sandbox.Event
	for range 5 {
		got, err := s.AppendEvents(ctx, []sandbox.Event{ev()})
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, got...)
		clk.Add(time.Minute)
	}
	// All five are younger than an hour.
	if got, err := s.Events(ctx, sandbox.EventQuery{}); err != nil || len(got) != 5 {
		t.Fatalf("events within max age: %d, %v", len(got), err)
	}
	clk.Add(2 * time.Hour)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Opening prunes what expired meanwhile: every event, and 410 still works on the empty log.
	s = open(t, cfg)
	defer s.Close()
	if _, err := s.Events(ctx, sandbox.EventQuery{}); !errors.Is(err, sandbox.ErrEventHistoryUnavailable) {
		t.Fatalf("events after 0 with everything pruned: %v, want ErrEventHistoryUnavailable", err)
	}
	last := old[len(old)-1].Cursor
	if got, err := s.Events(ctx, sandbox.EventQuery{After: last}); err != nil || len(got) != 0 {
		t.Fatalf("events after the newest pruned cursor: %d, %v", len(got), err)
	}
	if l, err := s.LastCursor(ctx); err != nil || l != last {
		t.Fatalf("last cursor %d, %v; want %d", l, err, last)
	}

	// An append prunes what expired, keeping the young.
	fresh, err := s.AppendEvents(ctx, []sandbox.Event{ev()})
	if err != nil {
		t.Fatal(err)
	}
	if fresh[0].Cursor != last+1 {
		t.Fatalf("cursor %d after pruning everything, want %d", fresh[0].Cursor, last+1)
	}
	clk.Add(30 * time.Minute)
	young, err := s.AppendEvents(ctx, []sandbox.Event{ev()})
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(31 * time.Minute) // fresh is now older than an hour, young is not
	if _, err := s.AppendEvents(ctx, []sandbox.Event{ev()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events(ctx, sandbox.EventQuery{After: last}); !errors.Is(err, sandbox.ErrEventHistoryUnavailable) {
		t.Fatalf("events after %d once %d expired: %v, want ErrEventHistoryUnavailable", last, fresh[0].Cursor, err)
	}
	got, err := s.Events(ctx, sandbox.EventQuery{After: fresh[0].Cursor})
	if err != nil || len(got) != 2 || got[0].Cursor != young[0].Cursor {
		t.Fatalf("events after the expired one: %+v, %v", got, err)
	}
}

func TestEventsBadQuery(t *testing.T) {
	s := open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "sandboxd.db")})
	defer s.Close()
	for _, q := range []sandbox.EventQuery{{After: -1}, {Limit: -1}} {
		if _, err := s.Events(context.Background(), q); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Fatalf("events %+v: %v, want ErrInvalidRequest", q, err)
		}
	}
}

func TestOpenRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	for _, cfg := range []sqlite.Config{
		{},
		{Path: filepath.Join(dir, "a?b.db")},
		{Path: ":memory:"},
		{Path: filepath.Join(dir, "x.db"), Retention: -1},
		{Path: filepath.Join(dir, "x.db"), MaxAge: -time.Second},
		{Path: filepath.Join(dir, "missing", "x.db")},
	} {
		if s, err := sqlite.Open(context.Background(), cfg); err == nil {
			s.Close()
			t.Fatalf("open %+v succeeded", cfg)
		}
	}
}

func userVersion(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMigrateFreshAndReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	s := open(t, sqlite.Config{Path: path})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := userVersion(t, path); v != sqlite.SchemaVersion() {
		t.Fatalf("fresh file at version %d, want %d", v, sqlite.SchemaVersion())
	}
	var mode string
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal mode %q, %v; want wal", mode, err)
	}
	db.Close()
	// Reopening a current file applies nothing and keeps working.
	for range 3 {
		s := open(t, sqlite.Config{Path: path})
		if _, err := s.List(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if v := userVersion(t, path); v != sqlite.SchemaVersion() {
		t.Fatalf("reopened file at version %d, want %d", v, sqlite.SchemaVersion())
	}
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	s := open(t, sqlite.Config{Path: path})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", sqlite.SchemaVersion()+1)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err = sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if !errors.Is(err, sqlite.ErrSchemaTooNew) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("open of a newer schema: %v, want ErrSchemaTooNew", err)
	}
	if v := userVersion(t, path); v != sqlite.SchemaVersion()+1 {
		t.Fatalf("refused open changed the version to %d", v)
	}
}

func TestOpenLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	s := open(t, sqlite.Config{Path: path})
	if s2, err := sqlite.Open(context.Background(), sqlite.Config{Path: path}); !errors.Is(err, sqlite.ErrLocked) {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("second open of one file: %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	s = open(t, sqlite.Config{Path: path})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReturnedSandboxesAreCopies checks that changing what Get, List, Create or Update returned, or
// what fn was given after it returned, does not change the store.
func TestReturnedSandboxesAreCopies(t *testing.T) {
	ctx := context.Background()
	s := open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "sandboxd.db")})
	defer s.Close()
	spec := sandbox.Spec{ClientRequestID: "k", Image: "alpine:3", Resources: &sandbox.Resources{CPUMillis: 1}}
	canon, err := spec.CanonicalJSON()
	if err != nil {
		t.Fatal(err)
	}
	sb := &sandbox.Sandbox{ID: sandbox.NewID(), Generation: 1, State: sandbox.StateReady, Spec: spec,
		Endpoint: &sandbox.Endpoint{BaseURL: "http://a"}}
	created, _, err := s.Create(ctx, sb, sandbox.Intent{Key: "k", Spec: canon}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	sb.Spec.Resources.CPUMillis = 2
	created.Endpoint.BaseURL = "http://b"
	var kept *sandbox.Sandbox
	updated, _, err := s.Update(ctx, sb.ID, func(x *sandbox.Sandbox) (sandbox.Change, error) {
		kept = x
		return sandbox.Change{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	kept.State = sandbox.StateFailed
	updated.Spec.Image = "other"
	got, _ := s.Get(ctx, sb.ID)
	got.Spec.Resources.CPUMillis = 3
	list, _ := s.List(ctx)
	list[0].Endpoint = nil
	now, err := s.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(now, want) {
		t.Fatalf("store changed through a returned value:\n got %+v\nwant %+v", now, want)
	}
}

// FuzzEventRoundTrip appends an arbitrary event and checks the log gives it back unchanged, with
// its timestamp as the same instant in UTC.
func FuzzEventRoundTrip(f *testing.F) {
	f.Add("sandbox.created", "sbx_a", int64(1), int64(1700000000123456789), []byte(`{"a":1}`), false)
	f.Add("", "", int64(0), int64(0), []byte{}, true)
	f.Add("x\x00y", "sbx_\u00e9", int64(-5), int64(-62135596800000000000/1000), []byte("\xff not json"), false)
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(f.TempDir(), "fuzz.db"), Retention: 1000})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	f.Fuzz(func(t *testing.T, typ, id string, gen, ns int64, data []byte, nilData bool) {
		ctx := context.Background()
		e := sandbox.Event{Type: sandbox.EventType(typ), SandboxID: sandbox.ID(id), Generation: sandbox.Generation(gen),
			Timestamp: time.Unix(0, ns).In(time.FixedZone("Z1", 3600)), Data: data}
		if nilData {
			e.Data = nil
		}
		want := e
		if len(want.Data) == 0 {
			want.Data = nil // no data, however it was given
		}
		got, err := s.AppendEvents(ctx, []sandbox.Event{e})
		if err != nil {
			t.Fatalf("append: %v", err)
		}
		page, err := s.Events(ctx, sandbox.EventQuery{After: got[0].Cursor - 1, Limit: 1})
		if err != nil || len(page) != 1 {
			t.Fatalf("read back: %d events, %v", len(page), err)
		}
		want.Cursor = got[0].Cursor
		want.Timestamp = e.Timestamp.UTC()
		if !reflect.DeepEqual(page[0], want) || !reflect.DeepEqual(got[0], want) {
			t.Fatalf("round trip:\n got %#v\n ret %#v\nwant %#v", page[0], got[0], want)
		}
	})
}

func TestAppendRefusesTimestampOutOfRange(t *testing.T) {
	ctx := context.Background()
	s := open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "sandboxd.db")})
	defer s.Close()
	e := sandbox.Event{Type: sandbox.EventFileWritten, SandboxID: "sbx_a", Timestamp: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := s.AppendEvents(ctx, []sandbox.Event{e}); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("append with year 10000: %v, want ErrInvalidRequest", err)
	}
	if l, err := s.LastCursor(ctx); err != nil || l != 0 {
		t.Fatalf("a refused append moved the last cursor to %d, %v", l, err)
	}
}

// TestPruneAfterRollbacks interleaves appends with appends that are refused halfway (their first event
// inserted, then rolled back) and with a reopen, on a retention with no slack, so every append past it
// prunes exactly: the log must keep the newest retention events and nothing older, its cursors dense.
func TestPruneAfterRollbacks(t *testing.T) {
	const retention = 10 // slack 0: each append past retention prunes to exactly retention
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	ref := sandbox.Ref{ID: "sbx_rb", Generation: 1}
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	good := sandbox.NewEvent(sandbox.EventFileWritten, ref, at, sandbox.FileWrittenData{Path: "/f"})
	bad := good
	bad.Timestamp = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	var last int64
	check := func(s *sqlite.Store, what string) {
		t.Helper()
		if l, err := s.LastCursor(ctx); err != nil || l != last {
			t.Fatalf("%s: last cursor %d, %v; want %d", what, l, err, last)
		}
		keep := max(last-retention, 0)
		got, err := s.Events(ctx, sandbox.EventQuery{After: keep})
		if err != nil || int64(len(got)) != last-keep {
			t.Fatalf("%s: events after %d: %d, %v; want %d", what, keep, len(got), err, last-keep)
		}
		for i, e := range got {
			if e.Cursor != keep+1+int64(i) {
				t.Fatalf("%s: event %d has cursor %d, want %d", what, i, e.Cursor, keep+1+int64(i))
			}
		}
		if keep > 0 {
			if _, err := s.Events(ctx, sandbox.EventQuery{After: keep - 1}); !errors.Is(err, sandbox.ErrEventHistoryUnavailable) {
				t.Fatalf("%s: events after %d: %v, want ErrEventHistoryUnavailable", what, keep-1, err)
			}
		}
	}
	s := open(t, sqlite.Config{Path: path, Retention: retention})
	for round := range 3 {
		for i := range 2 * retention {
			if i%3 == 0 {
				if _, err := s.AppendEvents(ctx, []sandbox.Event{good, bad}); !errors.Is(err, sandbox.ErrInvalidRequest) {
					t.Fatalf("append with year 10000: %v, want ErrInvalidRequest", err)
				}
				check(s, fmt.Sprintf("round %d, after refused append %d", round, i))
			}
			n := 1 + i%4
			batch := make([]sandbox.Event, n)
			for j := range batch {
				batch[j] = good
			}
			got, err := s.AppendEvents(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			if got[0].Cursor != last+1 {
				t.Fatalf("round %d: cursor %d, want %d", round, got[0].Cursor, last+1)
			}
			last += int64(n)
			check(s, fmt.Sprintf("round %d, append %d", round, i))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = open(t, sqlite.Config{Path: path, Retention: retention})
		check(s, fmt.Sprintf("reopened after round %d", round))
	}
	s.Close()
}

// TestWriteEndsItsTransaction checks that a write that does not commit (its update panics, or its
// context is done) leaves nothing behind: the next writes work and see none of it.
func TestWriteEndsItsTransaction(t *testing.T) {
	ctx := context.Background()
	s := open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "sandboxd.db")})
	defer s.Close()
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	sb := &sandbox.Sandbox{ID: "sbx_tx", Generation: 1, State: sandbox.StateReady, Provider: "host", CreatedAt: at, UpdatedAt: at}
	if _, _, err := s.Create(ctx, sb, sandbox.Intent{Key: "k", Spec: []byte(`{}`)}, nil); err != nil {
		t.Fatal(err)
	}
	event := func(sb *sandbox.Sandbox) sandbox.Event {
		return sandbox.NewEvent(sandbox.EventStateChanged, sb.Ref(), at, sandbox.StateChangedData{From: sandbox.StateReady, To: sandbox.StatePaused})
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the update's panic was swallowed")
			}
		}()
		s.Update(ctx, sb.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) { panic("update fails") })
	}()
	cancelled, cancel := context.WithCancel(ctx)
	_, _, err := s.Update(cancelled, sb.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		sb.State = sandbox.StatePaused
		cancel() // done after the statements ran, before the commit
		return sandbox.Change{Events: []sandbox.Event{event(sb)}}, nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("update whose context was cancelled: %v, want context.Canceled", err)
	}
	if _, _, err := s.Update(cancelled, sb.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		t.Error("an update with a cancelled context ran")
		return sandbox.Change{}, nil
	}); err == nil {
		t.Fatal("update with a cancelled context succeeded")
	}
	if got, err := s.Get(ctx, sb.ID); err != nil || got.State != sandbox.StateReady {
		t.Fatalf("after writes that did not commit: %+v, %v", got, err)
	}
	if l, err := s.LastCursor(ctx); err != nil || l != 0 {
		t.Fatalf("last cursor %d, %v after writes that did not commit", l, err)
	}
	got, evs, err := s.Update(ctx, sb.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		sb.State = sandbox.StatePaused
		return sandbox.Change{Events: []sandbox.Event{event(sb)}}, nil
	})
	if err != nil || got.State != sandbox.StatePaused || len(evs) != 1 || evs[0].Cursor != 1 {
		t.Fatalf("update after writes that did not commit: %+v, %+v, %v", got, evs, err)
	}
	if page, err := s.Events(ctx, sandbox.EventQuery{}); err != nil || len(page) != 1 || page[0].Cursor != 1 {
		t.Fatalf("events: %+v, %v", page, err)
	}
}

// TestLastEventOfOutlivesPruning: a sandbox's newest event is known after the log pruned it, for as long
// as the store stays open; reopened, the store knows what it retains.
func TestLastEventOfOutlivesPruning(t *testing.T) {
	ctx := context.Background()
	cfg := sqlite.Config{Path: filepath.Join(t.TempDir(), "sandboxd.db"), Retention: 4}
	s := open(t, cfg)
	quiet, busy := sandbox.Ref{ID: "sbx_quiet", Generation: 1}, sandbox.Ref{ID: "sbx_busy", Generation: 1}
	ev := func(ref sandbox.Ref) sandbox.Event {
		return sandbox.NewEvent(sandbox.EventFileWritten, ref, time.Now(), sandbox.FileWrittenData{Path: "/f"})
	}
	got, err := s.AppendEvents(ctx, []sandbox.Event{ev(quiet)})
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		if _, err := s.AppendEvents(ctx, []sandbox.Event{ev(busy)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Events(ctx, sandbox.EventQuery{After: got[0].Cursor - 1}); !errors.Is(err, sandbox.ErrEventHistoryUnavailable) {
		t.Fatalf("the quiet sandbox's event is still retained (%v): the test needs it pruned", err)
	}
	if c, err := s.LastEventOf(ctx, quiet.ID); err != nil || c != got[0].Cursor {
		t.Fatalf("newest event of the quiet sandbox after pruning: %d, %v; want %d", c, err, got[0].Cursor)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, cfg)
	defer s.Close()
	if c, err := s.LastEventOf(ctx, quiet.ID); err != nil || c != 0 {
		t.Fatalf("reopened, newest retained event of the quiet sandbox: %d, %v; want 0", c, err)
	}
	last, err := s.LastCursor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.LastEventOf(ctx, busy.ID); err != nil || c != last {
		t.Fatalf("reopened, newest event of the busy sandbox: %d, %v; want %d", c, err, last)
	}
}

// TestCheckpointsKeepTheWALSmall: commits do not checkpoint themselves (the store's checkpointer does,
// beside them), and the WAL still starts over instead of growing with every commit, also under appends
// that never pause: 8000 of them leave about 70 MiB of WAL without checkpoints, about 20 with.
func TestCheckpointsKeepTheWALSmall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	s := open(t, sqlite.Config{Path: path})
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	code := 0
	for i := 0; i < 8000; i++ {
		ev := sandbox.NewEvent(sandbox.EventCommandCompleted, ref, time.Now(), sandbox.CommandCompletedData{ExitCode: &code})
		if _, err := s.AppendEvents(context.Background(), []sandbox.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > 48<<20 {
		t.Fatalf("WAL of %d MiB after 8000 appends", st.Size()>>20)
	}
	t.Logf("WAL %d KiB after 8000 appends", st.Size()>>10)
}

// TestMaxAgePruneMatchesModel appends events whose timestamps go back and forth while the clock moves
// on, and checks after every append that the log holds exactly what the age bound leaves: everything
// from the oldest event still young, by cursor. Pruning skips its query while it knows that event is
// young; this is what that shortcut must not change.
func TestMaxAgePruneMatchesModel(t *testing.T) {
	ctx := context.Background()
	clk := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "sandboxd.db"), MaxAge: time.Hour, Now: clk.Now})
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	type kept struct {
		cursor int64
		ts     time.Time
	}
	var model []kept
	ref := sandbox.Ref{ID: "sbx_model", Generation: 1}
	for i := 0; i < 400; i++ {
		clk.Add(time.Duration(rng.IntN(300)) * time.Second)
		ts := clk.Now().Add(-time.Duration(rng.IntN(90)) * time.Minute)
		got, err := s.AppendEvents(ctx, []sandbox.Event{sandbox.NewEvent(sandbox.EventFileWritten, ref, ts, nil)})
		if err != nil {
			t.Fatal(err)
		}
		model = append(model, kept{got[0].Cursor, ts})
		cutoff := clk.Now().Add(-time.Hour)
		first := len(model)
		for j, k := range model {
			if !k.ts.Before(cutoff) {
				first = j
				break
			}
		}
		model = model[first:]
		if len(model) == 0 {
			continue
		}
		evs, err := s.Events(ctx, sandbox.EventQuery{After: model[0].cursor - 1})
		if err != nil {
			t.Fatalf("append %d: events from %d: %v", i, model[0].cursor, err)
		}
		if len(evs) != len(model) {
			t.Fatalf("append %d: %d events retained, the model keeps %d", i, len(evs), len(model))
		}
		for j := range evs {
			if evs[j].Cursor != model[j].cursor {
				t.Fatalf("append %d: event %d has cursor %d, the model %d", i, j, evs[j].Cursor, model[j].cursor)
			}
		}
		if c := model[0].cursor - 2; c >= 0 {
			if _, err := s.Events(ctx, sandbox.EventQuery{After: c}); !errors.Is(err, sandbox.ErrEventHistoryUnavailable) {
				t.Fatalf("append %d: events after %d, before the oldest kept: %v, want ErrEventHistoryUnavailable", i, c, err)
			}
		}
	}
}
