package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/internal/agenthttp"
)

// Suspend has the agent let go of its socket before a checkpoint (protocol.PathSuspend); it binds
// socket, a name beside its first, once it gets SIGUSR2. The client's idle connections are closed: the
// next call dials the socket anew. Errors: ErrProviderProtocol from an agent without the route.
func (c *Client) Suspend(ctx context.Context, socket string) error {
	body, _ := json.Marshal(protocol.SuspendRequest{Socket: socket})
	err := c.call(ctx, http.MethodPost, protocol.PathSuspend, nil, "", body, agenthttp.MaxErrorBytes, nil)
	c.Close()
	if errors.Is(err, sandbox.ErrNotFound) {
		return fmt.Errorf("the agent cannot suspend (an agent of an older build): %v: %w", err, sandbox.ErrProviderProtocol)
	}
	return err
}
