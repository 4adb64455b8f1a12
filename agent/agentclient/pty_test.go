package agentclient_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
)

// TestClientResizeAnswers: an agent without the resize route (an older build) answers the mux's bare
// 404, a protocol error rather than a missing process; the agent's own errors keep their classes.
func TestClientResizeAnswers(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		answer := func(status int, ct, body string) func(io.Writer, *http.Request) error {
			return func(w io.Writer, _ *http.Request) error {
				_, err := fmt.Fprintf(w, "HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", status, ct, len(body), body)
				return err
			}
		}
		resize := func(ctx context.Context, c *agentclient.Client) error {
			return c.Resize(ctx, 7, sandbox.TerminalSize{Rows: 24, Cols: 80})
		}
		runBounds(t, wire, []boundCase{
			{"resized", answer(204, "text/plain", ""), resize, nil},
			{"no such route", answer(404, "text/plain; charset=utf-8", "404 page not found\n"), resize, sandbox.ErrProviderProtocol},
			{"no such process", answer(404, "application/json", `{"code":"not_found","message":"no process 7"}`), resize, sandbox.ErrNotFound},
			{"no terminal", answer(409, "application/json", `{"code":"invalid_state","message":"no terminal"}`), resize, sandbox.ErrInvalidState},
		}, 1<<20)
	})
}
