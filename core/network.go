package core

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sandboxd/sandbox"
)

// networkController is the provider's NetworkController, or ErrUnsupportedCapability.
func (r *Runtime) networkController() (sandbox.NetworkController, error) {
	if err := r.require(sandbox.CapNetworkPolicy); err != nil {
		return nil, err
	}
	nc, ok := r.prov.(sandbox.NetworkController)
	if !ok {
		return nil, fmt.Errorf("provider cannot change a network policy: %w", sandbox.ErrUnsupportedCapability)
	}
	return nc, nil
}

// Network returns a ready or paused sandbox's network now, and the generation it is of.
//
// Errors: ErrNotFound, ErrUnsupportedCapability, ErrInvalidState, ErrProviderUnavailable.
func (r *Runtime) Network(ctx context.Context, id sandbox.ID) (sandbox.NetworkStatus, sandbox.Generation, error) {
	sb, err := r.store.Get(ctx, id)
	if err != nil {
		return sandbox.NetworkStatus{}, 0, err
	}
	nc, err := r.networkController()
	if err != nil {
		return sandbox.NetworkStatus{}, 0, err
	}
	if sb.State != sandbox.StateReady && sb.State != sandbox.StatePaused {
		return sandbox.NetworkStatus{}, 0, fmt.Errorf("network of sandbox %s: it is %s: %w", id, sb.State, sandbox.ErrInvalidState)
	}
	var st sandbox.NetworkStatus
	err = r.call(ctx, "network", func(ctx context.Context) (err error) {
		st, err = nc.NetworkStatus(ctx, sb.Ref(), sb.Spec)
		return err
	})
	return st, sb.Generation, err
}

// SetNetwork makes policy (a "sandboxd.network" value) the ready sandbox's for new connections, fenced
// by its generation; the spec keeps what was asked at create.
//
// Errors: ErrNotFound, ErrInvalidRequest, ErrUnsupportedCapability, ErrGenerationConflict,
// ErrInvalidState, ErrProviderUnavailable.
func (r *Runtime) SetNetwork(ctx context.Context, id sandbox.ID, gen sandbox.Generation, policy json.RawMessage) (sandbox.NetworkStatus, error) {
	ref, err := r.dataPlane(ctx, id, gen, "set the network policy", sandbox.CapNetworkPolicy)
	if err != nil {
		return sandbox.NetworkStatus{}, err
	}
	nc, err := r.networkController()
	if err != nil {
		return sandbox.NetworkStatus{}, err
	}
	sb, err := r.store.Get(ctx, id)
	if err != nil {
		return sandbox.NetworkStatus{}, err
	}
	var st sandbox.NetworkStatus
	err = r.call(ctx, "set the network policy", func(ctx context.Context) (err error) {
		st, err = nc.SetNetworkPolicy(ctx, ref, sb.Spec, policy)
		return err
	})
	if err != nil {
		r.providerTrouble(ref, err)
	}
	return st, err
}
