// Package agentclient is the daemon's side of the agent's wire protocol (agent/protocol): the client
// of one sandbox's agent (over internal/agenthttp), and DataPlane, which makes a provider's commands
// and file calls through the agent of each sandbox. It runs in the daemon; nothing of the agent's server
// (processes, the confined root) is in it.
//
// Main invariant: the client trusts nothing the agent says. Every answer is bounded before it is read
// and checked before it is returned, and every call ends by its context's deadline.
package agentclient

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/internal/agenthttp"
	"github.com/sandboxd/sandbox/internal/agentwire"
)

// Client talks to one agent. It trusts nothing the agent says: every answer is bounded by what its call
// can legitimately get before it is read, and validated; every call is bounded by its context's
// deadline (a paused sandbox accepts connections and never answers). A transport failure or a timeout
// is sandbox.ErrProviderUnavailable; a malformed answer, or one past its bound, is
// sandbox.ErrProviderProtocol; the agent's own not_found and invalid_request keep their class.
type Client struct {
	t    transport
	wire Wire

	dial    func(ctx context.Context) (net.Conn, error) // connections of its own: the streamed files' transport, port relays (ports.go)
	streams streamClient                                // the streamed file calls' own transport (files.go)
}

// transport sends one request to the agent and returns the head of its answer: agenthttp's Transport,
// or its Plain.
type transport interface {
	RoundTrip(ctx context.Context, method, target, accept string, deadline time.Time, body []byte, max int64) (*agenthttp.Answer, error)
	CloseIdle()
}

// Wire says which of the client's two fast paths it takes, or the plain path in its place
// (docs/design/agenthttp.md, docs/design/agentwire.md). The zero Wire takes both fast paths.
type Wire struct {
	PlainTransport bool // net/http's Transport (agenthttp.Plain) instead of agenthttp's own
	PlainExec      bool // exec answers in JSON, decoded by encoding/json, instead of agentwire's form
}

// WireEnv is the environment variable that turns the fast paths back to the plain ones, read once
// when the process starts (DefaultWire): a comma-separated list of "transport" and "exec". The
// conformance suites run on the plain paths with it set, as the daemon does.
const WireEnv = "SANDBOXD_AGENT_PLAIN"

// DefaultWire is the Wire of New: what WireEnv said when the process started. A value ParseWire
// refuses counts as empty here; the daemon refuses to start with it.
var DefaultWire, _ = ParseWire(os.Getenv(WireEnv))

// ParseWire reads a value of WireEnv.
func ParseWire(s string) (Wire, error) {
	var w Wire
	for _, f := range strings.Split(s, ",") {
		switch f = strings.TrimSpace(f); f {
		case "":
		case "transport":
			w.PlainTransport = true
		case "exec":
			w.PlainExec = true
		default:
			return Wire{}, fmt.Errorf("%s: %q is neither transport nor exec", WireEnv, f)
		}
	}
	return w, nil
}

// Bounds of the agent's answers, beside those of their heads (agenthttp): each is what the call can
// legitimately get, so that an agent cannot make the daemon read or hold more.
const (
	maxHealthBytes = 4 << 10
	// What a JSON exec answer has besides its output, as much as a compact one's head line.
	maxExecHeadBytes = agentwire.MaxHeadBytes
)

// execAnswerBytes bounds the answer to an exec whose streams are capped at m bytes each: both in
// base64 in JSON, and the rest of the result. A compact answer, both as they are after its head line,
// is bounded tighter (readExec).
func execAnswerBytes(m int) int64 { return 2*int64((m+2)/3*4) + maxExecHeadBytes }

// defaultCallTimeout bounds a call whose context has no deadline.
const defaultCallTimeout = 30 * time.Second

// New returns a client whose connections come from dial, kept alive between calls.
func New(dial func(ctx context.Context) (net.Conn, error)) *Client {
	return NewWire(dial, DefaultWire)
}

// NewWire is New on the paths w says.
func NewWire(dial func(ctx context.Context) (net.Conn, error), w Wire) *Client {
	if w.PlainTransport {
		return &Client{t: agenthttp.NewPlain(dial), wire: w, dial: dial}
	}
	return &Client{t: agenthttp.New(dial), wire: w, dial: dial}
}

// NewUnix returns a client of the agent listening on the unix socket at path.
func NewUnix(path string) *Client {
	var d net.Dialer
	return New(func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", path) })
}

// Close drops the idle connections.
func (c *Client) Close() {
	c.t.CloseIdle()
	c.streams.closeIdle()
}

// Health asks the agent whether it answers.
func (c *Client) Health(ctx context.Context) (protocol.Health, error) {
	var h protocol.Health
	if err := c.callJSON(ctx, http.MethodGet, protocol.PathHealth, nil, nil, maxHealthBytes, &h); err != nil {
		return protocol.Health{}, err
	}
	if !h.OK {
		return protocol.Health{}, fmt.Errorf("agent health: not ok: %w", sandbox.ErrProviderProtocol)
	}
	if v := cmp.Or(h.Protocol, 1); v != protocol.Version {
		return protocol.Health{}, fmt.Errorf("agent health: the agent (build %q) speaks protocol %d, this daemon %d: %w: %w",
			h.Version, v, protocol.Version, protocol.ErrMismatch, sandbox.ErrProviderProtocol)
	}
	return h, nil
}

// Exec runs req and checks the answer against it (sandbox.CommandResult.Validate): the client refuses a
// malformed answer on its socket. The answer is bounded by req.MaxOutputBytes.
func (c *Client) Exec(ctx context.Context, req protocol.ExecRequest) (protocol.ExecOutput, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return protocol.ExecOutput{}, fmt.Errorf("agent exec: %w", err)
	}
	m := min(max(req.MaxOutputBytes, 0), sandbox.MaxMaxOutputBytes)
	var out protocol.ExecOutput
	accept := agentwire.MediaType
	if c.wire.PlainExec {
		accept = "" // the agent answers ExecResult in JSON
	}
	err = c.call(ctx, http.MethodPost, protocol.PathExec, nil, accept, body, execAnswerBytes(m), func(a *agenthttp.Answer) error {
		o, err := readExec(a, m)
		if err != nil {
			return err
		}
		out = o
		return out.Result().Validate(req.Command())
	})
	if err != nil {
		return protocol.ExecOutput{}, err
	}
	return out, nil
}

// readExec reads an exec answer, compact (agentwire) or JSON, whose streams are capped at m bytes
// each. A compact answer is read into one string, which stdout and stderr are cut from.
func readExec(a *agenthttp.Answer, m int) (protocol.ExecOutput, error) {
	if a.ContentType != agentwire.MediaType {
		raw, err := readAll(a)
		if err != nil {
			return protocol.ExecOutput{}, fmt.Errorf("agent %s: %w", protocol.PathExec, err)
		}
		var res protocol.ExecResult
		if err := decodeStrict(protocol.PathExec, raw, &res); err != nil {
			return protocol.ExecOutput{}, err
		}
		return protocol.ExecOutput{ExecStatus: res.ExecStatus, Stdout: string(res.Stdout), Stderr: string(res.Stderr)}, nil
	}
	// Refused before it is read.
	if limit := agentwire.MaxBytes(m); a.Length > limit {
		return protocol.ExecOutput{}, fmt.Errorf("agent %s: %w", protocol.PathExec, badAnswer("%d bytes past %d", a.Length, limit))
	}
	raw, err := readString(a)
	if err == nil {
		var out protocol.ExecOutput
		if out, err = agentwire.Decode(raw, m); err == nil {
			return out, nil
		}
	}
	return protocol.ExecOutput{}, fmt.Errorf("agent %s: %w", protocol.PathExec, err)
}

// Cancel stops the run named id, if it is still running.
func (c *Client) Cancel(ctx context.Context, id string) error {
	body, _ := json.Marshal(protocol.CancelRequest{ID: id})
	return c.call(ctx, http.MethodPost, protocol.PathCancel, nil, "", body, agenthttp.MaxErrorBytes, nil)
}

// ReadFile reads the file at path inside the sandbox.
func (c *Client) ReadFile(ctx context.Context, path string) ([]byte, error) {
	var data []byte
	err := c.call(ctx, http.MethodGet, protocol.PathFile, url.Values{"path": {path}}, "", nil, sandbox.MaxFileBytes, func(a *agenthttp.Answer) (err error) {
		if data, err = readAll(a); err != nil {
			return fmt.Errorf("agent read %q: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return data, nil
}

// WriteFile replaces the file at path inside the sandbox with data.
func (c *Client) WriteFile(ctx context.Context, path string, data []byte) error {
	if len(data) > sandbox.MaxFileBytes {
		return fmt.Errorf("write %q: %d bytes past %d: %w", path, len(data), sandbox.MaxFileBytes, sandbox.ErrRequestTooLarge)
	}
	return c.call(ctx, http.MethodPut, protocol.PathFile, url.Values{"path": {path}}, "", data, agenthttp.MaxErrorBytes, nil)
}

// List lists the directory at path inside the sandbox: at most protocol.MaxListEntries entries, in an
// answer of at most protocol.MaxListBytes.
func (c *Client) List(ctx context.Context, path string) ([]sandbox.FileEntry, error) {
	var entries []sandbox.FileEntry
	err := c.call(ctx, http.MethodGet, protocol.PathList, url.Values{"path": {path}}, "", nil, protocol.MaxListBytes, func(a *agenthttp.Answer) error {
		raw, err := readAll(a)
		if err == nil {
			entries, err = decodeList(raw)
		}
		if err != nil {
			return fmt.Errorf("agent list %q: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return entries, nil
}

// decodeList decodes a listing, entry by entry: past protocol.MaxListEntries it stops.
func decodeList(raw []byte) ([]sandbox.FileEntry, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, badAnswer("not an array of entries")
	}
	entries := []sandbox.FileEntry{}
	for dec.More() {
		if len(entries) == protocol.MaxListEntries {
			return nil, badAnswer("more than %d entries", protocol.MaxListEntries)
		}
		var e sandbox.FileEntry
		if err := dec.Decode(&e); err != nil {
			return nil, badAnswer("entry %d: %v", len(entries), err)
		}
		if e.Path == "" || e.Size < 0 || (e.Kind != sandbox.KindFile && e.Kind != sandbox.KindDirectory) {
			return nil, badAnswer("entry %d: path %.64q, kind %.16q, size %d", len(entries), e.Path, e.Kind, e.Size)
		}
		entries = append(entries, e)
	}
	if _, err := dec.Token(); err != nil {
		return nil, badAnswer("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badAnswer("trailing data")
	}
	return entries, nil
}

// call makes one call, bounded by ctx's deadline or defaultCallTimeout: it sends the request, turns an
// answer other than 2xx into its error (do), and hands a 2xx one, of at most max bytes, to read, or
// discards its body when read is nil. The connection serves the next call only when read accepted the
// answer (see answer.release).
func (c *Client) call(ctx context.Context, method, path string, q url.Values, accept string, body []byte, max int64, read func(a *agenthttp.Answer) error) (err error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	a, err := c.do(ctx, method, path, q, accept, body, max)
	if err != nil {
		return err
	}
	defer func() { a.Release(err) }()
	if read == nil {
		if _, err := io.Copy(io.Discard, a); err != nil {
			return fmt.Errorf("agent %s: reading the answer: %v: %w", path, err, sandbox.ErrProviderUnavailable)
		}
		return nil
	}
	return read(a)
}

func (c *Client) callJSON(ctx context.Context, method, path string, q url.Values, body []byte, max int64, out any) error {
	return c.call(ctx, method, path, q, "", body, max, func(a *agenthttp.Answer) error {
		raw, err := readAll(a)
		if err != nil {
			return fmt.Errorf("agent %s: %w", path, err)
		}
		return decodeStrict(path, raw, out)
	})
}

// decodeStrict decodes the JSON document raw, an answer to path, into out: unknown fields and
// trailing data are protocol errors.
func decodeStrict(path string, raw []byte, out any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("agent %s: answer: %v: %w", path, err, sandbox.ErrProviderProtocol)
	}
	if dec.More() {
		return fmt.Errorf("agent %s: answer has trailing data: %w", path, sandbox.ErrProviderProtocol)
	}
	return nil
}

// do sends one request with the context's deadline in protocol.HeaderDeadline, for an answer of at
// most max bytes, and turns a non-2xx answer into an error of the right class. The caller releases a
// 2xx answer.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, accept string, body []byte, max int64) (*agenthttp.Answer, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return nil, fmt.Errorf("agent %s: call without a deadline", path)
	}
	target := path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	a, err := c.t.RoundTrip(ctx, method, target, accept, deadline, body, max)
	if errors.Is(err, sandbox.ErrProviderProtocol) {
		return nil, fmt.Errorf("agent %s: %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("agent %s: %v: %w", path, err, sandbox.ErrProviderUnavailable)
	}
	if a.Status/100 == 2 {
		return a, nil
	}
	err = agentError(path, a)
	a.Release(err)
	return nil, err
}

// agentError is the error an answer other than 2xx stands for: the agent's not_found, invalid_request,
// request_too_large and invalid_state keep their class.
func agentError(path string, a *agenthttp.Answer) error {
	raw, err := readAll(a)
	if err != nil {
		return fmt.Errorf("agent %s: status %d: %w", path, a.Status, err)
	}
	var e protocol.Error
	if err := json.Unmarshal(raw, &e); err != nil || e.Code == "" {
		return fmt.Errorf("agent %s: status %d with a malformed error: %w", path, a.Status, sandbox.ErrProviderProtocol)
	}
	msg := e.Message
	if len(msg) > 512 {
		msg = sandbox.TruncateUTF8(msg, 512)
	}
	switch e.Code {
	case string(sandbox.CodeNotFound), string(sandbox.CodeInvalidRequest), string(sandbox.CodeRequestTooLarge), string(sandbox.CodeInvalidState):
		return fmt.Errorf("agent %s: %s: %w", path, msg, sandbox.ErrorForCode(sandbox.ErrorCode(e.Code)))
	case protocol.CodeDeadline, string(sandbox.CodeInternal), string(sandbox.CodeProviderUnavailable):
		return fmt.Errorf("agent %s: %s: %w", path, msg, sandbox.ErrProviderUnavailable)
	}
	return fmt.Errorf("agent %s: unexpected error code %q: %w", path, e.Code, sandbox.ErrProviderProtocol)
}

// bounded gives ctx the default timeout when it has no deadline of its own.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, defaultCallTimeout)
}

// readAll reads an answer's body, whose length the transport checked against the call's bound: it is
// allocated once. A broken stream is unavailability.
func readAll(a *agenthttp.Answer) ([]byte, error) {
	data := make([]byte, a.Length)
	if _, err := io.ReadFull(a, data); err != nil {
		return nil, fmt.Errorf("reading the answer: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	return data, nil
}

// copyBufs are readString's read buffers, reused across answers.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// readString is readAll into a string, read without a copy.
func readString(a *agenthttp.Answer) (string, error) {
	var b strings.Builder
	b.Grow(int(a.Length))
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	if _, err := io.CopyBuffer(&b, a, *buf); err != nil {
		return "", fmt.Errorf("reading the answer: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	return b.String(), nil
}

func badAnswer(format string, args ...any) error {
	return fmt.Errorf("answer: "+format+": %w", append(args, sandbox.ErrProviderProtocol)...)
}
