package httpapi

import (
	"context"
	"encoding/json"
	"time"

	"github.com/sandboxd/sandbox"
)

// A pause does not end a stream (an output stream, a watch, a terminal attach): the stream waits it
// out, saying so in its heartbeats, and goes on where it was after the resume. Only the sandbox's
// state is read while it waits, never its output or its files, so that a sandbox that resumes on calls
// is not resumed by a stream.

// The states a heartbeat says (StreamHeartbeatEvent.state, TerminalServerFrame.state).
const (
	stateRunning = "running"
	statePaused  = "paused"
)

// heartbeatEvent is the SSE message of a heartbeat event, which a stream sends while its sandbox is
// paused and once when it runs again; running streams send `: heartbeat` comments. offset is where an
// output stream stands (-1: a watch, which has none).
func heartbeatEvent(state string, offset int64) []byte {
	v := struct {
		State  string `json:"state"`
		Offset *int64 `json:"offset,omitempty"`
	}{State: state}
	if offset >= 0 {
		v.Offset = &offset
	}
	data, _ := json.Marshal(v)
	return append(append([]byte("event: heartbeat\ndata: "), data...), "\n\n"...)
}

// waitPaused waits while generation gen of sandbox id is pausing, paused or resuming, calling beat at
// once and every interval after. It returns an empty event once the sandbox is ready again, the end
// event of the stream when the sandbox went another way (terminated, recreated, failed) or the server
// stops, and ok false when the client went away (ctx ended, or beat failed).
func (s *Server) waitPaused(ctx context.Context, wake <-chan struct{}, id sandbox.ID, gen sandbox.Generation, every time.Duration, beat func() bool) (e processEndEvent, ok bool) {
	if !beat() {
		return processEndEvent{}, false
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return processEndEvent{}, false
		case <-s.done:
			return processEndEvent{Reason: endDaemonStopping}, true
		case <-wake:
		case <-ticker.C:
			if !beat() {
				return processEndEvent{}, false
			}
		}
		sb, err := s.rt.Get(ctx, id)
		switch {
		case ctx.Err() != nil:
			return processEndEvent{}, false
		case err == nil && sb.Generation == gen && sb.State == sandbox.StateReady:
			return processEndEvent{}, true
		case err == nil && sb.Generation == gen && pausedState(sb.State):
		default:
			e := s.endOf(ctx, id, gen, sandbox.ErrInvalidState)
			if e.Reason == "" || e.Reason == endPaused {
				e = processEndEvent{Reason: endError, Message: "the sandbox is neither paused nor ready"}
			}
			return e, true
		}
	}
}

// pausedState reports whether a sandbox in state st is on its way into, in, or out of a pause: a
// stream waits it out.
func pausedState(st sandbox.State) bool {
	return st == sandbox.StatePausing || st == sandbox.StatePaused || st == sandbox.StateResuming
}
