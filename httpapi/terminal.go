package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandbox"
)

// The terminals group of api/extensions.yaml: a process started on a pseudo-terminal is resized, and
// attached to as a WebSocket: binary frames carry its output (from the journal, replay included) to
// the client and the client's keys to its stdin; small JSON text frames carry the rest.

// terminalRoutes are the group's operations.
func (s *Server) terminalRoutes() []route {
	const p = "/v1/sandboxes/{sandboxId}/processes/{pid}"
	return []route{
		{http.MethodPost, p + "/resize", s.resizeProcess},
		{http.MethodGet, p + "/terminal", s.attachTerminal},
	}
}

// resizeProcess: POST /v1/sandboxes/{sandboxId}/processes/{pid}/resize.
func (s *Server) resizeProcess(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req struct {
		ExpectedGeneration sandbox.Generation `json:"expectedGeneration"`
		Rows               int                `json:"rows"`
		Cols               int                `json:"cols"`
	}
	pid, err := processBody(r, body, &req)
	if err != nil {
		return err
	}
	size := sandbox.TerminalSize{Rows: req.Rows, Cols: req.Cols}
	if err := s.rt.ResizeProcess(r.Context(), sandboxID(r), req.ExpectedGeneration, pid, size); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, size)
	return nil
}

// Bounds of a terminal attach.
const (
	// terminalFrame bounds a frame the client sends; a larger one closes the attach (1009).
	terminalFrame = 64 << 10
	// terminalBeat bounds the heartbeat interval of an attach: a client hears from it this often.
	terminalBeat = 5 * time.Second
	// terminalErrors bounds the error frames an attach answers bad frames with before it closes.
	terminalErrors = 64
)

// The modes of an attach.
const (
	modeControl = "control" // reads the output, writes keys, resizes and signals
	modeWatch   = "watch"   // reads the output only
)

// terminalFrameOut is a text frame the daemon sends.
type terminalFrameOut struct {
	Type     string `json:"type"` // offset, heartbeat, mode, error, exit, end
	Offset   int64  `json:"offset"`
	State    string `json:"state,omitempty"`    // heartbeat: running, paused
	Mode     string `json:"mode,omitempty"`     // mode: what the attach is now
	Dropped  *int64 `json:"dropped,omitempty"`  // offset: the offset asked for, when older bytes were not kept
	ExitCode *int   `json:"exitCode,omitempty"` // exit
	Reason   string `json:"reason,omitempty"`   // exit, end, mode
	Message  string `json:"message,omitempty"`
}

// terminalError answers a frame the daemon refused; the attach goes on.
type terminalError struct {
	Type    string `json:"type"` // error
	Message string `json:"message"`
}

// terminalFrameIn is a text frame a client sends.
type terminalFrameIn struct {
	Type   string `json:"type"` // resize, signal
	Rows   int    `json:"rows"`
	Cols   int    `json:"cols"`
	Signal string `json:"signal"`
}

// terminals are the control attaches of every process: at most one each, the latest.
type terminals struct {
	mu      sync.Mutex
	control map[string]*attach
}

// attach is one WebSocket attached to a process.
type attach struct {
	demoted chan struct{} // closed when a later control attach took over
	once    sync.Once
}

func (a *attach) demote() { a.once.Do(func() { close(a.demoted) }) }

func (a *attach) controls() bool {
	select {
	case <-a.demoted:
		return false
	default:
		return true
	}
}

// take makes a the control attach of key, demoting the one before it.
func (t *terminals) take(key string, a *attach) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.control == nil {
		t.control = make(map[string]*attach)
	}
	if old := t.control[key]; old != nil {
		old.demote()
	}
	t.control[key] = a
}

// release forgets a as key's control attach, if it still is.
func (t *terminals) release(key string, a *attach) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.control[key] == a {
		delete(t.control, key)
	}
}

// attachTerminal: GET /v1/sandboxes/{sandboxId}/processes/{pid}/terminal, a WebSocket. Errors before
// the upgrade are ErrorResponses; after it the daemon always sends an exit or end frame before it
// closes, unless the client went away.
func (s *Server) attachTerminal(w http.ResponseWriter, r *http.Request, _ []byte) error {
	gen, err := expectedGeneration(r)
	if err != nil {
		return err
	}
	pid, err := pidParam(r)
	if err != nil {
		return err
	}
	after, err := queryInt(r, "after", 0)
	if err != nil {
		return err
	}
	if after < 0 {
		return fmt.Errorf("offset %d is negative: %w", after, sandbox.ErrInvalidRequest)
	}
	mode := r.URL.Query().Get("mode")
	switch mode {
	case "":
		mode = modeControl
	case modeControl, modeWatch:
	default:
		return fmt.Errorf("mode %.16q is neither control nor watch: %w", mode, sandbox.ErrInvalidRequest)
	}
	id := sandboxID(r)
	wake, stop := s.rt.Watch()
	defer stop()
	// The terminal's stream where the provider has one, else the first read of the output: either
	// answers what would fail the attach (no process, an offset past its end) as an ErrorResponse,
	// before the upgrade.
	var chunk sandbox.OutputChunk
	st, err := s.rt.AttachTerminal(r.Context(), id, gen, pid, after, min(s.heartbeat, terminalBeat))
	if errors.Is(err, sandbox.ErrUnsupportedCapability) {
		chunk, err = s.rt.ReadOutput(r.Context(), id, gen, pid, after, outputPiece, 0)
	}
	if err != nil {
		return err
	}
	if st != nil {
		defer func() { st.Close() }()
	}
	if !wantsWebSocket(r) {
		return fmt.Errorf("the terminal is a WebSocket: the request needs Connection: Upgrade and Upgrade: websocket: %w", sandbox.ErrInvalidRequest)
	}
	// The origin was checked before routing (originGuard), by the rules of every other route.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return nil // Accept answered the client
	}
	defer conn.CloseNow()
	conn.SetReadLimit(terminalFrame)

	t := &terminal{s: s, conn: conn, id: id, gen: gen, pid: pid, after: after, me: &attach{demoted: make(chan struct{})}}
	defer t.setStream(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if mode == modeControl {
		key := string(id) + "/" + strconv.Itoa(pid)
		s.terms.take(key, t.me)
		defer s.terms.release(key, t.me)
	} else {
		t.me.demote()
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer cancel() // the client went away or broke the rules: the output loop ends too
		t.readLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		t.pingLoop(ctx)
	}()
	var e terminalFrameOut
	var ok bool
	if st != nil {
		e, ok = t.streamLoop(ctx, wake, st)
	} else {
		e, ok = t.outputLoop(ctx, wake, chunk)
	}
	if ok {
		t.send(ctx, e)
		conn.Close(websocket.StatusNormalClosure, e.Reason)
	}
	cancel()
	conn.CloseNow()
	wg.Wait()
	return nil
}

// wantsWebSocket reports whether r asks for the WebSocket protocol; the library checks the rest of
// the handshake (and answers its own refusal of a malformed one).
func wantsWebSocket(r *http.Request) bool {
	upgrade := false
	for _, v := range r.Header.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			upgrade = upgrade || strings.EqualFold(strings.TrimSpace(tok), "upgrade")
		}
	}
	return upgrade && strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// terminal is one attach's state.
type terminal struct {
	s     *Server
	conn  *websocket.Conn
	id    sandbox.ID
	gen   sandbox.Generation
	pid   int
	me    *attach
	after int64 // the offset past the last byte sent; the output loop's own

	smu sync.Mutex
	st  sandbox.TerminalStream // the open stream, which the read loop writes to; nil on the calls' path
}

// stream returns the open stream, or nil.
func (t *terminal) stream() sandbox.TerminalStream {
	t.smu.Lock()
	defer t.smu.Unlock()
	return t.st
}

// setStream makes st the open stream, and closes the one before.
func (t *terminal) setStream(st sandbox.TerminalStream) {
	t.smu.Lock()
	old := t.st
	t.st = st
	t.smu.Unlock()
	if old != nil && old != st {
		old.Close()
	}
}

// beat is the attach's heartbeat interval.
func (t *terminal) beat() time.Duration { return min(t.s.heartbeat, terminalBeat) }

// send writes one text frame, f as JSON, within the write timeout.
func (t *terminal) send(ctx context.Context, f any) bool {
	b, _ := json.Marshal(f)
	return t.write(ctx, websocket.MessageText, b)
}

func (t *terminal) write(ctx context.Context, typ websocket.MessageType, b []byte) bool {
	ctx, cancel := context.WithTimeout(ctx, t.s.writeTimeout)
	defer cancel()
	return t.conn.Write(ctx, typ, b) == nil
}

// outputLoop sends the output from chunk on until the process exits or the attach must end: it
// returns the last frame to send, or false when the client went away.
func (t *terminal) outputLoop(ctx context.Context, wake <-chan struct{}, chunk sandbox.OutputChunk) (terminalFrameOut, bool) {
	s := t.s
	if !t.send(ctx, t.offsetFrame(chunk)) {
		return terminalFrameOut{}, false
	}
	t.after = max(t.after, chunk.Start)
	beat := time.NewTicker(t.beat())
	defer beat.Stop()
	demoted := t.me.demoted
	if !t.me.controls() {
		demoted = nil // a watcher from the start is told nothing
	}
	for {
		if chunk.Start > t.after { // older bytes were dropped meanwhile
			if !t.send(ctx, t.offsetFrame(chunk)) {
				return terminalFrameOut{}, false
			}
			t.after = chunk.Start
		}
		if len(chunk.Data) > 0 {
			if !t.write(ctx, websocket.MessageBinary, chunk.Data) {
				return terminalFrameOut{}, false
			}
			t.after = chunk.Start + int64(len(chunk.Data))
		}
		if chunk.Done {
			p, err := s.rt.WaitProcess(ctx, t.id, t.gen, t.pid, 0)
			if err != nil {
				return t.endFrame(ctx, err), ctx.Err() == nil
			}
			return terminalFrameOut{Type: "exit", Offset: t.after, ExitCode: p.ExitCode, Reason: endExited}, true
		}
		select {
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
		default:
		}
		var err error
		var woken bool
		chunk, woken, err = t.poll(ctx, wake, demoted)
		switch {
		case ctx.Err() != nil:
			return terminalFrameOut{}, false
		case err != nil:
			e := s.endOf(ctx, t.id, t.gen, err)
			if e.Reason == endPaused {
				if e, ok := t.paused(ctx, wake); !ok || e.Type != "" {
					return e, ok
				}
				chunk = sandbox.OutputChunk{Start: t.after}
				continue
			}
			if e.Reason == "" && woken { // an event of another kind: poll again
				chunk = sandbox.OutputChunk{Start: t.after}
				continue
			}
			return t.endFrame(ctx, err), true
		}
	}
}

// sayDemoted tells the client that a later control attach took over.
func (t *terminal) sayDemoted(ctx context.Context) bool {
	return t.send(ctx, terminalFrameOut{Type: "mode", Offset: t.after, Mode: modeWatch, Reason: "taken_over",
		Message: "another attach took control; this one watches"})
}

// sayRunning sends the heartbeat of a sandbox that runs.
func (t *terminal) sayRunning(ctx context.Context) bool {
	return t.send(ctx, terminalFrameOut{Type: "heartbeat", Offset: t.after, State: stateRunning})
}

// offsetFrame says where the bytes that follow start.
func (t *terminal) offsetFrame(chunk sandbox.OutputChunk) terminalFrameOut {
	f := terminalFrameOut{Type: "offset", Offset: max(t.after, chunk.Start)}
	if chunk.Start > t.after {
		from := t.after
		f.Dropped = &from
	}
	return f
}

// endFrame is the end frame of an attach whose read failed with err.
func (t *terminal) endFrame(ctx context.Context, err error) terminalFrameOut {
	e := t.s.endOf(ctx, t.id, t.gen, err)
	if e.Reason == "" {
		e = processEndEvent{Reason: endAgent, Message: err.Error()}
	}
	return terminalFrameOut{Type: "end", Offset: t.after, Reason: e.Reason, Message: e.Message}
}

// paused waits, sending heartbeats that say so, while the sandbox is paused: the attach outlives a
// pause. It returns an empty frame once the sandbox is ready again, or the frame to end with.
func (t *terminal) paused(ctx context.Context, wake <-chan struct{}) (terminalFrameOut, bool) {
	e, ok := t.s.waitPaused(ctx, wake, t.id, t.gen, t.beat(), func() bool {
		return t.send(ctx, terminalFrameOut{Type: "heartbeat", Offset: t.after, State: statePaused})
	})
	if !ok || e.Reason == "" {
		return terminalFrameOut{}, ok
	}
	return terminalFrameOut{Type: "end", Offset: t.after, Reason: e.Reason, Message: e.Message}, true
}

// poll reads the output after t.after, waiting up to the heartbeat for it; the runtime's events and
// the server's close cut the wait short (woken), and so does demoted, with no error, so that the loop
// says so at once.
func (t *terminal) poll(ctx context.Context, wake, demoted <-chan struct{}) (sandbox.OutputChunk, bool, error) {
	pctx, cancel := context.WithTimeout(ctx, t.beat()+pollSlack)
	defer cancel()
	stopped := make(chan struct{})
	woke := make(chan bool, 1)
	cut := make(chan bool, 1)
	go func() {
		select {
		case <-wake:
			woke <- true
			cancel()
		case <-t.s.done:
			woke <- true
			cancel()
		case <-demoted:
			cut <- true
			woke <- false
			cancel()
		case <-stopped:
			woke <- false
		}
	}()
	chunk, err := t.s.rt.ReadOutput(pctx, t.id, t.gen, t.pid, t.after, outputPiece, t.beat())
	close(stopped)
	w := <-woke
	select {
	case <-cut:
		if err != nil && ctx.Err() == nil {
			return sandbox.OutputChunk{Start: t.after}, false, nil
		}
	default:
	}
	return chunk, w, err
}

// pingLoop pings the client every heartbeat: one that does not answer within the write timeout is
// gone, and the attach ends.
func (t *terminal) pingLoop(ctx context.Context) {
	tick := time.NewTicker(t.beat())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, t.s.writeTimeout)
		err := t.conn.Ping(pctx)
		cancel()
		if err != nil {
			t.conn.CloseNow()
			return
		}
	}
}

// terminalQueue bounds the client's writes, resizes and signals waiting for the sandbox: the frames
// are read on meanwhile (so that pongs are), and a client that sends more waits.
const terminalQueue = 16

// readLoop takes the client's frames until it goes away: keys to stdin, and control frames, from a
// control attach, carried out in their order by a goroutine of their own (a process that is slow to
// read its stdin holds up that goroutine, not the reading of the pongs); a watcher's writes, and
// malformed frames, are answered with an error frame.
func (t *terminal) readLoop(ctx context.Context) {
	var mu sync.Mutex
	bad := 0
	refuse := func(msg string) bool {
		mu.Lock()
		bad++
		n := bad
		mu.Unlock()
		if n > terminalErrors {
			t.conn.Close(websocket.StatusPolicyViolation, "too many refused frames")
			return false
		}
		return t.send(ctx, terminalError{Type: "error", Message: msg})
	}
	acts := make(chan func() error, terminalQueue)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for act := range acts {
			if err := act(); err != nil && ctx.Err() == nil && !refuse(err.Error()) {
				t.conn.CloseNow()
			}
		}
	}()
	defer func() {
		close(acts)
		<-done
	}()
	for {
		typ, b, err := t.conn.Read(ctx)
		if err != nil {
			return
		}
		if !t.me.controls() {
			if !refuse("this attach watches: only the control attach writes") {
				return
			}
			continue
		}
		var act func() error
		if typ == websocket.MessageBinary {
			if len(b) == 0 {
				continue
			}
			act = func() error {
				if st := t.stream(); st != nil {
					if err := st.Stdin(ctx, b); err != nil {
						return fmt.Errorf("stdin: %w", err)
					}
					return nil
				}
				if err := t.s.rt.WriteStdin(ctx, t.id, t.gen, t.pid, b, false); err != nil {
					return fmt.Errorf("stdin: %w", err)
				}
				return nil
			}
		} else {
			f, err := parseControl(b)
			if err != nil {
				if !refuse(err.Error()) {
					return
				}
				continue
			}
			act = func() error { return t.control(ctx, f) }
		}
		select {
		case acts <- act:
		case <-ctx.Done():
			return
		}
	}
}

// control carries out one control frame.
func (t *terminal) control(ctx context.Context, f terminalFrameIn) error {
	if st := t.stream(); st != nil {
		if f.Type == "resize" {
			return st.Resize(ctx, sandbox.TerminalSize{Rows: f.Rows, Cols: f.Cols})
		}
		return st.Signal(ctx, f.Signal)
	}
	if f.Type == "resize" {
		return t.s.rt.ResizeProcess(ctx, t.id, t.gen, t.pid, sandbox.TerminalSize{Rows: f.Rows, Cols: f.Cols})
	}
	return t.s.rt.SignalProcess(ctx, t.id, t.gen, t.pid, f.Signal)
}

// parseControl decodes a control frame and checks it: a resize to a size a terminal can have, or a
// signal of sandbox.ProcessSignals (its SIG prefix taken off). Errors: ErrInvalidRequest.
func parseControl(b []byte) (terminalFrameIn, error) {
	var f terminalFrameIn
	if err := decodeStrict(b, &f); err != nil {
		return f, fmt.Errorf("control frame: %w", err)
	}
	switch f.Type {
	case "resize":
		return f, sandbox.TerminalSize{Rows: f.Rows, Cols: f.Cols}.Validate()
	case "signal":
		f.Signal = strings.TrimPrefix(f.Signal, "SIG")
		if !slices.Contains(sandbox.ProcessSignals, f.Signal) {
			return f, fmt.Errorf("signal %.16q is none of %v: %w", f.Signal, sandbox.ProcessSignals, sandbox.ErrInvalidRequest)
		}
		return f, nil
	}
	return f, fmt.Errorf("control frame of type %.16q, neither resize nor signal: %w", f.Type, sandbox.ErrInvalidRequest)
}
