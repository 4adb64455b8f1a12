package core

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandbox"
)

// Stats returns a ready or paused sandbox as it is now and what its provider reads of its usage. It
// needs no generation: it changes nothing, and the answer names the generation it read.
//
// Errors: ErrNotFound; ErrUnsupportedCapability when the provider cannot read usage; ErrInvalidState
// unless the sandbox is ready or paused; ErrProviderUnavailable.
func (r *Runtime) Stats(ctx context.Context, id sandbox.ID) (*sandbox.Sandbox, sandbox.Usage, error) {
	sb, err := r.store.Get(ctx, id)
	if err != nil {
		return nil, sandbox.Usage{}, err
	}
	ur, ok := r.prov.(sandbox.UsageReader)
	if !ok {
		return nil, sandbox.Usage{}, fmt.Errorf("provider %q cannot read a sandbox's usage: %w", r.cachedManifest().Name, sandbox.ErrUnsupportedCapability)
	}
	if sb.State != sandbox.StateReady && sb.State != sandbox.StatePaused {
		return nil, sandbox.Usage{}, fmt.Errorf("stats of sandbox %s: it is %s, not ready or paused: %w", id, sb.State, sandbox.ErrInvalidState)
	}
	var u sandbox.Usage
	err = r.call(ctx, "usage", func(ctx context.Context) (err error) {
		u, err = ur.Usage(ctx, sb.Ref())
		return err
	})
	if err != nil {
		return nil, sandbox.Usage{}, err
	}
	return sb, u, nil
}
