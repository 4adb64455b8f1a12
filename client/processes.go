package client

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandbox"
)

// Background processes (api/extensions.yaml, "processes"): a process started in a sandbox runs on its
// own; its output is kept in the sandbox and read by byte offset, so a reader that drops, or a daemon
// that restarts, loses nothing.

func processPath(id sandbox.ID, pid int, rest string) string {
	p := "/v1/sandboxes/" + url.PathEscape(string(id)) + "/processes"
	if pid > 0 {
		p += "/" + strconv.Itoa(pid)
	}
	return p + rest
}

func genValues(gen sandbox.Generation) url.Values {
	return url.Values{"expectedGeneration": {strconv.FormatInt(int64(gen), 10)}}
}

// StartProcess starts a background process in sandbox id at generation gen.
func (c *Client) StartProcess(ctx context.Context, id sandbox.ID, gen sandbox.Generation, spec sandbox.ProcessSpec) (*sandbox.Process, error) {
	body := map[string]any{"expectedGeneration": gen, "argv": spec.Argv}
	if spec.Cwd != "" {
		body["cwd"] = spec.Cwd
	}
	if len(spec.Env) > 0 {
		body["env"] = spec.Env
	}
	if len(spec.Stdin) > 0 {
		body["stdinBase64"] = base64.StdEncoding.EncodeToString(spec.Stdin)
	}
	if spec.CloseStdin {
		body["closeStdin"] = true
	}
	if spec.Tag != "" {
		body["tag"] = spec.Tag
	}
	if spec.PTY != nil {
		body["pty"] = spec.PTY
	}
	var p sandbox.Process
	if err := c.do(ctx, call{method: "POST", path: processPath(id, 0, ""), body: body}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// ListProcesses lists the sandbox's background processes, oldest first.
func (c *Client) ListProcesses(ctx context.Context, id sandbox.ID, gen sandbox.Generation) ([]sandbox.Process, error) {
	var out struct {
		Processes []sandbox.Process `json:"processes"`
	}
	if err := c.do(ctx, call{method: "GET", path: processPath(id, 0, ""), query: genValues(gen), safe: true}, &out); err != nil {
		return nil, err
	}
	return out.Processes, nil
}

// GetProcess returns one background process.
func (c *Client) GetProcess(ctx context.Context, id sandbox.ID, gen sandbox.Generation, pid int) (*sandbox.Process, error) {
	var p sandbox.Process
	if err := c.do(ctx, call{method: "GET", path: processPath(id, pid, ""), query: genValues(gen), safe: true}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// WaitProcess waits up to timeout for a process to end and returns it, ended or not (Running).
func (c *Client) WaitProcess(ctx context.Context, id sandbox.ID, gen sandbox.Generation, pid int, timeout time.Duration) (*sandbox.Process, error) {
	var p sandbox.Process
	k := call{method: "POST", path: processPath(id, pid, "/wait"), safe: true,
		body: map[string]any{"expectedGeneration": gen, "timeoutMs": timeout.Milliseconds()}}
	if err := c.do(ctx, k, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// WriteStdin writes data to a process's stdin, and closes it after when closeStdin.
func (c *Client) WriteStdin(ctx context.Context, id sandbox.ID, gen sandbox.Generation, pid int, data []byte, closeStdin bool) error {
	k := call{method: "POST", path: processPath(id, pid, "/stdin"),
		body: map[string]any{"expectedGeneration": gen, "dataBase64": base64.StdEncoding.EncodeToString(data), "close": closeStdin}}
	return c.do(ctx, k, nil)
}

// SignalProcess sends a signal (sandbox.ProcessSignals) to a process's group.
func (c *Client) SignalProcess(ctx context.Context, id sandbox.ID, gen sandbox.Generation, pid int, signal string) error {
	k := call{method: "POST", path: processPath(id, pid, "/signal"), body: map[string]any{"expectedGeneration": gen, "signal": signal}}
	return c.do(ctx, k, nil)
}

// OutputEvent is one event of a process's output stream. Kind "output": Data from offset Offset.
// "dropped": the bytes from Offset to To are no longer kept; the output goes on at To. "heartbeat":
// State says the sandbox is paused (StreamPaused: the stream waits, and goes on from Offset after the
// resume) or runs again (StreamRunning). "end": the stream ended for Reason (ProcessEnd...), and a new
// one resumes at Offset.
type OutputEvent struct {
	Kind     string
	Offset   int64
	Data     []byte
	To       int64
	State    string
	Reason   string
	ExitCode *int
	Message  string
}

// The states a stream's heartbeat event says (OutputEvent.State, FileEvent.State).
const (
	StreamRunning = "running"
	StreamPaused  = "paused"
)

// The reasons an output stream ends (OutputEvent.Reason). ProcessEndPaused is an older daemon's: a
// pause now holds a stream, its heartbeats saying so.
const (
	ProcessEndExited         = "exited"
	ProcessEndPaused         = "paused"
	ProcessEndTerminated     = "terminated"
	ProcessEndRecreated      = "recreated"
	ProcessEndAgent          = "agent_unavailable"
	ProcessEndDaemonStopping = "daemon_stopping"
	ProcessEndError          = "error"
)

// OutputStream is one connection of a process's output stream.
type OutputStream struct {
	body io.ReadCloser
	br   *bufio.Reader
}

// OpenOutput opens the output stream of a process from offset after.
func (c *Client) OpenOutput(ctx context.Context, id sandbox.ID, gen sandbox.Generation, pid int, after int64) (*OutputStream, error) {
	q := genValues(gen)
	q.Set("after", strconv.FormatInt(after, 10))
	resp, err := c.send(ctx, call{method: "GET", path: processPath(id, pid, "/output"), query: q,
		header: http.Header{"Accept": {"text/event-stream"}}})
	if err != nil {
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, &protocolError{fmt.Sprintf("output stream has content type %q", ct)}
	}
	return &OutputStream{body: resp.Body, br: bufio.NewReaderSize(resp.Body, 64<<10)}, nil
}

// Next returns the stream's next event. After an end event, or an error, the stream is done; an
// error other than a *protocolError is the connection's: reopen from the offset reached.
func (s *OutputStream) Next() (OutputEvent, error) {
	var ev OutputEvent
	var perr error
	got := false
	_, _, err := readSSE(s.br, func(name, data string) bool {
		got = true
		switch name {
		case "output":
			ev, perr = decodeOutputEvent(data)
		case "dropped":
			var v struct{ From, To int64 }
			perr = json.Unmarshal([]byte(data), &v)
			ev = OutputEvent{Kind: name, Offset: v.From, To: v.To}
		case "heartbeat":
			var v struct {
				State  string `json:"state"`
				Offset int64  `json:"offset"`
			}
			perr = json.Unmarshal([]byte(data), &v)
			ev = OutputEvent{Kind: name, Offset: v.Offset, State: v.State}
		case "end":
			var v struct {
				Reason   string `json:"reason"`
				Offset   int64  `json:"offset"`
				ExitCode *int   `json:"exitCode"`
				Message  string `json:"message"`
			}
			perr = json.Unmarshal([]byte(data), &v)
			ev = OutputEvent{Kind: name, Offset: v.Offset, Reason: v.Reason, ExitCode: v.ExitCode, Message: v.Message}
		default:
			perr = fmt.Errorf("unknown event %q", name)
		}
		return false
	})
	switch {
	case perr != nil:
		return OutputEvent{}, &protocolError{"output stream: " + perr.Error()}
	case got:
		return ev, nil
	case err == nil:
		return OutputEvent{}, io.ErrUnexpectedEOF // the connection ended without an end event
	}
	return OutputEvent{}, err
}

// decodeOutputEvent decodes the data of an output event. The server writes it in one form,
// {"offset":N,"dataBase64":"..."}, which is read here without a JSON decoder's scan of the base64;
// any other form goes through encoding/json.
func decodeOutputEvent(data string) (OutputEvent, error) {
	const head, mid = `{"offset":`, `,"dataBase64":"`
	if rest, ok := strings.CutPrefix(data, head); ok {
		if off, b64, ok := strings.Cut(rest, mid); ok {
			if b64, ok := strings.CutSuffix(b64, `"}`); ok {
				if offset, err := strconv.ParseInt(off, 10, 64); err == nil && offset >= 0 {
					out, err := base64.StdEncoding.Strict().DecodeString(b64)
					if err != nil {
						return OutputEvent{}, err
					}
					return OutputEvent{Kind: "output", Offset: offset, Data: out}, nil
				}
			}
		}
	}
	var v struct {
		Offset     int64  `json:"offset"`
		DataBase64 []byte `json:"dataBase64"`
	}
	err := json.Unmarshal([]byte(data), &v)
	return OutputEvent{Kind: "output", Offset: v.Offset, Data: v.DataBase64}, err
}

// Close closes the connection.
func (s *OutputStream) Close() error { return s.body.Close() }

// EndError is the end of an output stream other than the process's exit: the sandbox was paused,
// terminated or recreated, or its agent did not answer. Offset is where a new reader resumes.
type EndError struct {
	Reason, Message string
	Offset          int64
}

func (e *EndError) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("process output ended: %s: %s", e.Reason, e.Message)
	}
	return "process output ended: " + e.Reason
}

// OutputReader reads a process's output as an io.Reader from an offset, reconnecting from the offset
// it reached whenever a connection drops, so that it yields every byte the sandbox kept once, in
// order. It returns io.EOF once the process exited and every byte was read; an *EndError when the
// stream ended otherwise (terminated, recreated); an error when it cannot reconnect. A pause holds
// Read until the resume, on the same connection: Paused says so meanwhile (and an older daemon's end
// of a stream at a pause is an *EndError of ProcessEndPaused: resume the sandbox and read on).
type OutputReader struct {
	c        *Client
	ctx      context.Context
	id       sandbox.ID
	gen      sandbox.Generation
	pid      int
	offset   int64
	dropped  int64
	exitCode *int
	s        *OutputStream
	buf      []byte
	err      error
	failures int
	paused   atomic.Bool // the last heartbeat said the sandbox is paused
}

// NewOutputReader returns a reader of the process's output from offset after.
func (c *Client) NewOutputReader(ctx context.Context, id sandbox.ID, gen sandbox.Generation, pid int, after int64) *OutputReader {
	return &OutputReader{c: c, ctx: ctx, id: id, gen: gen, pid: pid, offset: after}
}

// Offset is the offset past the last byte Read returned.
func (r *OutputReader) Offset() int64 { return r.offset - int64(len(r.buf)) }

// Dropped is how many bytes the sandbox no longer kept when the reader came to them.
func (r *OutputReader) Dropped() int64 { return r.dropped }

// ExitCode is the process's exit code once Read returned io.EOF.
func (r *OutputReader) ExitCode() *int { return r.exitCode }

// Paused reports whether the daemon's last heartbeat said the sandbox was paused: Read waits for the
// resume. It may be called from any goroutine.
func (r *OutputReader) Paused() bool { return r.paused.Load() }

// Read reads the output.
func (r *OutputReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.next()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Close closes the reader's connection.
func (r *OutputReader) Close() error {
	if r.s != nil {
		r.s.Close()
		r.s = nil
	}
	if r.err == nil {
		r.err = errors.New("output reader closed")
	}
	return nil
}

// next reads the next event into buf, or sets err.
func (r *OutputReader) next() {
	if r.s == nil {
		s, err := r.c.OpenOutput(r.ctx, r.id, r.gen, r.pid, r.offset)
		if err != nil {
			r.retry(err)
			return
		}
		r.s = s
	}
	ev, err := r.s.Next()
	if err != nil {
		r.s.Close()
		r.s = nil
		var perr *protocolError
		if errors.As(err, &perr) {
			r.err = err
			return
		}
		r.retry(err)
		return
	}
	switch ev.Kind {
	case "output":
		if ev.Offset != r.offset {
			r.err = &protocolError{fmt.Sprintf("output at %d, want %d", ev.Offset, r.offset)}
			return
		}
		r.failures = 0
		r.paused.Store(false)
		r.buf = ev.Data
		r.offset += int64(len(ev.Data))
	case "heartbeat":
		r.paused.Store(ev.State == StreamPaused)
	case "dropped":
		r.dropped += ev.To - r.offset
		r.offset = ev.To
	case "end":
		r.s.Close()
		r.s = nil
		r.paused.Store(false)
		switch ev.Reason {
		case ProcessEndExited:
			r.exitCode, r.err = ev.ExitCode, io.EOF
		case ProcessEndDaemonStopping:
			r.retry(&EndError{Reason: ev.Reason, Message: ev.Message, Offset: r.offset})
		default:
			r.err = &EndError{Reason: ev.Reason, Message: ev.Message, Offset: r.offset}
		}
	}
}

// retry counts a failed connection and waits before the next, or gives up after the client's
// attempts.
func (r *OutputReader) retry(err error) {
	var apiErr *Error
	if r.ctx.Err() != nil || (errors.As(err, &apiErr) && apiErr.Status < 500) {
		r.err = err
		return
	}
	r.failures++
	if r.failures >= r.c.attempts {
		r.err = fmt.Errorf("process output: %d reconnects failed: %w", r.failures, err)
		return
	}
	if serr := sleep(r.ctx, r.c.backoff(r.failures)); serr != nil {
		r.err = err
	}
}
