package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// The terminal stream (protocol.PathProcessTerminal): one connection carries a pty process's keys in
// and its output out, so that a keystroke's echo is one trip through whatever joins the daemon to the
// agent, not a request for the key and the answer to a waiting poll for the echo. The output still
// goes to the journal by the process's pump: the stream only tails it, as a long poll would, so a
// stream that is slow, gone or never read holds up nothing but itself.

// ErrNotTerminal says the process has no terminal: its output is read as any process's.
var ErrNotTerminal = errors.New("the process has no terminal")

// Terminal is one process's terminal, checked for a stream (Processes.Terminal).
type Terminal struct {
	ps    *Processes
	p     *process
	pid   int
	after int64
}

// Terminal checks that process pid runs on a terminal and that its output reaches offset after, for
// Serve. Errors: ErrNotFound, ErrInvalidRequest (an offset past the end), ErrNotTerminal (wrapping
// ErrInvalidState).
func (ps *Processes) Terminal(pid int, after int64) (*Terminal, error) {
	p, err := ps.lookup(pid)
	if err != nil {
		return nil, err
	}
	if !p.sp.TTY {
		return nil, fmt.Errorf("process %d: %w: %w", pid, ErrNotTerminal, sandbox.ErrInvalidState)
	}
	if _, end, _, _ := p.j.bounds(); after < 0 || after > end {
		return nil, fmt.Errorf("offset %d is past the end of the output, %d: %w", after, end, sandbox.ErrInvalidRequest)
	}
	return &Terminal{ps: ps, p: p, pid: pid, after: after}, nil
}

// endCause ends a stream with an end frame saying reason.
type endCause struct{ reason, message string }

func (e *endCause) Error() string { return e.reason + ": " + e.message }

// Serve runs the stream on conn, whose reads come through r (which may hold its first bytes), until
// the process's output has all gone out and it exited, the client goes away or breaks the framing, or
// ctx ends; an end frame says which, unless the client is gone. An end of ctx whose cause is a
// *endCause says that cause's reason. A frame is written to the stream every beat at least. Serve
// closes conn.
func (t *Terminal) Serve(ctx context.Context, conn net.Conn, r *bufio.Reader, beat time.Duration) {
	s := &termStream{t: t, conn: conn}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	in := make(chan struct{})
	go func() {
		defer close(in)
		s.input(r, cancel)
	}()
	s.output(ctx, cancel, beat)
	conn.Close()
	<-in
}

// termStream is a stream's connection; its writes are one at a time.
type termStream struct {
	t    *Terminal
	conn net.Conn
	wmu  sync.Mutex
}

// errClientGone ends a stream whose client closed it or failed.
var errClientGone = errors.New("the client went away")

func (s *termStream) write(b []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.conn.SetWriteDeadline(time.Now().Add(protocol.TerminalWriteTimeout))
	_, err := s.conn.Write(b)
	return err
}

// output sends the output from the stream's offset on, a beat frame for each beat without any, and
// the end frame.
func (s *termStream) output(ctx context.Context, cancel context.CancelCauseFunc, beat time.Duration) {
	p, after := s.t.p, s.t.after
	end := func(e protocol.TerminalEnd) {
		e.Offset = after
		_ = s.write(protocol.EndFrame(e))
	}
	var frame []byte
	for {
		rctx, rcancel := context.WithTimeout(ctx, beat)
		start, data, _, done, err := p.j.read(rctx, after, protocol.MaxTerminalOutput)
		rcancel()
		if ctx.Err() != nil {
			var e *endCause
			if errors.As(context.Cause(ctx), &e) {
				end(protocol.TerminalEnd{Reason: e.reason, Message: e.message})
			}
			return
		}
		if err != nil {
			end(protocol.TerminalEnd{Reason: protocol.TerminalError, Message: err.Error()})
			return
		}
		if len(data) > 0 {
			frame = protocol.OutputFrame(frame[:0], start, data)
			after = start + int64(len(data))
		} else {
			frame = protocol.AppendFrame(frame[:0], protocol.FrameBeat)
		}
		if !done || len(data) > 0 {
			if err := s.write(frame); err != nil {
				cancel(errClientGone)
				return
			}
		}
		if done {
			<-p.done // the pump records the exit before it closes the journal
			p.mu.Lock()
			code := p.info.ExitCode
			p.mu.Unlock()
			end(protocol.TerminalEnd{Reason: protocol.TerminalExited, ExitCode: code})
			return
		}
	}
}

// input carries out the client's frames in their order until it goes away or breaks the framing; a
// frame the process refuses is answered with a refused frame, and the stream goes on.
func (s *termStream) input(r *bufio.Reader, cancel context.CancelCauseFunc) {
	t := s.t
	fr := protocol.NewFrameReader(r)
	for {
		f, err := fr.Read()
		if errors.Is(err, protocol.ErrTerminalFrame) {
			cancel(&endCause{reason: protocol.TerminalProtocol, message: err.Error()})
			return
		}
		if err != nil {
			cancel(errClientGone)
			return
		}
		switch f.Type {
		case protocol.FrameStdin:
			err = t.p.writeStdin(f.Payload, false, time.Now().Add(protocol.MaxWait))
		case protocol.FrameResize:
			rows, cols := protocol.DecodeResize(f.Payload)
			err = t.ps.Resize(t.pid, sandbox.TerminalSize{Rows: rows, Cols: cols})
		case protocol.FrameSignal:
			err = t.ps.Signal(t.pid, string(f.Payload))
		default:
			cancel(&endCause{reason: protocol.TerminalProtocol, message: fmt.Sprintf("frame %q is the agent's to send", f.Type)})
			return
		}
		if err != nil && s.write(protocol.RefusedFrame(err.Error())) != nil {
			cancel(errClientGone)
			return
		}
	}
}

// attachTerminal: GET protocol.PathProcessTerminal?pid=&after=&beatMs=, upgraded to a terminal stream.
func (a *Agent) attachTerminal(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	t, beat, err := a.terminalRequest(r)
	if errors.Is(err, ErrNotTerminal) {
		writeJSON(w, http.StatusConflict, protocol.Error{Code: protocol.CodeNotTerminal, Message: err.Error()})
		return
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeErr(w, fmt.Errorf("take over the connection: %w", err))
		return
	}
	_ = conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+protocol.UpgradeTerminal+"\r\n\r\n"); err != nil {
		conn.Close()
		return
	}
	ctx, done := a.streams.join()
	defer done()
	t.Serve(ctx, conn, buf.Reader, beat)
}

// terminalRequest reads and checks a request for a terminal stream.
func (a *Agent) terminalRequest(r *http.Request) (*Terminal, time.Duration, error) {
	q := r.URL.Query()
	if r.Header.Get("Upgrade") != protocol.UpgradeTerminal {
		return nil, 0, fmt.Errorf("a terminal stream needs Upgrade: %s: %w", protocol.UpgradeTerminal, sandbox.ErrInvalidRequest)
	}
	pid, err := pidParam(r)
	if err != nil {
		return nil, 0, err
	}
	after, err := strconv.ParseInt(q.Get("after"), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("after %.32q: %w", q.Get("after"), sandbox.ErrInvalidRequest)
	}
	ms, err := strconv.ParseInt(q.Get("beatMs"), 10, 64)
	beat := time.Duration(ms) * time.Millisecond
	if err != nil || beat < protocol.MinTerminalBeat || beat > protocol.MaxTerminalBeat {
		return nil, 0, fmt.Errorf("beatMs %.32q out of %v..%v: %w", q.Get("beatMs"), protocol.MinTerminalBeat, protocol.MaxTerminalBeat, sandbox.ErrInvalidRequest)
	}
	t, err := a.procs.Terminal(pid, after)
	return t, beat, err
}

// streams are the agent's terminal streams, which end with an end frame when the agent stops or
// suspends its server (which does not close connections it handed over).
type streams struct {
	mu  sync.Mutex
	cur *streamSet
}

// streamSet is the streams joined since the last endAll.
type streamSet struct {
	ctx  context.Context
	end  context.CancelCauseFunc
	live sync.WaitGroup
}

// join returns the context a new stream runs in, and the func to call when it is over.
func (s *streams) join() (context.Context, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		set := &streamSet{}
		set.ctx, set.end = context.WithCancelCause(context.Background())
		s.cur = set
	}
	s.cur.live.Add(1)
	return s.cur.ctx, s.cur.live.Done
}

// endAll ends every stream with an end frame saying reason, and waits a little for them to send it.
// Streams joined after go on.
func (s *streams) endAll(reason, message string) {
	s.mu.Lock()
	set := s.cur
	s.cur = nil
	s.mu.Unlock()
	if set == nil {
		return
	}
	set.end(&endCause{reason: reason, message: message})
	gone := make(chan struct{})
	go func() {
		set.live.Wait()
		close(gone)
	}()
	t := time.NewTimer(endStreamsWait)
	defer t.Stop()
	select {
	case <-gone:
	case <-t.C:
	}
}

// endStreamsWait bounds how long the agent waits for its streams' end frames to go out.
const endStreamsWait = 200 * time.Millisecond
