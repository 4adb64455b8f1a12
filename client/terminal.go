package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandbox"
)

// Terminals (api/extensions.yaml, "terminals"): a process started with a pty is resized, and attached
// to as a WebSocket whose binary frames are its output one way and its keys the other.

// ResizeProcess sets the size of a pty process's terminal.
func (c *Client) ResizeProcess(ctx context.Context, id sandbox.ID, gen sandbox.Generation, pid int, size sandbox.TerminalSize) error {
	k := call{method: "POST", path: processPath(id, pid, "/resize"),
		body: map[string]any{"expectedGeneration": gen, "rows": size.Rows, "cols": size.Cols}}
	return c.do(ctx, k, nil)
}

// TerminalOptions are the options of an attach.
type TerminalOptions struct {
	After int64 // the output offset to start from: 0 replays what the sandbox kept
	Watch bool  // only read; otherwise the attach takes control (an earlier control attach watches)
}

// terminalSilence is how long a terminal waits for a frame before it takes the connection for
// dropped: the daemon sends a heartbeat at least every 5 s, and pings.
const terminalSilence = 20 * time.Second

// Terminal is an attach to a process's terminal: Read returns its output, Write types keys. It
// reconnects by itself from the offset it reached when a connection drops, so Read yields every byte
// the sandbox kept once, in order; a Write while it reconnects waits for the new connection. Read
// returns io.EOF once the process exited and every byte was read (ExitCode), an *EndError when the
// attach ended otherwise. Read must be called for as long as the terminal is open: it answers the
// daemon's pings. Read is for one goroutine; Write, Resize, Signal and Close may be called from others.
type Terminal struct {
	c    *Client
	ctx  context.Context
	id   sandbox.ID
	gen  sandbox.Generation
	pid  int
	opts TerminalOptions

	mu       sync.Mutex
	conn     *websocket.Conn
	changed  chan struct{} // closed and replaced when conn changes
	closed   bool
	offset   int64 // past the last byte Read received
	dropped  int64
	exitCode *int
	state    string // of the last heartbeat
	watching bool
	lastErr  string // of the daemon's last error frame

	buf      []byte
	err      error
	failures int
}

// Terminal attaches to the terminal of process pid in sandbox id at generation gen.
func (c *Client) Terminal(ctx context.Context, id sandbox.ID, gen sandbox.Generation, pid int, opts TerminalOptions) (*Terminal, error) {
	t := &Terminal{c: c, ctx: ctx, id: id, gen: gen, pid: pid, opts: opts, offset: opts.After, watching: opts.Watch,
		changed: make(chan struct{})}
	conn, err := t.dial(ctx)
	if err != nil {
		return nil, err
	}
	t.setConn(conn)
	return t, nil
}

// dial opens one connection from the offset reached.
func (t *Terminal) dial(ctx context.Context) (*websocket.Conn, error) {
	u := *t.c.base
	u.Path = t.c.base.Path + processPath(t.id, t.pid, "/terminal")
	q := genValues(t.gen)
	t.mu.Lock()
	q.Set("after", strconv.FormatInt(t.offset, 10))
	t.mu.Unlock()
	if t.opts.Watch {
		q.Set("mode", "watch")
	}
	u.RawQuery = q.Encode()
	hc := *t.c.hc
	hc.Timeout = 0 // the WebSocket library refuses one: the context bounds the dial
	h := http.Header{}
	if t.c.token != "" {
		h.Set("Authorization", "Bearer "+t.c.token)
	}
	dctx, cancel := context.WithTimeout(ctx, terminalSilence)
	defer cancel()
	conn, resp, err := websocket.Dial(dctx, u.String(), &websocket.DialOptions{HTTPClient: &hc, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			return nil, decodeError(resp)
		}
		return nil, fmt.Errorf("terminal of process %d: %w", t.pid, err)
	}
	conn.SetReadLimit(1 << 20)
	return conn, nil
}

func (t *Terminal) setConn(conn *websocket.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		conn.CloseNow()
		return
	}
	t.conn = conn
	close(t.changed)
	t.changed = make(chan struct{})
}

// Offset is the output offset past the last byte Read returned.
func (t *Terminal) Offset() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.offset - int64(len(t.buf))
}

// ExitCode is the process's exit code once Read returned io.EOF.
func (t *Terminal) ExitCode() *int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exitCode
}

// Paused reports whether the daemon's last heartbeat said the sandbox was paused.
func (t *Terminal) Paused() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state == "paused"
}

// Watching reports whether the attach only reads: asked so, or another attach took control.
func (t *Terminal) Watching() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.watching
}

// Dropped is how many bytes the sandbox no longer kept when the terminal came to them.
func (t *Terminal) Dropped() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dropped
}

// LastError is the message of the daemon's last error frame: a write, resize or signal it refused.
func (t *Terminal) LastError() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr
}

// Read reads the terminal's output.
func (t *Terminal) Read(p []byte) (int, error) {
	for len(t.buf) == 0 {
		if t.err != nil {
			return 0, t.err
		}
		t.next()
	}
	n := copy(p, t.buf)
	t.mu.Lock()
	t.buf = t.buf[n:]
	t.mu.Unlock()
	return n, nil
}

// next reads the next frame, or sets t.err.
func (t *Terminal) next() {
	t.mu.Lock()
	conn, closed := t.conn, t.closed
	t.mu.Unlock()
	if closed {
		t.err = errors.New("terminal closed")
		return
	}
	if conn == nil {
		c, err := t.dial(t.ctx)
		if err != nil {
			t.retry(err)
			return
		}
		t.setConn(c)
		return
	}
	rctx, cancel := context.WithTimeout(t.ctx, terminalSilence)
	typ, b, err := conn.Read(rctx)
	cancel()
	if err != nil {
		t.drop(conn)
		if t.ctx.Err() != nil {
			t.err = t.ctx.Err()
			return
		}
		t.retry(err)
		return
	}
	if typ == websocket.MessageBinary {
		t.mu.Lock()
		t.failures = 0
		t.buf = b
		t.offset += int64(len(b))
		t.mu.Unlock()
		return
	}
	var f struct {
		Type     string `json:"type"`
		Offset   int64  `json:"offset"`
		Dropped  *int64 `json:"dropped"`
		State    string `json:"state"`
		Mode     string `json:"mode"`
		ExitCode *int   `json:"exitCode"`
		Reason   string `json:"reason"`
		Message  string `json:"message"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.fail(conn, &protocolError{"terminal frame: " + err.Error()})
		return
	}
	switch f.Type {
	case "offset":
		t.mu.Lock()
		behind := f.Offset < t.offset
		if !behind {
			t.dropped += f.Offset - t.offset
			t.offset = f.Offset
		}
		t.mu.Unlock()
		if behind {
			t.fail(conn, &protocolError{fmt.Sprintf("terminal output at %d, want %d", f.Offset, t.Offset())})
		}
	case "heartbeat":
		t.mu.Lock()
		t.state = f.State
		t.mu.Unlock()
	case "mode":
		t.mu.Lock()
		t.watching = f.Mode == "watch"
		t.mu.Unlock()
	case "error":
		t.mu.Lock()
		t.lastErr = f.Message
		t.mu.Unlock()
	case "exit":
		t.mu.Lock()
		t.exitCode, t.err = f.ExitCode, io.EOF
		t.mu.Unlock()
		conn.Close(websocket.StatusNormalClosure, "")
	case "end":
		end := &EndError{Reason: f.Reason, Message: f.Message, Offset: t.Offset()}
		if f.Reason == ProcessEndDaemonStopping {
			// A daemon that stops may be back soon: reconnect as after a drop.
			t.drop(conn)
			t.retry(end)
			return
		}
		t.err = end
		conn.Close(websocket.StatusNormalClosure, "")
	}
}

// drop forgets conn, so that the next read dials again.
func (t *Terminal) drop(conn *websocket.Conn) {
	conn.CloseNow()
	t.mu.Lock()
	if t.conn == conn {
		t.conn = nil
	}
	t.mu.Unlock()
}

func (t *Terminal) fail(conn *websocket.Conn, err error) {
	t.drop(conn)
	t.err = err
}

// retry counts a failed connection and waits before the next, or gives up after the client's attempts.
func (t *Terminal) retry(err error) {
	var apiErr *Error
	if t.ctx.Err() != nil || (errors.As(err, &apiErr) && apiErr.Status < 500) {
		t.err = err
		return
	}
	t.failures++
	if t.failures >= t.c.attempts {
		t.err = fmt.Errorf("terminal: %d reconnects failed: %w", t.failures, err)
		return
	}
	if serr := sleep(t.ctx, t.c.backoff(t.failures)); serr != nil {
		t.err = err
	}
}

// current returns the open connection, waiting up to terminalSilence for the reader to make one.
func (t *Terminal) current(ctx context.Context) (*websocket.Conn, error) {
	timer := time.NewTimer(terminalSilence)
	defer timer.Stop()
	for {
		t.mu.Lock()
		conn, closed, changed := t.conn, t.closed, t.changed
		t.mu.Unlock()
		switch {
		case closed:
			return nil, errors.New("terminal closed")
		case conn != nil:
			return conn, nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return nil, fmt.Errorf("terminal of process %d: no connection: %w", t.pid, sandbox.ErrProviderUnavailable)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// send writes one frame, once more on the next connection when the first fails.
func (t *Terminal) send(ctx context.Context, typ websocket.MessageType, b []byte) error {
	var err error
	for range 2 {
		var conn *websocket.Conn
		if conn, err = t.current(ctx); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, terminalSilence)
		err = conn.Write(wctx, typ, b)
		cancel()
		if err == nil {
			return nil
		}
		t.drop(conn)
	}
	return err
}

// terminalWrite bounds one binary frame: the daemon closes an attach on a frame past 64 KiB.
const terminalWrite = 32 << 10

// Write types p on the terminal.
func (t *Terminal) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), terminalWrite)
		if err := t.send(t.ctx, websocket.MessageBinary, p[:k]); err != nil {
			return n, err
		}
		n, p = n+k, p[k:]
	}
	return n, nil
}

// Resize sets the terminal's size.
func (t *Terminal) Resize(ctx context.Context, size sandbox.TerminalSize) error {
	b, _ := json.Marshal(map[string]any{"type": "resize", "rows": size.Rows, "cols": size.Cols})
	return t.send(ctx, websocket.MessageText, b)
}

// Signal sends a signal (one of sandbox.ProcessSignals, with or without "SIG") to the process's group.
func (t *Terminal) Signal(ctx context.Context, signal string) error {
	b, _ := json.Marshal(map[string]any{"type": "signal", "signal": signal})
	return t.send(ctx, websocket.MessageText, b)
}

// Close closes the attach; the process goes on.
func (t *Terminal) Close() error {
	t.mu.Lock()
	conn := t.conn
	t.closed, t.conn = true, nil
	t.mu.Unlock()
	if conn != nil {
		conn.Close(websocket.StatusNormalClosure, "")
	}
	return nil
}
