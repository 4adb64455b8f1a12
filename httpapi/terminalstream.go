package httpapi

import (
	"context"
	"errors"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandbox"
)

// An attach over the provider's terminal stream (sandbox.TerminalStreamer): the keys, resizes and
// signals go into the stream (the read loop), the output comes out of it (streamLoop), so that a
// keystroke's echo is one trip to the sandbox and back instead of a call for the key and the answer
// to a waiting poll. The frames the client sees are the same as on the calls' path (outputLoop): a
// pause closes the stream and the attach waits it out, saying so in its heartbeats, then opens the
// stream again from where it stood.

// received is one thing a stream said, or its failure.
type received struct {
	ev  sandbox.TerminalEvent
	err error
}

// receive reads st in a goroutine of its own until its end or failure. stop closes st and waits for
// the goroutine.
func receive(st sandbox.TerminalStream) (events <-chan received, stop func()) {
	out := make(chan received)
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := st.Recv()
			select {
			case out <- received{ev, err}:
			case <-quit:
				return
			}
			if err != nil || ev.End != nil {
				return
			}
		}
	}()
	return out, func() {
		st.Close()
		close(quit)
		<-done
	}
}

// streamLoop sends the output of st, and of the streams opened after it, until the process exits or
// the attach must end: it returns the last frame to send, or false when the client went away.
func (t *terminal) streamLoop(ctx context.Context, wake <-chan struct{}, st sandbox.TerminalStream) (terminalFrameOut, bool) {
	s := t.s
	if !t.send(ctx, terminalFrameOut{Type: "offset", Offset: t.after}) {
		return terminalFrameOut{}, false
	}
	beat := time.NewTicker(t.beat())
	defer beat.Stop()
	demoted := t.me.demoted
	if !t.me.controls() {
		demoted = nil // a watcher from the start is told nothing
	}
	var events <-chan received
	stop := func() {}
	defer func() { stop() }()
	// drop closes the stream, so that the read loop's writes go by calls until the next is open.
	drop := func() {
		t.setStream(nil)
		stop()
		stop, events, st = func() {}, nil, nil
	}
	// interrupted is what to do when the stream failed with err, or an event may have changed the
	// sandbox (err nil): wait out a pause and go on (cont), or end with e.
	interrupted := func(err error) (e terminalFrameOut, ok, cont bool) {
		end := s.endOf(ctx, t.id, t.gen, err)
		switch {
		case ctx.Err() != nil:
			return terminalFrameOut{}, false, false
		case end.Reason == endPaused:
			drop()
			if e, ok := t.paused(ctx, wake); !ok || e.Type != "" {
				return e, ok, false
			}
			return terminalFrameOut{}, true, true
		case end.Reason != "":
			return terminalFrameOut{Type: "end", Offset: t.after, Reason: end.Reason, Message: end.Message}, true, false
		case err == nil:
			return terminalFrameOut{}, true, true
		}
		return terminalFrameOut{Type: "end", Offset: t.after, Reason: endAgent, Message: err.Error()}, true, false
	}
	for {
		if st == nil {
			var err error
			st, err = s.rt.AttachTerminal(ctx, t.id, t.gen, t.pid, t.after, t.beat())
			switch {
			case ctx.Err() != nil:
				return terminalFrameOut{}, false
			case errors.Is(err, sandbox.ErrUnsupportedCapability):
				return t.outputLoop(ctx, wake, sandbox.OutputChunk{Start: t.after})
			case err != nil:
				if e, ok, cont := interrupted(err); !cont {
					return e, ok
				}
				continue
			}
		}
		if events == nil {
			t.setStream(st)
			events, stop = receive(st)
		}
		select {
		case r := <-events:
			if r.err != nil {
				if ctx.Err() == nil {
					s.rt.StreamFailed(t.id, t.gen, r.err)
				}
				drop()
				if e, ok, cont := interrupted(r.err); !cont {
					return e, ok
				}
				continue
			}
			ev := r.ev
			switch {
			case ev.End != nil && ev.End.Reason == "exited":
				return terminalFrameOut{Type: "exit", Offset: t.after, ExitCode: ev.End.ExitCode, Reason: endExited}, true
			case ev.End != nil:
				// The stream ended, not the process: the agent stops or suspends (a pause, or the
				// sandbox going away, which the sandbox's state says), or it could not go on.
				err := errors.New("the terminal stream ended: " + ev.End.Reason + ": " + ev.End.Message)
				drop()
				if e, ok, cont := interrupted(err); !cont {
					return e, ok
				}
			case ev.Refused != "":
				if !t.send(ctx, terminalError{Type: "error", Message: ev.Refused}) {
					return terminalFrameOut{}, false
				}
			default:
				chunk := ev.Output
				if chunk.Start > t.after { // older bytes were dropped meanwhile
					if !t.send(ctx, t.offsetFrame(chunk)) {
						return terminalFrameOut{}, false
					}
				}
				if !t.write(ctx, websocket.MessageBinary, chunk.Data) {
					return terminalFrameOut{}, false
				}
				t.after = chunk.Start + int64(len(chunk.Data))
			}
		case <-wake:
			if e, ok, cont := interrupted(nil); !cont {
				return e, ok
			}
		case <-demoted:
			demoted = nil
			if !t.sayDemoted(ctx) {
				return terminalFrameOut{}, false
			}
		case <-beat.C:
			if !t.sayRunning(ctx) {
				return terminalFrameOut{}, false
			}
		case <-s.done:
			return terminalFrameOut{Type: "end", Offset: t.after, Reason: endDaemonStopping}, true
		case <-ctx.Done():
			return terminalFrameOut{}, false
		}
	}
}
