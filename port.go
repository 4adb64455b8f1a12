package sandbox

import (
	"context"
	"fmt"
	"net"
	"strconv"
)

// ParsePort reads a TCP port as the API, the preview router and sbx take it: plain decimal from 1 to
// 65535, no sign, no leading zero, no space. One spelling per port keeps a token for port 80 from
// being replayed as "080", and a cache or a log from seeing two names of one port.
//
// Errors: ErrInvalidRequest.
func ParsePort(s string) (int, error) {
	ok := len(s) >= 1 && len(s) <= 5 && s[0] >= '1' && s[0] <= '9'
	for i := 1; ok && i < len(s); i++ {
		ok = s[i] >= '0' && s[i] <= '9'
	}
	if ok {
		if n, err := strconv.Atoi(s); err == nil && n <= 65535 {
			return n, nil
		}
	}
	return 0, fmt.Errorf("port %s: a port is a decimal number from 1 to 65535 without a sign or a leading zero: %w",
		strconv.Quote(clipPort(s)), ErrInvalidRequest)
}

func clipPort(s string) string {
	if len(s) > 16 {
		return s[:16] + "..."
	}
	return s
}

// PortDialer is a provider that connects to a TCP port on a sandbox's own loopback
// (capability portForwarding), whatever its egress policy: the connection is made from inside the
// sandbox, not through a network path the policy governs.
type PortDialer interface {
	// DialPort connects to 127.0.0.1:port inside ref. Errors: ErrNotFound, ErrInvalidState (paused),
	// ErrPortUnreachable (nothing listens there, or it does not accept in time),
	// ErrProviderUnavailable, ErrProviderProtocol.
	DialPort(ctx context.Context, ref Ref, port int) (net.Conn, error)
}
