package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// dialPort: GET protocol.PathPort?port=N, upgraded to the raw bytes of a connection to 127.0.0.1:N
// inside the sandbox. The agent is in the sandbox's network namespace, so the connection needs no
// link to the host and no egress rule.
func (a *Agent) dialPort(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	port, err := sandbox.ParsePort(r.URL.Query().Get("port"))
	if err != nil {
		writeErr(w, err)
		return
	}
	if r.Header.Get("Upgrade") != protocol.UpgradeTCP {
		writeErr(w, fmt.Errorf("a port relay needs Upgrade: %s: %w", protocol.UpgradeTCP, sandbox.ErrInvalidRequest))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), protocol.DialPortTimeout)
	defer cancel()
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		writeJSON(w, http.StatusBadGateway, protocol.Error{Code: protocol.CodePortUnreachable,
			Message: fmt.Sprintf("connect to port %d in the sandbox: %v", port, err)})
		return
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		writeErr(w, fmt.Errorf("take over the connection: %w", err))
		return
	}
	// The server's header deadline is the request's; the relay lives as long as its two ends.
	_ = conn.SetDeadline(time.Time{})
	_, err = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+protocol.UpgradeTCP+"\r\n\r\n")
	if err == nil && buf.Reader.Buffered() > 0 {
		// Bytes the client sent behind its request are the connection's first.
		var early []byte
		early, err = buf.Reader.Peek(buf.Reader.Buffered())
		if err == nil {
			_, err = up.Write(early)
		}
	}
	if err != nil {
		conn.Close()
		up.Close()
		return
	}
	splice(conn, up)
}

// splice copies a to b and b to a until both directions end, passing on each end of input as a
// half-close, then closes both. A write that fails ends both directions.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	pass := func(dst, src net.Conn) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
			if cw.CloseWrite() == nil {
				return
			}
		}
		dst.Close()
		src.Close()
	}
	go pass(a, b)
	go pass(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}
