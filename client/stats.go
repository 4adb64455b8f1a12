package client

import (
	"context"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// Stats returns what a ready or paused sandbox uses now: CPU time, memory, processes, disk and network bytes, as its
// provider reads them from the host (a figure it cannot read is nil). Errors: ErrNotFound,
// ErrInvalidState (not ready or paused), ErrUnsupportedCapability (the provider reads no usage).
func (c *Client) Stats(ctx context.Context, id sandbox.ID) (*api.SandboxStats, error) {
	var st api.SandboxStats
	if err := c.do(ctx, call{method: "GET", path: sandboxPath(id) + "/stats", safe: true}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}
