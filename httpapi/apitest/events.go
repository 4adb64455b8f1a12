package apitest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

func (st *stack) events(query string) []sandbox.Event {
	st.t.Helper()
	var list api.EventList
	st.c.ok("GET", "/v1/events"+query, nil, 200, &list)
	if list.Events == nil {
		st.t.Fatalf("events%s: null list", query)
	}
	return list.Events
}

func (s *suite) testEvents(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{})
	if evs := st.events(""); len(evs) != 0 {
		t.Fatalf("fresh log has %d events", len(evs))
	}
	a := st.create(nil)
	b := st.create(nil)
	st.c.ok("PUT", sbPath(a.ID, "/files/content"), fileBody(1, "f", []byte("abc")), 200, nil)
	st.exec(a.ID, cmdBody(1, "true"))

	all := st.events("?after=0")
	for i, ev := range all {
		if i > 0 && ev.Cursor <= all[i-1].Cursor {
			t.Fatalf("cursors not increasing: %d then %d", all[i-1].Cursor, ev.Cursor)
		}
	}
	types := map[sandbox.ID][]sandbox.EventType{}
	for _, ev := range all {
		types[ev.SandboxID] = append(types[ev.SandboxID], ev.Type)
	}
	for _, want := range []sandbox.EventType{sandbox.EventCreated, sandbox.EventStateChanged, sandbox.EventFileWritten, sandbox.EventCommandCompleted} {
		if !containsType(types[a.ID], want) {
			t.Errorf("no %s event for %s in %v", want, a.ID, types[a.ID])
		}
	}
	if types[b.ID][0] != sandbox.EventCreated {
		t.Errorf("first event of %s is %s", b.ID, types[b.ID][0])
	}
	// Filter.
	onlyB := st.events("?sandboxId=" + string(b.ID))
	if len(onlyB) != len(types[b.ID]) {
		t.Fatalf("filter by %s gave %d events, want %d", b.ID, len(onlyB), len(types[b.ID]))
	}
	for _, ev := range onlyB {
		if ev.SandboxID != b.ID {
			t.Fatalf("filter by %s gave an event of %s", b.ID, ev.SandboxID)
		}
	}
	if evs := st.events("?sandboxId=sbx_nobody"); len(evs) != 0 {
		t.Fatalf("filter by an unknown sandbox gave %d events", len(evs))
	}
	// Paging: after a cursor, only later events; past the newest, an empty page.
	mid := all[len(all)/2].Cursor
	rest := st.events(fmt.Sprintf("?after=%d", mid))
	if len(rest) == 0 || rest[0].Cursor <= mid || rest[len(rest)-1].Cursor != all[len(all)-1].Cursor {
		t.Fatalf("after %d: %d events from %d", mid, len(rest), rest[0].Cursor)
	}
	last := all[len(all)-1].Cursor
	if evs := st.events(fmt.Sprintf("?after=%d", last)); len(evs) != 0 {
		t.Fatalf("after the newest cursor: %d events", len(evs))
	}
	if evs := st.events(fmt.Sprintf("?after=%d", last+1000)); len(evs) != 0 {
		t.Fatalf("after a future cursor: %d events", len(evs))
	}
	for _, q := range []string{"?after=-1", "?after=x", "?after=1.5", "?after=99999999999999999999"} {
		st.c.fails("GET", "/v1/events"+q, nil, 400, sandbox.CodeInvalidRequest)
	}
}

func containsType(list []sandbox.EventType, t sandbox.EventType) bool {
	for _, x := range list {
		if x == t {
			return true
		}
	}
	return false
}

func (s *suite) testEventHistory(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{retention: 1})
	st.create(nil)
	st.create(nil)
	st.c.fails("GET", "/v1/events?after=0", nil, 410, sandbox.CodeEventHistoryUnavailable)
	// A cursor at or past the retained history still pages.
	if evs := st.events("?after=1000000"); len(evs) != 0 {
		t.Fatalf("after a future cursor: %d events", len(evs))
	}
}

// sse is one Server-Sent Events message or comment.
type sse struct {
	id, event, data string
	comment         string
}

// stream opens the event stream; the returned function reads the next message.
func (st *stack) stream(ctx context.Context, query string, header http.Header) (func() sse, func()) {
	st.t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", st.base+"/v1/events/stream"+query, nil)
	if err != nil {
		st.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := st.c.hc.Do(req)
	if err != nil {
		st.t.Fatalf("stream: %v", err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		st.t.Fatalf("stream: status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	next := func() sse {
		st.t.Helper()
		var m sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if m != (sse{}) {
					return m
				}
			case strings.HasPrefix(line, ":"):
				return sse{comment: strings.TrimSpace(line[1:])}
			case strings.HasPrefix(line, "id: "):
				m.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				m.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				m.data = line[6:]
			default:
				st.t.Fatalf("stream: unexpected line %q", line)
			}
		}
		st.t.Fatalf("stream ended: %v", sc.Err())
		return m
	}
	return next, func() { resp.Body.Close() }
}

// nextEvent reads messages until an event, checks it against the contract and returns it.
func (st *stack) nextEvent(next func() sse) sandbox.Event {
	st.t.Helper()
	for {
		m := next()
		if m.comment != "" {
			continue
		}
		doc, err := contract()
		if err != nil {
			st.t.Fatal(err)
		}
		if err := validateSchema(doc, "SandboxEvent", []byte(m.data)); err != nil {
			st.t.Fatalf("stream event %s does not match SandboxEvent: %v", m.data, err)
		}
		var ev sandbox.Event
		if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
			st.t.Fatalf("stream event %q: %v", m.data, err)
		}
		if m.id != strconv.FormatInt(ev.Cursor, 10) || m.event != string(ev.Type) {
			st.t.Fatalf("stream message id %q event %q for event %d %s", m.id, m.event, ev.Cursor, ev.Type)
		}
		return ev
	}
}

func (s *suite) testStream(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{})
	a := st.create(nil)
	backlog := st.events("")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // liveness guard only
	defer cancel()

	// Backlog first, then live events.
	next, stop := st.stream(ctx, "?after=0", nil)
	defer stop()
	for _, want := range backlog {
		if got := st.nextEvent(next); got.Cursor != want.Cursor || got.Type != want.Type {
			t.Fatalf("backlog event %d %s, want %d %s", got.Cursor, got.Type, want.Cursor, want.Type)
		}
	}
	b := st.create(nil)
	live := st.nextEvent(next)
	if live.SandboxID != b.ID || live.Type != sandbox.EventCreated || live.Cursor <= backlog[len(backlog)-1].Cursor {
		t.Fatalf("first live event %+v, want %s created for %s", live, sandbox.EventCreated, b.ID)
	}

	// Last-Event-ID resumes and wins over after.
	mid := backlog[len(backlog)/2]
	next2, stop2 := st.stream(ctx, "?after=0", http.Header{"Last-Event-ID": {strconv.FormatInt(mid.Cursor, 10)}})
	defer stop2()
	if got := st.nextEvent(next2); got.Cursor <= mid.Cursor {
		t.Fatalf("resumed after %d but got %d", mid.Cursor, got.Cursor)
	}
	// Filtered by sandbox.
	next3, stop3 := st.stream(ctx, "?sandboxId="+string(a.ID), nil)
	defer stop3()
	if got := st.nextEvent(next3); got.SandboxID != a.ID || got.Type != sandbox.EventCreated {
		t.Fatalf("filtered stream began with %+v", got)
	}
	st.exec(a.ID, cmdBody(1, "true"))
	for {
		got := st.nextEvent(next3)
		if got.SandboxID != a.ID {
			t.Fatalf("filtered stream sent an event of %s", got.SandboxID)
		}
		if got.Type == sandbox.EventCommandCompleted {
			break
		}
	}
	// Invalid cursors, before any stream starts.
	for _, h := range []string{"x", "-1", "1.5", ""} {
		r := st.c.raw("GET", "/v1/events/stream", nil, http.Header{"Last-Event-ID": {h}})
		st.c.checkError("GET", "/v1/events/stream", r, 400, sandbox.CodeInvalidRequest)
	}
	st.c.fails("GET", "/v1/events/stream?after=-5", nil, 400, sandbox.CodeInvalidRequest)
}

func (s *suite) testStreamHeartbeat(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{heartbeat: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	next, stop := st.stream(ctx, "", nil)
	defer stop()
	for {
		if m := next(); m.comment == "heartbeat" {
			return
		} else if m.comment == "" {
			t.Fatalf("an empty log streamed %+v", m)
		}
	}
}

func (s *suite) testStreamHistory(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{retention: 1})
	st.create(nil)
	st.create(nil)
	st.c.fails("GET", "/v1/events/stream?after=0", nil, 410, sandbox.CodeEventHistoryUnavailable)
	// The header wins: a good after does not save a stale Last-Event-ID.
	r := st.c.raw("GET", "/v1/events/stream?after=1000000", nil, http.Header{"Last-Event-ID": {"0"}})
	st.c.checkError("GET", "/v1/events/stream", r, 410, sandbox.CodeEventHistoryUnavailable)
}
