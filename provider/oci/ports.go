package oci

import (
	"context"
	"fmt"
	"net"

	"github.com/sandboxd/sandbox"
)

var _ sandbox.PortDialer = (*Provider)(nil)

// DialPort connects to 127.0.0.1:port inside ref through its agent, which runs in the sandbox's
// network namespace: no link and no egress rule is needed, and a sandbox on loopback only is reached
// as well. Errors: those of usable, and of agentclient's DialPort.
func (p *Provider) DialPort(ctx context.Context, ref sandbox.Ref, port int) (net.Conn, error) {
	b, err := p.usable(ctx, ref)
	if err != nil {
		return nil, err
	}
	conn, err := b.client.DialPort(ctx, port)
	if err != nil {
		return nil, fmt.Errorf("port %d of %s: %w", port, ref, err)
	}
	return conn, nil
}
