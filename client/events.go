package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

func eventValues(q sandbox.EventQuery) url.Values {
	v := url.Values{"after": {strconv.FormatInt(q.After, 10)}}
	if q.SandboxID != "" {
		v.Set("sandboxId", string(q.SandboxID))
	}
	return v
}

// Events returns one page (at most sandbox.MaxEventPage) of the events after q.After, oldest first,
// only of q.SandboxID when it is set; q.Limit is not sent. A caller pages by passing the last cursor it
// got. Errors: ErrInvalidRequest, ErrEventHistoryUnavailable when q.After is older than the history kept.
func (c *Client) Events(ctx context.Context, q sandbox.EventQuery) ([]sandbox.Event, error) {
	var out api.EventList
	if err := c.do(ctx, call{method: "GET", path: "/v1/events", query: eventValues(q), safe: true}, &out); err != nil {
		return nil, err
	}
	return out.Events, nil
}

// Stream follows the event log after q.After (only q.SandboxID's events when it is set): first the
// backlog, then live events, until ctx is done or the loop stops. When the connection drops or the server
// ends it, Stream reconnects with Last-Event-ID set to the last cursor it yielded, so no event is lost or
// repeated. It yields an error and stops when the server refuses the stream (an *Error: 410
// ErrEventHistoryUnavailable when the client fell behind the history kept, 400, 401), or when it cannot
// reconnect after the client's retry attempts. It ends without an error when ctx is done.
func (c *Client) Stream(ctx context.Context, q sandbox.EventQuery) iter.Seq2[sandbox.Event, error] {
	return func(yield func(sandbox.Event, error) bool) {
		after, resumed, failures := q.After, false, 0
		for {
			resp, err := c.openStream(ctx, q.SandboxID, after, resumed)
			if err == nil {
				got, stopped, rerr := readEvents(resp.Body, func(ev sandbox.Event) bool {
					after = ev.Cursor
					return yield(ev, nil)
				})
				resp.Body.Close()
				if stopped || ctx.Err() != nil {
					return
				}
				var perr *protocolError
				if errors.As(rerr, &perr) {
					yield(sandbox.Event{}, rerr)
					return
				}
				if got > 0 {
					failures = 0
				}
				err = rerr
				if err == nil {
					err = io.ErrUnexpectedEOF // the server ended the stream
				}
			}
			if ctx.Err() != nil {
				return
			}
			var apiErr *Error
			if errors.As(err, &apiErr) && apiErr.Status < 500 {
				yield(sandbox.Event{}, err)
				return
			}
			failures++
			if failures >= c.attempts {
				yield(sandbox.Event{}, fmt.Errorf("event stream: %d reconnects failed: %w", failures, err))
				return
			}
			resumed = true
			if sleep(ctx, c.backoff(failures)) != nil {
				return
			}
		}
	}
}

// openStream connects to the stream after the cursor; a resumed connection also sends Last-Event-ID, as
// an EventSource does.
func (c *Client) openStream(ctx context.Context, id sandbox.ID, after int64, resumed bool) (*http.Response, error) {
	h := http.Header{"Accept": {"text/event-stream"}}
	if resumed {
		h.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	k := call{method: "GET", path: "/v1/events/stream", query: eventValues(sandbox.EventQuery{After: after, SandboxID: id}), header: h}
	resp, err := c.send(ctx, k)
	if err != nil {
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, &protocolError{fmt.Sprintf("event stream has content type %q", ct)}
	}
	return resp, nil
}

// protocolError is a stream the server garbled; reconnecting would not help.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return "event stream: " + e.msg }
func (e *protocolError) Unwrap() error { return sandbox.ErrProviderProtocol }

// readEvents reads Server-Sent Events from r and hands each event to fn until r ends or fn returns false.
// It returns how many events it handed over, whether fn stopped, and the read error (nil at a clean end).
func readEvents(r io.Reader, fn func(sandbox.Event) bool) (int, bool, error) {
	var perr error
	n, stopped, err := readSSE(bufio.NewReader(r), func(_, data string) bool {
		var ev sandbox.Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			perr = &protocolError{fmt.Sprintf("event data is not an event: %v", err)}
			return false
		}
		return fn(ev)
	})
	if perr != nil {
		return n - 1, false, perr
	}
	return n, stopped, err
}

// readSSE reads Server-Sent Events from br and hands each event's name and data to fn until br ends
// or fn returns false. It returns how many events it handed over, whether fn stopped, and the read
// error (nil at a clean end). Comments (a greeting, heartbeats) and id: lines are skipped: the data
// of both streams holds what their ids say.
func readSSE(br *bufio.Reader, fn func(name, data string) bool) (int, bool, error) {
	var data strings.Builder
	name := ""
	n := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return n, false, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data.Len() == 0 {
				continue
			}
			n++
			if !fn(name, data.String()) {
				return n, true, nil
			}
			data.Reset()
			name = ""
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event:"):
			name = strings.TrimPrefix(strings.TrimPrefix(line, "event:"), " ")
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}

// StateError says a sandbox settled in a state other than the one waited for, and will not leave it by
// itself. Sandbox is the sandbox as last seen; its Failure says why when it failed.
type StateError struct {
	Sandbox *sandbox.Sandbox
	Want    sandbox.State
}

func (e *StateError) Error() string {
	msg := fmt.Sprintf("sandbox %s is %s, not %s", e.Sandbox.ID, e.Sandbox.State, e.Want)
	if f := e.Sandbox.Failure; f != nil {
		msg += fmt.Sprintf(": %s: %s", f.Code, f.Message)
	}
	return msg
}

// Unwrap classes a StateError as sandbox.ErrInvalidState.
func (e *StateError) Unwrap() error { return sandbox.ErrInvalidState }

// WaitState polls the sandbox until it is in state want and returns it. While the sandbox is in a
// transitional state (requested, starting, pausing, resuming, terminating) it keeps waiting; once it
// settles in another state it returns a *StateError. Errors: ErrNotFound, ctx's error, and *StateError.
func (c *Client) WaitState(ctx context.Context, id sandbox.ID, want sandbox.State) (*sandbox.Sandbox, error) {
	delay := 20 * time.Millisecond
	for {
		sb, err := c.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if sb.State == want {
			return sb, nil
		}
		if !sb.State.Transitional() {
			return sb, &StateError{Sandbox: sb, Want: want}
		}
		if err := sleep(ctx, delay); err != nil {
			return sb, err
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

// WaitReady is WaitState(ctx, id, sandbox.StateReady): a sandbox that fails while starting is a
// *StateError carrying the failure.
func (c *Client) WaitReady(ctx context.Context, id sandbox.ID) (*sandbox.Sandbox, error) {
	return c.WaitState(ctx, id, sandbox.StateReady)
}
