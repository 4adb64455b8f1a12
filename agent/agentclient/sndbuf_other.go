//go:build !linux

package agentclient

import "net"

// setSendBuffer sets conn's send buffer to n bytes where the connection has one to set.
func setSendBuffer(conn net.Conn, n int) {
	if c, ok := conn.(interface{ SetWriteBuffer(int) error }); ok {
		_ = c.SetWriteBuffer(n)
	}
}
