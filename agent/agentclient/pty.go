package agentclient

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/internal/agenthttp"
)

var _ sandbox.TerminalManager = DataPlane{}

// Resize sets the size of a pty process's terminal (protocol.PathProcessResize). An agent without the
// route answers a bare 404, a protocol error.
func (c *Client) Resize(ctx context.Context, pid int, size sandbox.TerminalSize) error {
	body, _ := json.Marshal(protocol.ProcessResize{PID: pid, Rows: size.Rows, Cols: size.Cols})
	return c.call(ctx, http.MethodPost, protocol.PathProcessResize, nil, "", body, agenthttp.MaxErrorBytes, nil)
}

// ResizeProcess sets the size of a process's terminal.
func (d DataPlane) ResizeProcess(ctx context.Context, ref sandbox.Ref, pid int, size sandbox.TerminalSize) error {
	return d.withAgent(ctx, ref, "resize process", 0, func(ctx context.Context, c *Client) error { return c.Resize(ctx, pid, size) })
}
