package client

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandbox"
)

// PortURL is the base URL of the proxy to 127.0.0.1:port inside sandbox id: a request to PortURL + path
// is passed on to path there, with the client's bearer token (which the proxy does not pass on).
func (c *Client) PortURL(id sandbox.ID, port int) string {
	u := *c.base
	u.Path = c.base.Path + portPath(id, port) + "/"
	return u.String()
}

func portPath(id sandbox.ID, port int) string {
	return sandboxPath(id) + "/ports/" + strconv.Itoa(port)
}

// PreviewToken is a token that opens one port of one sandbox generation through the preview listener.
type PreviewToken struct {
	URL        string             `json:"url"` // carries the token once, as a query parameter
	Token      string             `json:"token"`
	ExpiresAt  time.Time          `json:"expiresAt"`
	Port       int                `json:"port"`
	Generation sandbox.Generation `json:"generation"`
}

// PreviewToken makes a token for port of sandbox id that expires after ttl (zero: the daemon's default,
// an hour). Errors: ErrInvalidRequest, ErrNotFound, ErrInvalidState, ErrUnsupportedCapability (no
// preview listener, or a provider that cannot reach ports).
func (c *Client) PreviewToken(ctx context.Context, id sandbox.ID, port int, ttl time.Duration) (*PreviewToken, error) {
	body := map[string]any{}
	if ttl > 0 {
		body["ttlSeconds"] = int64((ttl + time.Second - 1) / time.Second)
	}
	var tok PreviewToken
	if err := c.do(ctx, call{method: "POST", path: portPath(id, port) + "/preview-tokens", body: body}, &tok); err != nil {
		return nil, err
	}
	return &tok, nil
}

// DialPort opens a TCP connection to 127.0.0.1:port inside sandbox id, carried over one WebSocket
// (GET .../ports/{port}/tcp). The dial is bounded by ctx; the connection is not, and its deadlines
// work as a net.Conn's. Errors: ErrInvalidRequest, ErrNotFound, ErrInvalidState,
// ErrUnsupportedCapability, ErrPortUnreachable (nothing listens on the port), ErrProviderUnavailable.
func (c *Client) DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error) {
	u := *c.base
	u.Path = c.base.Path + portPath(id, port) + "/tcp"
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	ws, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
		HTTPClient: c.hc, HTTPHeader: h, Subprotocols: []string{"sandboxd.tcp"},
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			if derr := decodeError(resp); derr != nil {
				return nil, derr
			}
		}
		return nil, fmt.Errorf("port %d of %s: %v: %w", port, id, err, sandbox.ErrProviderUnavailable)
	}
	if ws.Subprotocol() != "sandboxd.tcp" {
		ws.CloseNow()
		return nil, fmt.Errorf("port %d of %s: the server did not speak sandboxd.tcp: %w", port, id, sandbox.ErrProviderProtocol)
	}
	ws.SetReadLimit(1 << 20)
	return websocket.NetConn(context.Background(), ws, websocket.MessageBinary), nil
}
