package agentclient

import (
	"net"
	"syscall"
)

// setSendBuffer sets conn's send buffer to n bytes: past net.core.wmem_max where the process may
// (SO_SNDBUFFORCE, CAP_NET_ADMIN), else up to it. A connection without a descriptor keeps its own.
func setSendBuffer(conn net.Conn, n int) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, n) != nil {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, n)
		}
	})
}
