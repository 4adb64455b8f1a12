// Package storetest is the conformance suite every sandbox.Store implementation runs: idempotent
// creates, atomic updates with their events and intents, the event log's cursors, paging and
// history bounds, and durability across reopen.
//
// Its main invariant is the Store contract itself: a store that passes Run, RunDurable and
// RunRetention keeps every rule the core relies on, so the core can be tested against any of them.
// Assertions use errors.Is on the sandbox error classes, never message text.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	sandbox "github.com/sandboxd/sandbox"
)

// Run runs the suite. open returns a new, empty store; the suite closes every store it gets.
func Run(t *testing.T, open func(t *testing.T) sandbox.Store) {
	get := func(t *testing.T) sandbox.Store {
		t.Helper()
		s := open(t)
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		return s
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s sandbox.Store)
	}{
		{"GetUnknown", testGetUnknown},
		{"CreateGetList", testCreateGetList},
		{"ListOldestFirst", testListOldestFirst},
		{"CreateIdempotent", testCreateIdempotent},
		{"CreateConflictOtherSpec", testCreateConflictOtherSpec},
		{"CreateConflictOldGeneration", testCreateConflictOldGeneration},
		{"CreateConcurrent", testCreateConcurrent},
		{"UpdateWritesEvents", testUpdateWritesEvents},
		{"UpdateFuncError", testUpdateFuncError},
		{"UpdateIntentTaken", testUpdateIntentTaken},
		{"UpdateConcurrentCounter", testUpdateConcurrentCounter},
		{"UpdateConcurrentFenced", testUpdateConcurrentFenced},
		{"AppendEvents", testAppendEvents},
		{"EventsRoundTrip", testEventsRoundTrip},
		{"EventsPaging", testEventsPaging},
		{"EventsPageLimit", testEventsPageLimit},
		{"EventsSandboxFilter", testEventsSandboxFilter},
		{"EventsBeyondNewest", testEventsBeyondNewest},
		{"LastCursor", testLastCursor},
		{"LastEventOf", testLastEventOf},
		{"ReadersDuringWrites", testReadersDuringWrites},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, get(t)) })
	}
}

// base is a fixed instant with nanoseconds, so time round trips are checked to the nanosecond.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// newSandbox returns a requested sandbox of generation 1 whose spec carries key, with its intent and
// its sandbox.created event.
func newSandbox(t *testing.T, key, image string) (*sandbox.Sandbox, sandbox.Intent, []sandbox.Event) {
	t.Helper()
	spec := sandbox.Spec{
		ClientRequestID:      key,
		Image:                image,
		Resources:            &sandbox.Resources{CPUMillis: 500, MemoryMiB: 256},
		RequiredCapabilities: []sandbox.Capability{sandbox.CapCommandExecution},
		Extensions:           map[string]json.RawMessage{"x.example/v1": json.RawMessage(`{"a":1}`)},
	}
	sb := &sandbox.Sandbox{
		ID:         sandbox.NewID(),
		Generation: 1,
		State:      sandbox.StateRequested,
		Spec:       spec,
		Provider:   "fake",
		CreatedAt:  base,
		UpdatedAt:  base,
	}
	canon, err := spec.CanonicalJSON()
	if err != nil {
		t.Fatalf("canonical spec: %v", err)
	}
	in := sandbox.Intent{Key: key, SandboxID: sb.ID, Generation: 1, Spec: canon}
	ev := sandbox.NewEvent(sandbox.EventCreated, sb.Ref(), base, sandbox.CreatedData{ClientRequestID: key, Spec: spec})
	return sb, in, []sandbox.Event{ev}
}

// mustCreate creates a fresh sandbox and fails unless it was created.
func mustCreate(t *testing.T, s sandbox.Store, key string) *sandbox.Sandbox {
	t.Helper()
	sb, in, evs := newSandbox(t, key, "alpine:3")
	got, created, err := s.Create(context.Background(), sb, in, evs)
	if err != nil {
		t.Fatalf("create %q: %v", key, err)
	}
	if !created {
		t.Fatalf("create %q: created=false for a new key", key)
	}
	return got
}

func mustGet(t *testing.T, s sandbox.Store, id sandbox.ID) *sandbox.Sandbox {
	t.Helper()
	sb, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return sb
}

func mustLast(t *testing.T, s sandbox.Store) int64 {
	t.Helper()
	c, err := s.LastCursor(context.Background())
	if err != nil {
		t.Fatalf("last cursor: %v", err)
	}
	return c
}

// mustEvents reads every event after `after`, page by page, checking that cursors strictly increase.
func mustEvents(t *testing.T, s sandbox.Store, q sandbox.EventQuery) []sandbox.Event {
	t.Helper()
	var all []sandbox.Event
	for {
		page, err := s.Events(context.Background(), q)
		if err != nil {
			t.Fatalf("events %+v: %v", q, err)
		}
		if len(page) == 0 {
			return all
		}
		for _, e := range page {
			if e.Cursor <= q.After {
				t.Fatalf("events %+v: cursor %d not after %d", q, e.Cursor, q.After)
			}
			q.After = e.Cursor
		}
		all = append(all, page...)
	}
}

func equalSandbox(t *testing.T, what string, got, want *sandbox.Sandbox) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func testGetUnknown(t *testing.T, s sandbox.Store) {
	ctx := context.Background()
	if _, err := s.Get(ctx, "sbx_unknown"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("get unknown: %v, want ErrNotFound", err)
	}
	called := false
	_, _, err := s.Update(ctx, "sbx_unknown", func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		called = true
		return sandbox.Change{}, nil
	})
	if !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("update unknown: %v, want ErrNotFound", err)
	}
	if called {
		t.Fatal("update of an unknown sandbox called fn")
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 0 {
		t.Fatalf("list of an empty store: %d sandboxes, %v", len(list), err)
	}
}

func testCreateGetList(t *testing.T, s sandbox.Store) {
	ctx := context.Background()
	sb, in, evs := newSandbox(t, "req-1", "alpine:3")
	sb.Endpoint = &sandbox.Endpoint{BaseURL: "http://127.0.0.1:1234"}
	sb.ProviderExtensions = map[string]json.RawMessage{"oci": json.RawMessage(`{"pid":42}`)}
	sb.Failure = &sandbox.Failure{Code: "none", Message: "a message"}
	want := *sb
	got, created, err := s.Create(ctx, sb, in, evs)
	if err != nil || !created {
		t.Fatalf("create: created=%v, %v", created, err)
	}
	equalSandbox(t, "create result", got, &want)
	equalSandbox(t, "get", mustGet(t, s, sb.ID), &want)
	list, err := s.List(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(list) != 1 {
		t.Fatalf("list: %d sandboxes, want 1", len(list))
	}
	equalSandbox(t, "list", list[0], &want)

	// A time in another zone comes back as the same instant in UTC.
	sb2, in2, evs2 := newSandbox(t, "req-2", "alpine:3")
	zone := time.FixedZone("X", 5*3600+1800)
	sb2.CreatedAt = base.In(zone)
	sb2.UpdatedAt = base.Add(time.Nanosecond).In(zone)
	if _, _, err := s.Create(ctx, sb2, in2, evs2); err != nil {
		t.Fatalf("create: %v", err)
	}
	got2 := mustGet(t, s, sb2.ID)
	if got2.CreatedAt != base || got2.UpdatedAt != base.Add(time.Nanosecond) {
		t.Fatalf("times: got %v, %v; want %v, %v in UTC", got2.CreatedAt, got2.UpdatedAt, base, base.Add(time.Nanosecond))
	}

	// The create events are in the log.
	all := mustEvents(t, s, sandbox.EventQuery{})
	if len(all) != 2 || all[0].SandboxID != sb.ID || all[1].SandboxID != sb2.ID || all[0].Type != sandbox.EventCreated {
		t.Fatalf("create events: %+v", all)
	}
}

func testListOldestFirst(t *testing.T, s sandbox.Store) {
	var want []sandbox.ID
	for i := range 20 {
		want = append(want, mustCreate(t, s, fmt.Sprintf("req-%d", i)).ID)
	}
	// Updating an older sandbox does not move it.
	if _, _, err := s.Update(context.Background(), want[3], func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		sb.State = sandbox.StateStarting
		return sandbox.Change{}, nil
	}); err != nil {
		t.Fatalf("update: %v", err)
	}
	list, err := s.List(context.Background())
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	var got []sandbox.ID
	for _, sb := range list {
		got = append(got, sb.ID)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("list order:\n got %v\nwant %v", got, want)
	}
	if list[3].State != sandbox.StateStarting {
		t.Fatalf("list[3] state %s, want starting", list[3].State)
	}
}

func testCreateIdempotent(t *testing.T, s sandbox.Store) {
	ctx := context.Background()
	first := mustCreate(t, s, "req-1")
	// The sandbox moves on; a retried create answers with it as it is now.
	now, _, err := s.Update(ctx, first.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		sb.State = sandbox.StateReady
		sb.UpdatedAt = base.Add(time.Second)
		return sandbox.Change{}, nil
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	last := mustLast(t, s)

	retry, in, evs := newSandbox(t, "req-1", "alpine:3") // a new id, as a retried request would get
	got, created, err := s.Create(ctx, retry, in, evs)
	if err != nil {
		t.Fatalf("retried create: %v", err)
	}
	if created {
		t.Fatal("retried create: created=true")
	}
	equalSandbox(t, "retried create", got, now)
	if _, err := s.Get(ctx, retry.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("get of the retry's id: %v, want ErrNotFound", err)
	}
	if l := mustLast(t, s); l != last {
		t.Fatalf("retried create appended events: last cursor %d, was %d", l, last)
	}
	if list, _ := s.List(ctx); len(list) != 1 {
		t.Fatalf("list after retried create: %d sandboxes", len(list))
	}
}

func testCreateConflictOtherSpec(t *testing.T, s sandbox.Store) {
	ctx := context.Background()
	first := mustCreate(t, s, "req-1")
	last := mustLast(t, s)
	other, in, evs := newSandbox(t, "req-1", "debian:12")
	_, _, err := s.Create(ctx, other, in, evs)
	if !errors.Is(err, sandbox.ErrIdempotencyConflict) {
		t.Fatalf("create with another spec: %v, want ErrIdempotencyConflict", err)
	}
	if _, err := s.Get(ctx, other.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("conflicting create wrote a sandbox: %v", err)
	}
	equalSandbox(t, "first after conflict", mustGet(t, s, first.ID), first)
	if l := mustLast(t, s); l != last {
		t.Fatalf("conflicting create appended events: last cursor %d, was %d", l, last)
	}
}

// recreate bumps sb to the next generation with a new intent under key, as the core does.
func recreate(t *testing.T, s sandbox.Store, id sandbox.ID, key string) (*sandbox.Sandbox, []byte) {
	t.Helper()
	spec := sandbox.Spec{ClientRequestID: key, Image: "alpine:3"}
	canon, err := spec.CanonicalJSON()
	if err != nil {
		t.Fatal(err)
	}
	sb, evs, err := s.Update(context.Background(), id, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		sb.Generation++
		sb.State = sandbox.StateRequested
		sb.Spec = spec
		ev := sandbox.NewEvent(sandbox.EventCreated, sb.Ref(), base, sandbox.CreatedData{ClientRequestID: key, Spec: spec})
		return sandbox.Change{
			Events: []sandbox.Event{ev},
			Intent: &sandbox.Intent{Key: key, SandboxID: sb.ID, Generation: sb.Generation, Spec: canon},
		}, nil
	})
	if err != nil {
		t.Fatalf("recreate: %v", err)
	}
	if len(evs) != 1 || evs[0].Generation != sb.Generation {
		t.Fatalf("recreate events: %+v", evs)
	}
	return sb, canon
}

func testCreateConflictOldGeneration(t *testing.T, s sandbox.Store) {
	ctx := context.Background()
	first := mustCreate(t, s, "req-1")
	second, canon := recreate(t, s, first.ID, "req-2")
	if second.Generation != 2 {
		t.Fatalf("recreated generation %d, want 2", second.Generation)
	}
	// The first key made generation 1, which is gone: the same spec is no longer the same intent.
	retry, in, evs := newSandbox(t, "req-1", "alpine:3")
	if _, _, err := s.Create(ctx, retry, in, evs); !errors.Is(err, sandbox.ErrIdempotencyConflict) {
		t.Fatalf("create with the old generation's key: %v, want ErrIdempotencyConflict", err)
	}
	// The new key is the current generation's: a create with it and its spec is idempotent.
	sb := &sandbox.Sandbox{ID: sandbox.NewID(), Generation: 1, State: sandbox.StateRequested, Spec: second.Spec}
	got, created, err := s.Create(ctx, sb, sandbox.Intent{Key: "req-2", SandboxID: sb.ID, Generation: 1, Spec: canon}, nil)
	if err != nil || created {
		t.Fatalf("create with the current key: created=%v, %v", created, err)
	}
	equalSandbox(t, "create with the current key", got, second)
}

func testCreateConcurrent(t *testing.T, s sandbox.Store) {
	ctx := context.Background()
	const n = 50
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
		ids     = map[sandbox.ID]bool{}
		errs    []error
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, in, evs := newSandbox(t, "same-key", "alpine:3")
			got, c, err := s.Create(ctx, sb, in, evs)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			if c {
				created++
			}
			ids[got.ID] = true
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d concurrent creates failed, first: %v", len(errs), errs[0])
	}
	if created != 1 || len(ids) != 1 {
		t.Fatalf("%d concurrent identical creates: %d created, %d distinct sandboxes; want 1 and 1", n, created, len(ids))
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %d sandboxes, %v; want 1", len(list), err)
	}
	if evs := mustEvents(t, s, sandbox.EventQuery{}); len(evs) != 1 {
		t.Fatalf("%d events after concurrent creates, want 1", len(evs))
	}
}

func stateEvent(sb *sandbox.Sandbox, from, to sandbox.State) sandbox.Event {
	return sandbox.NewEvent(sandbox.EventStateChanged, sb.Ref(), base, sandbox.StateChangedData{From: from, To: to})
}

func testUpdateWritesEvents(t *testing.T, s sandbox.Store) {
	ctx := context.Background()
	first := mustCreate(t, s, "req-1")
	before := mustLast(t, s)
	got, evs, err := s.Update(ctx, first.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		if sb.State != sandbox.StateRequested {
			return sandbox.Change{}, fmt.Errorf("fn saw state %s", sb.State)
		}
		sb.State = sandbox.StateReady
		sb.Endpoint = &sandbox.Endpoint{BaseURL: "http://127.0.0.1:9"}
		return sandbox.Change{Events: []sandbox.Event{
			stateEvent(sb, sandbox.StateRequested, sandbox.StateStarting),
			stateEvent(sb, sandbox.StateStarting, sandbox.StateReady),
		}}, nil
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if got.State != sandbox.StateReady || got.Endpoint == nil {
		t.Fatalf("update result: %+v", got)
	}
	equalSandbox(t, "get after update", mustGet(t, s, first.ID), got)
	if len(evs) != 2 || evs[0].Cursor <= before || evs[1].Cursor <= evs[0].Cursor {
		t.Fatalf("update events: %+v (last cursor before %d)", evs, before)
	}
	logged := mustEvents(t, s, sandbox.EventQuery{After: before})
	if !reflect.DeepEqual(logged, evs) {
		t.Fatalf("logged events differ from returned:\n got %+v\nwant %+v", logged, evs)
	}
	if l := mustLast(t, s); l != evs[1].Cursor {
		t.Fatalf("last cursor %d, want %d", l, evs[1].Cursor)
	}
	// An update with no change to write appends nothing.
	_, none, err := s.Update(ctx, first.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) { return sandbox.Change{}, nil })
	if err != nil || len(none) != 0 {
		t.Fatalf("empty update: %d events, %v", len(none), err)
	}
}

var errFn = errors.New("fn refuses")

func testUpdateFuncError(t *testing.T, s sandbox.Store) {
	ctx := context.Background()
	first := mustCreate(t, s, "req-1")
	before := mustLast(t, s)
	_, _, err := s.Update(ctx, first.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		sb.State = sandbox.StateFailed
		sb.Generation = 7
		return sandbox.Change{
			Events: []sandbox.Event{stateEvent(sb, sandbox.StateRequested, sandbox.StateFailed)},
			Intent: &sandbox.Intent{Key: "req-new", SandboxID: sb.ID, Generation: 7, Spec: []byte(`{}`)},
		}, fmt.Errorf("wrapped: %w", errFn)
	})
	if !errors.Is(err, errFn) {
		t.Fatalf("update: %v, want fn's error", err)
	}
	equalSandbox(t, "sandbox after a failed update", mustGet(t, s, first.ID), first)
	if l := mustLast(t, s); l != before {
		t.Fatalf("failed update appended events: last cursor %d, was %d", l, before)
	}
	// Nor was the intent recorded: the key is still free.
	sb, in, evs := newSandbox(t, "req-new", "alpine:3")
	if _, created, err := s.Create(ctx, sb, in, evs); err != nil || !created {
		t.Fatalf("create with the failed update's key: created=%v, %v", created, err)
	}
	// A domain error class comes through as well.
	_, _, err = s.Update(ctx, first.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		return sandbox.Change{}, fmt.Errorf("pause: %w", sandbox.ErrInvalidState)
	})
	if !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("update: %v, want ErrInvalidState", err)
	}
}

func testUpdateIntentTaken(t *testing.T, s sandbox.Store) {
	ctx := context.Background()
	a := mustCreate(t, s, "req-a")
	b := mustCreate(t, s, "req-b")
	// b's old generation terminates, then a recreate asks for a's key.
	before := mustLast(t, s)
	_, _, err := s.Update(ctx, b.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		sb.Generation++
		sb.State = sandbox.StateRequested
		return sandbox.Change{
			Events: []sandbox.Event{stateEvent(sb, sandbox.StateTerminated, sandbox.StateRequested)},
			Intent: &sandbox.Intent{Key: "req-a", SandboxID: sb.ID, Generation: sb.Generation, Spec: []byte(`{}`)},
		}, nil
	})
	if !errors.Is(err, sandbox.ErrIdempotencyConflict) {
		t.Fatalf("update with a taken key: %v, want ErrIdempotencyConflict", err)
	}
	equalSandbox(t, "sandbox after a refused recreate", mustGet(t, s, b.ID), b)
	equalSandbox(t, "owner of the key", mustGet(t, s, a.ID), a)
	if l := mustLast(t, s); l != before {
		t.Fatalf("refused update appended events: last cursor %d, was %d", l, before)
	}
	// The key still names a's create.
	retry, in, evs := newSandbox(t, "req-a", "alpine:3")
	got, created, err := s.Create(ctx, retry, in, evs)
	if err != nil || created || got.ID != a.ID {
		t.Fatalf("retry of a's create: %v, created=%v, %v", got, created, err)
	}
}

// counter reads and writes a number kept in the sandbox's provider extensions.
func counter(sb *sandbox.Sandbox) int {
	var n int
	if raw, ok := sb.ProviderExtensions["n"]; ok {
		_ = json.Unmarshal(raw, &n)
	}
	return n
}

func setCounter(sb *sandbox.Sandbox, n int) {
	if sb.ProviderExtensions == nil {
		sb.ProviderExtensions = map[string]json.RawMessage{}
	}
	sb.ProviderExtensions["n"] = json.RawMessage(fmt.Sprint(n))
}

func testUpdateConcurrentCounter(t *testing.T, s sandbox.Store) {
	ctx := context.Background()
	first := mustCreate(t, s, "req-1")
	before := mustLast(t, s)
	const workers, each = 50, 4
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				_, _, err := s.Update(ctx, first.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
					n := counter(sb)
					setCounter(sb, n+1)
					return sandbox.Change{Events: []sandbox.Event{stateEvent(sb, sb.State, sb.State)}}, nil
				})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent update: %v", err)
	}
	if n := counter(mustGet(t, s, first.ID)); n != workers*each {
		t.Fatalf("counter %d after %d increments: updates were lost", n, workers*each)
	}
	evs := mustEvents(t, s, sandbox.EventQuery{After: before})
	if len(evs) != workers*each {
		t.Fatalf("%d events, want %d", len(evs), workers*each)
	}
}

func testUpdateConcurrentFenced(t *testing.T, s sandbox.Store) {
	ctx := context.Background()
	first := mustCreate(t, s, "req-1")
	const n = 50
	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		won, conflicted int
		other           []error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Every worker read generation 1 and compares it with the stored one before bumping it.
			want := first.Generation
			_, _, err := s.Update(ctx, first.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
				if sb.Generation != want {
					return sandbox.Change{}, fmt.Errorf("generation %d, current %d: %w", want, sb.Generation, sandbox.ErrGenerationConflict)
				}
				sb.Generation++
				setCounter(sb, i)
				return sandbox.Change{}, nil
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, sandbox.ErrGenerationConflict):
				conflicted++
			default:
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("fenced update: %v", other[0])
	}
	if won != 1 || conflicted != n-1 {
		t.Fatalf("%d fenced updates from one generation: %d won, %d conflicted; want 1 and %d", n, won, conflicted, n-1)
	}
	if g := mustGet(t, s, first.ID).Generation; g != first.Generation+1 {
		t.Fatalf("generation %d, want %d", g, first.Generation+1)
	}
}
