// Package protocol is the wire protocol between the daemon and the agent inside each sandbox: its
// routes and headers, the bodies both sides send, their bounds, and the protocol's version. Both the
// agent (package agent, PID 1 of every sandbox) and its client (package agentclient, in the daemon)
// build on it; it holds the code of neither side.
//
// Main invariant: a change an agent of the version before cannot follow raises Version, and the
// client refuses an agent of another version at its health answer.
package protocol

import (
	"errors"
	"time"

	"github.com/sandboxd/sandbox"
)

// The agent's HTTP routes. Every request carries an absolute deadline in HeaderDeadline (Unix
// nanoseconds): the agent refuses to start work past it, so a request that sat in the socket's queue
// while the sandbox was paused cannot run after the caller gave up.
const (
	PathHealth = "/v1/healthz"
	PathExec   = "/v1/exec"
	PathCancel = "/v1/cancel"
	PathFile   = "/v1/file" // GET reads, PUT writes; the path is the "path" query parameter
	PathList   = "/v1/list" // GET lists one directory; the path is the "path" query parameter

	HeaderDeadline = "Sandbox-Deadline"
)

// Version is the version of this wire protocol: the routes, headers and bodies of this package, and
// the compact exec answer of internal/agentwire. An agent says which it speaks in its health answer,
// and the client refuses another (ErrMismatch). An answer that names none is of protocol 1, the one
// before the field, which an oci sandbox started by an older daemon still speaks after an upgrade.
// Raise it with a change an agent of the version before cannot follow.
const Version = 2

// ErrMismatch: the agent speaks another version of the protocol than this daemon (an agent image, or
// a sandbox's agent, of another build). The client's Health wraps it with ErrProviderProtocol.
var ErrMismatch = errors.New("the agent speaks another protocol version than this daemon")

// Health is the answer to PathHealth.
type Health struct {
	OK       bool   `json:"ok"`
	Protocol int    `json:"protocol,omitempty"` // Version; none: 1
	Version  string `json:"version"`            // the agent's build (internal/version)
	PID      int    `json:"pid"`
}

// ExecRequest asks the agent to run one command. ID names the run for PathCancel.
type ExecRequest struct {
	ID             string            `json:"id"`
	Argv           []string          `json:"argv"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	TimeoutMs      int64             `json:"timeoutMs"`
	MaxOutputBytes int               `json:"maxOutputBytes"`
}

// NewExecRequest is the request of the run named id of cmd, a normalised command: the one mapping of
// the domain's command to the wire, which Command reverses.
func NewExecRequest(id string, cmd sandbox.Command) ExecRequest {
	return ExecRequest{
		ID:             id,
		Argv:           cmd.Argv,
		Cwd:            cmd.Cwd,
		Env:            cmd.Env,
		TimeoutMs:      max(cmd.Timeout.Milliseconds(), 1),
		MaxOutputBytes: cmd.MaxOutputBytes,
	}
}

// Command is the domain command req carries: the one mapping of the wire request to the domain's
// command, which the agent runs and the client checks the answer against.
func (req ExecRequest) Command() sandbox.Command {
	return sandbox.Command{
		Argv:           req.Argv,
		Cwd:            req.Cwd,
		Env:            req.Env,
		Timeout:        time.Duration(req.TimeoutMs) * time.Millisecond,
		MaxOutputBytes: req.MaxOutputBytes,
	}
}

// ExecStatus is how a command ended, its output aside. ExitCode is nil when it timed out or was
// cancelled.
type ExecStatus struct {
	ExitCode   *int      `json:"exitCode"`
	TimedOut   bool      `json:"timedOut"`
	Cancelled  bool      `json:"cancelled"`
	Truncated  bool      `json:"truncated"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
}

// ExecOutput is how a command ended, with its output: what the agent's runner made, and what the
// client read from either form of the answer: ExecResult in JSON, or the compact form of
// internal/agentwire, which a client that asks for it gets.
type ExecOutput struct {
	ExecStatus
	Stdout, Stderr string
}

// Result is o as the domain's result, its times in UTC.
func (o ExecOutput) Result() sandbox.CommandResult {
	return sandbox.CommandResult{
		ExitCode:   o.ExitCode,
		Stdout:     o.Stdout,
		Stderr:     o.Stderr,
		TimedOut:   o.TimedOut,
		Cancelled:  o.Cancelled,
		Truncated:  o.Truncated,
		StartedAt:  o.StartedAt.UTC(),
		FinishedAt: o.FinishedAt.UTC(),
	}
}

// ExecResult is how a command ended, with its output, as JSON. Output travels as bytes (base64 in JSON) so
// that invalid UTF-8 keeps its length.
type ExecResult struct {
	ExecStatus
	Stdout []byte `json:"stdout"`
	Stderr []byte `json:"stderr"`
}

// CancelRequest asks the agent to stop the run named ID. Cancelling an unknown run is not an error.
type CancelRequest struct {
	ID string `json:"id"`
}

// Error is the body of every answer with a status other than 2xx. Code is one of the wire codes of the
// sandbox package (not_found, invalid_request, ...), or CodeDeadline.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// CodeDeadline says the request arrived past its deadline and nothing was done.
const CodeDeadline = "deadline_exceeded"

// MaxExecRequestBytes bounds an exec or cancel request body.
const MaxExecRequestBytes = 1 << 20

// Bounds of a listing, which the agent refuses past (ErrInvalidRequest) and the client refuses in an
// answer: at most MaxListEntries entries, at most MaxListBytes of JSON. Both keep a listing well within
// what the API answers in one response.
const (
	MaxListEntries = 10000
	MaxListBytes   = 16 << 20
)
