package client

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"

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

// Metrics returns the daemon's metrics (GET /metrics) in the Prometheus text exposition format
// (version 0.0.4): requests by operation and status (sandboxd_http_*), provider operations, sandboxes
// by state, the event log, the warm pool, the process. It needs the token when the daemon has tokens.
// Errors: ErrUnauthenticated, ErrNotFound (a daemon that serves no metrics).
func (c *Client) Metrics(ctx context.Context) (string, error) {
	k := call{method: "GET", path: "/metrics", safe: true, header: http.Header{"Accept": {"text/plain"}}}
	resp, err := c.send(ctx, k)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/plain" {
		return "", fmt.Errorf("GET /metrics: an answer of type %q, want text/plain: %w", resp.Header.Get("Content-Type"), sandbox.ErrProviderProtocol)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("GET /metrics: %w", err)
	}
	return string(body), nil
}
