package agentclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// maxPortAnswerBytes bounds the agent's answer to a port relay before its bytes begin: a head, or an
// error.
const maxPortAnswerBytes = 8 << 10

// DialPort connects to 127.0.0.1:port inside the sandbox through its agent, on a socket of its own:
// what the returned connection carries are the TCP connection's bytes. The handshake is bounded by
// ctx (or the default call timeout); the connection, once made, by nothing but its two ends.
//
// Errors: ErrPortUnreachable (nothing listens on the port), ErrInvalidRequest (the agent refused the
// port), ErrProviderUnavailable (the agent unreachable or silent), ErrProviderProtocol (an agent
// without the relay, or a malformed answer).
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("agent port relay: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	pc, err := handshake(conn, port, deadline)
	if !stop() && err == nil {
		err = fmt.Errorf("agent port relay: %v: %w", ctx.Err(), sandbox.ErrProviderUnavailable)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return pc, nil
}

// handshake asks the agent for the relay on conn and reads its answer.
func handshake(conn net.Conn, port int, deadline time.Time) (net.Conn, error) {
	br, err := upgrade(conn, "port relay", protocol.PathPort+"?port="+strconv.Itoa(port), protocol.UpgradeTCP, deadline,
		func(code, msg string) error {
			if code == protocol.CodePortUnreachable {
				return fmt.Errorf("%s: %w", msg, sandbox.ErrPortUnreachable)
			}
			return nil
		})
	if errors.Is(err, errNoRoute) {
		return nil, fmt.Errorf("agent port relay: the sandbox's agent has no port relay (an agent of an earlier build): %w", sandbox.ErrProviderProtocol)
	}
	if err != nil {
		return nil, err
	}
	return &relayConn{Conn: conn, r: br}, nil
}

// errNoRoute: the agent answered a bare 404, an agent of a build without the route.
var errNoRoute = errors.New("the agent has no such route")

// upgrade asks the agent on conn to switch target's connection to protocol proto, and returns the
// reader of what follows the switch (which may hold the connection's first bytes). An error answer's
// code goes through codeErr first (nil: the common mapping). Errors: errNoRoute, ErrInvalidRequest,
// ErrNotFound, ErrInvalidState, ErrProviderUnavailable, ErrProviderProtocol.
func upgrade(conn net.Conn, what, target, proto string, deadline time.Time, codeErr func(code, msg string) error) (*bufio.Reader, error) {
	req := "GET " + target + " HTTP/1.1\r\nHost: agent\r\n" +
		"Connection: Upgrade\r\nUpgrade: " + proto + "\r\n" +
		protocol.HeaderDeadline + ": " + strconv.FormatInt(deadline.UnixNano(), 10) + "\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, fmt.Errorf("agent %s: %v: %w", what, err, sandbox.ErrProviderUnavailable)
	}
	lr := &io.LimitedReader{R: conn, N: maxPortAnswerBytes}
	br := bufio.NewReaderSize(lr, 4<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		if lr.N <= 0 {
			return nil, fmt.Errorf("agent %s: an answer past %d bytes: %w", what, maxPortAnswerBytes, sandbox.ErrProviderProtocol)
		}
		return nil, fmt.Errorf("agent %s: %v: %w", what, err, sandbox.ErrProviderUnavailable)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if resp.Header.Get("Upgrade") != proto {
			return nil, fmt.Errorf("agent %s: switched to %q: %w", what, resp.Header.Get("Upgrade"), sandbox.ErrProviderProtocol)
		}
		lr.N = math.MaxInt64
		return br, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound && resp.Header.Get("Content-Type") != "application/json" {
		return nil, errNoRoute
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("agent %s: status %d: %v: %w", what, resp.StatusCode, err, sandbox.ErrProviderUnavailable)
	}
	var e protocol.Error
	if err := json.Unmarshal(raw, &e); err != nil || e.Code == "" {
		return nil, fmt.Errorf("agent %s: status %d with a malformed error: %w", what, resp.StatusCode, sandbox.ErrProviderProtocol)
	}
	msg := sandbox.TruncateUTF8(e.Message, 512)
	if err := codeErr(e.Code, msg); err != nil {
		return nil, err
	}
	switch e.Code {
	case string(sandbox.CodeInvalidRequest), string(sandbox.CodeNotFound), string(sandbox.CodeInvalidState):
		return nil, fmt.Errorf("agent %s: %s: %w", what, msg, sandbox.ErrorForCode(sandbox.ErrorCode(e.Code)))
	case protocol.CodeDeadline, string(sandbox.CodeInternal), string(sandbox.CodeProviderUnavailable):
		return nil, fmt.Errorf("agent %s: %s: %w", what, msg, sandbox.ErrProviderUnavailable)
	}
	return nil, fmt.Errorf("agent %s: unexpected error code %q: %w", what, e.Code, sandbox.ErrProviderProtocol)
}

// relayConn is the agent's socket once switched: its reads come through the reader that read the
// answer, which may hold the connection's first bytes.
type relayConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *relayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite passes an end of input on to the port.
func (c *relayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
