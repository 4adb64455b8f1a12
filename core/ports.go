package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sandboxd/sandbox"
)

// portDialTimeout bounds the connect to a sandbox's port, the provider's handshake included.
const portDialTimeout = 15 * time.Second

// PortTarget returns the current generation of sandbox id when its ports can be reached now (the
// checks of a data-plane call, on whatever generation is current: a port is reached by URL, with no
// generation to fence on; a caller that must not cross a recreate compares the answer's), and when
// the sandbox's record last changed (its state, or what the provider says of it): a connection made
// to one of its ports before that time may lead to a process the sandbox no longer has (paused,
// resumed, recreated) and is not to be reused. One read of the store.
//
// Errors: ErrNotFound, ErrUnsupportedCapability, ErrInvalidState.
func (r *Runtime) PortTarget(ctx context.Context, id sandbox.ID) (sandbox.Ref, time.Time, error) {
	sb, err := r.store.Get(ctx, id)
	if err != nil {
		return sandbox.Ref{}, time.Time{}, err
	}
	if sb, err = r.dataPlaneOf(ctx, sb, sb.Generation, "reach a port", sandbox.CapPortForwarding); err != nil {
		return sandbox.Ref{}, time.Time{}, err
	}
	return sb.Ref(), sb.UpdatedAt, nil
}

// DialPort connects to 127.0.0.1:port inside ref, a generation PortTarget returned. The connection is
// the caller's to close; the call is bounded by ctx and portDialTimeout, the connection by neither.
//
// Errors: ErrNotFound, ErrUnsupportedCapability, ErrInvalidState, ErrPortUnreachable,
// ErrProviderUnavailable, ErrProviderProtocol.
func (r *Runtime) DialPort(ctx context.Context, ref sandbox.Ref, port int) (conn net.Conn, err error) {
	pd, ok := r.prov.(sandbox.PortDialer)
	if !ok {
		return nil, fmt.Errorf("provider cannot reach a sandbox's ports: %w", sandbox.ErrUnsupportedCapability)
	}
	ctx, cancel := context.WithTimeout(ctx, portDialTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("provider panicked", "op", "dial a port", "panic", p)
			conn, err = nil, fmt.Errorf("provider dial a port panicked: %w", sandbox.ErrProviderUnavailable)
		}
	}()
	conn, err = pd.DialPort(ctx, ref, port)
	switch {
	case err == nil:
		return conn, nil
	case sandbox.ClassOf(err).Err == nil:
		err = fmt.Errorf("provider dial a port: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	if errors.Is(err, sandbox.ErrProviderUnavailable) || errors.Is(err, sandbox.ErrProviderProtocol) {
		r.providerTrouble(ref, err)
	}
	return nil, err
}
