package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// streamPage is how many events a stream reads from the log at a time.
const streamPage = 64

// eventQuery reads the cursor and filter of an events request. For the stream, a Last-Event-ID header
// resumes like after and wins when both are sent, as a reconnecting EventSource sends both.
func eventQuery(r *http.Request, stream bool) (sandbox.EventQuery, error) {
	after, err := queryInt(r, "after", 0)
	if err != nil {
		return sandbox.EventQuery{}, err
	}
	if stream {
		if vs, ok := r.Header["Last-Event-Id"]; ok && len(vs) > 0 {
			v := strings.TrimSpace(vs[0])
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return sandbox.EventQuery{}, fmt.Errorf("Last-Event-ID %q is not a cursor (an integer >= 0): %w", v, sandbox.ErrInvalidRequest)
			}
			after = n
		}
	}
	if after < 0 {
		return sandbox.EventQuery{}, fmt.Errorf("after %d: a cursor is an integer >= 0: %w", after, sandbox.ErrInvalidRequest)
	}
	return sandbox.EventQuery{After: after, SandboxID: sandbox.ID(r.URL.Query().Get("sandboxId")), Limit: sandbox.MaxEventPage}, nil
}

// listEvents: GET /v1/events?after=N&sandboxId=X. One page, oldest first; a client pages by passing the
// last cursor it got. 410 when after is older than the retained history.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request, _ []byte) error {
	q, err := eventQuery(r, false)
	if err != nil {
		return err
	}
	events, err := s.rt.Events(r.Context(), q)
	if err != nil {
		return err
	}
	if events == nil {
		events = []sandbox.Event{}
	}
	writeJSON(w, http.StatusOK, api.EventList{Events: events})
	return nil
}

// streamEvents: GET /v1/events/stream, Server-Sent Events. First the backlog after the cursor, then live
// events, each as "id: <cursor>", "event: <type>", "data: <SandboxEvent JSON>"; a ": heartbeat" comment
// when idle. Errors before the first byte (400, 410) are ErrorResponses; after it, the stream just ends:
// when the client does not read within the write timeout, when it falls behind the retained history, when
// the runtime fails, or when the server is closed. The client resumes with Last-Event-ID.
//
// A stream filtered by sandboxId also moves its cursor past other sandboxes' events (up to the newest
// cursor read before each page), so it never falls behind the retained history while its sandbox is idle.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, _ []byte) error {
	q, err := eventQuery(r, true)
	if err != nil {
		return err
	}
	// A stream reads the log in small pages, so that thousands of streams whose clients lag hold little
	// memory between them: each holds at most one page while its write waits.
	q.Limit = streamPage
	ctx := r.Context()
	// Watch before the first read, so an append between the read and the wait is not missed.
	wake, stop := s.rt.Watch()
	defer stop()
	// mark is the newest cursor before a page was read: a filtered page that is not full holds every
	// matching event up to it.
	mark, err := s.rt.LastCursor(ctx)
	if err != nil {
		return err
	}
	page, err := s.rt.Events(ctx, q)
	if err != nil {
		return err
	}

	// send writes what write writes and flushes it, all within one write timeout. Events are encoded
	// and written one at a time, through the response's own small buffer, so that a stream whose write
	// waits holds its page of events and little more.
	send := s.startSSE(w)
	var buf bytes.Buffer
	sendBytes := func(b []byte) bool {
		return send(func() bool {
			_, err := w.Write(b)
			return err == nil
		})
	}
	sendPage := func(page []sandbox.Event) bool {
		return send(func() bool {
			for _, ev := range page {
				buf.Reset()
				if err := writeEvent(&buf, ev); err != nil {
					s.log.Error("event stream: encoding an event", "cursor", ev.Cursor, "err", err)
					return false
				}
				if _, err := w.Write(buf.Bytes()); err != nil {
					return false
				}
			}
			return true
		})
	}
	if !sendBytes([]byte(": stream\n\n")) {
		return nil
	}

	ticker := time.NewTicker(s.heartbeat)
	defer ticker.Stop()
	for {
		if len(page) > 0 {
			if !sendPage(page) {
				return nil
			}
			q.After = page[len(page)-1].Cursor
		}
		if len(page) < q.Limit {
			q.After = max(q.After, mark)
			if !s.waitEvents(w, r, wake, ticker.C, sendBytes) {
				return nil
			}
		}
		if mark, err = s.rt.LastCursor(ctx); err == nil {
			page, err = s.nextPage(ctx, q)
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Info("event stream ended", "after", q.After, "err", err)
			}
			return nil
		}
	}
}

// startSSE writes the head of a Server-Sent Events answer and returns its send: it writes what write
// writes and flushes it, all within one write timeout, and reports false when the stream must end (the
// client does not read, or is gone).
func (s *Server) startSSE(w http.ResponseWriter) func(write func() bool) bool {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	return func(write func() bool) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(s.writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		return write() && rc.Flush() == nil
	}
}

// nextPage reads the page after q.After. A stream filtered to one sandbox that has seen that sandbox's
// newest event skips the read and gets an empty page (the loop then moves q.After on to the mark it
// read before): it has nothing to read, and the history behind it may be pruned by then without its
// missing anything.
func (s *Server) nextPage(ctx context.Context, q sandbox.EventQuery) ([]sandbox.Event, error) {
	if q.SandboxID != "" {
		last, err := s.rt.LastEventOf(ctx, q.SandboxID)
		if err != nil {
			return nil, err
		}
		if last <= q.After {
			return nil, nil
		}
	}
	return s.rt.Events(ctx, q)
}

// waitEvents waits until events may have been appended, sending heartbeats meanwhile. It reports false
// when the stream must end.
func (s *Server) waitEvents(w http.ResponseWriter, r *http.Request, wake <-chan struct{}, tick <-chan time.Time, send func([]byte) bool) bool {
	for {
		select {
		case <-wake:
			return true
		case <-tick:
			if !send([]byte(": heartbeat\n\n")) {
				return false
			}
		case <-r.Context().Done():
			return false
		case <-s.done:
			return false
		}
	}
}

// writeEvent writes one SSE message. The JSON of an event holds no newline, so one data line carries it.
func writeEvent(buf *bytes.Buffer, ev sandbox.Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	fmt.Fprintf(buf, "id: %d\nevent: %s\ndata: %s\n\n", ev.Cursor, ev.Type, data)
	return nil
}
