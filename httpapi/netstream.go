package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sandboxd/sandbox"
)

// denialPoll is how often a stream of denials reads the sandbox's network.
const denialPoll = 500 * time.Millisecond

// streamDenials: GET /v1/sandboxes/{sandboxId}/network/denials. An SSE stream: first the recent
// denials, oldest first, then each new one as it is seen ("denial" events, NetworkDenial), heartbeats
// between them, and an "end" event (NetworkDenialsEnd) once the generation it began on is no longer
// ready or paused (terminated, recreated, failed, gone), after which the stream closes.
func (s *Server) streamDenials(w http.ResponseWriter, r *http.Request, _ []byte) error {
	ctx := r.Context()
	id := sandboxID(r)
	st, gen, err := s.rt.Network(ctx, id)
	if err != nil {
		return err // before the stream: an error answer
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(b []byte) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(s.writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		_, err := w.Write(b)
		return err == nil && rc.Flush() == nil
	}
	event := func(name string, v any) bool {
		data, err := json.Marshal(v)
		return err == nil && send(fmt.Appendf(nil, "event: %s\ndata: %s\n\n", name, data))
	}
	if !send([]byte(": stream\n\n")) {
		return nil
	}
	seen := map[sandbox.NetworkDenial]bool{}
	emit := func(ds []sandbox.NetworkDenial) bool {
		next := make(map[sandbox.NetworkDenial]bool, len(ds))
		for i := len(ds) - 1; i >= 0; i-- { // oldest first
			d := ds[i]
			next[d] = true
			if !seen[d] && !event("denial", d) {
				return false
			}
		}
		seen = next
		return true
	}
	if !emit(st.Denials) {
		return nil
	}
	poll := time.NewTicker(denialPoll)
	defer poll.Stop()
	beat := time.NewTicker(s.heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.done:
			return nil
		case <-beat.C:
			if !send([]byte(": heartbeat\n\n")) {
				return nil
			}
		case <-poll.C:
			st, now, err := s.rt.Network(ctx, id)
			if err == nil && now != gen {
				err = fmt.Errorf("generation %d replaced by %d: %w", gen, now, sandbox.ErrGenerationConflict)
			}
			if err != nil {
				if ctx.Err() == nil {
					event("end", map[string]string{"reason": string(sandbox.ClassOf(err).Code), "message": err.Error()})
				}
				return nil
			}
			if !emit(st.Denials) {
				return nil
			}
		}
	}
}
