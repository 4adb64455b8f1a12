package core

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/sandboxd/sandbox"
)

// validateSpec checks what the schema cannot say of a spec, for callers that skip the HTTP layer, and
// what the provider's own bounds refuse (sandbox.SpecValidator).
func (r *Runtime) validateSpec(spec sandbox.Spec) error {
	if spec.ClientRequestID == "" {
		return fmt.Errorf("spec needs a clientRequestId: %w", sandbox.ErrInvalidRequest)
	}
	if spec.Image != "" && spec.Template != "" {
		return fmt.Errorf("spec names both an image and a template: %w", sandbox.ErrInvalidRequest)
	}
	for k := range spec.Extensions {
		if _, ok := sandbox.ExtensionCapability(k); !ok && sandbox.IsOwnExtension(k) {
			return fmt.Errorf("spec.extensions: %q is no extension of sandboxd: %w", k, sandbox.ErrInvalidRequest)
		}
	}
	if v, ok := r.prov.(sandbox.SpecValidator); ok {
		return v.ValidateSpec(spec)
	}
	return nil
}

// checkCapabilities refuses a spec the provider cannot honour at all (ErrUnsupportedCapability).
func (r *Runtime) checkCapabilities(spec sandbox.Spec) error {
	caps := append([]sandbox.Capability(nil), spec.RequiredCapabilities...)
	if spec.Image != "" {
		caps = append(caps, sandbox.CapImageReference)
	}
	if spec.Template != "" {
		caps = append(caps, sandbox.CapTemplateReference)
	}
	// A sandboxd.* key implies the capability it needs (semantics.md, "Extensions").
	for _, k := range slices.Sorted(maps.Keys(spec.Extensions)) {
		if c, ok := sandbox.ExtensionCapability(k); ok && c != "" {
			caps = append(caps, c)
		}
	}
	return r.require(caps...)
}

// Create records a new sandbox for spec and hands its allocation to the provider. Repeating a create with
// the same clientRequestId and spec returns the same sandbox as it is now, without a second allocation.
//
// Errors: ErrInvalidRequest, ErrUnsupportedCapability (nothing recorded), ErrIdempotencyConflict; and
// ErrProviderUnavailable or ErrProviderProtocol when allocation fails, in which case the sandbox is
// recorded as failed with the reason.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	if err := r.validateSpec(spec); err != nil {
		return nil, err
	}
	if err := r.checkCapabilities(spec); err != nil {
		return nil, err
	}
	if err := r.checkVolumes(ctx, spec); err != nil {
		return nil, err
	}
	canon, err := spec.CanonicalJSON()
	if err != nil {
		return nil, fmt.Errorf("canonical spec: %v: %w", err, sandbox.ErrInvalidRequest)
	}
	now := r.now().UTC()
	lt, err := r.lifetimeOf(spec, now)
	if err != nil {
		return nil, err
	}
	sb := &sandbox.Sandbox{
		ID:         sandbox.NewID(),
		Generation: 1,
		State:      sandbox.StateRequested,
		Spec:       spec,
		Provider:   r.cachedManifest().Name,
		CreatedAt:  now,
		UpdatedAt:  now,
	}
	setLifetime(sb, lt)
	intent := sandbox.Intent{Key: spec.ClientRequestID, SandboxID: sb.ID, Generation: 1, Spec: canon}
	created := sandbox.NewEvent(sandbox.EventCreated, sb.Ref(), now, sandbox.CreatedData{ClientRequestID: spec.ClientRequestID, Spec: spec})
	got, isNew, err := r.store.Create(ctx, sb, intent, []sandbox.Event{created})
	if err != nil {
		return nil, err
	}
	if !isNew {
		return got, nil
	}
	r.notify()
	r.log.Info("sandbox created", "sandbox", got.ID, "generation", got.Generation)
	return r.allocate(ctx, got.Ref(), got.Spec)
}

// Recreate makes a new generation of a terminated sandbox from spec.
//
// Errors: ErrNotFound, ErrInvalidRequest, ErrUnsupportedCapability, ErrGenerationConflict, ErrInvalidState
// (not terminated), ErrIdempotencyConflict (the spec's clientRequestId is taken), and the provider's errors
// as for Create.
func (r *Runtime) Recreate(ctx context.Context, id sandbox.ID, gen sandbox.Generation, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	if err := r.validateSpec(spec); err != nil {
		return nil, err
	}
	if _, err := r.store.Get(ctx, id); err != nil {
		return nil, err
	}
	if err := r.checkCapabilities(spec); err != nil {
		return nil, err
	}
	if err := r.checkVolumes(ctx, spec); err != nil {
		return nil, err
	}
	canon, err := spec.CanonicalJSON()
	if err != nil {
		return nil, fmt.Errorf("canonical spec: %v: %w", err, sandbox.ErrInvalidRequest)
	}
	if _, err := r.lifetimeOf(spec, r.now()); err != nil {
		return nil, err
	}
	sb, _, err := r.store.Update(ctx, id, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		var ch sandbox.Change
		if err := checkGeneration(sb, "recreate", gen); err != nil {
			return ch, err
		}
		// The new generation's events carry its number; an error aborts the update, increment included.
		sb.Generation++
		moved, _, err := r.move(sb, sandbox.ActionRecreate, "recreate", nil)
		if err != nil {
			return ch, err
		}
		sb.Spec = spec
		sb.Provider = r.cachedManifest().Name
		sb.Failure, sb.Endpoint, sb.ProviderExtensions = nil, nil, nil
		lt, err := r.lifetimeOf(spec, sb.UpdatedAt)
		if err != nil {
			return ch, err
		}
		setLifetime(sb, lt)
		ch.Intent = &sandbox.Intent{Key: spec.ClientRequestID, SandboxID: sb.ID, Generation: sb.Generation, Spec: canon}
		created := sandbox.NewEvent(sandbox.EventCreated, sb.Ref(), sb.UpdatedAt, sandbox.CreatedData{ClientRequestID: spec.ClientRequestID, Spec: spec})
		ch.Events = append([]sandbox.Event{created}, moved...)
		return ch, nil
	})
	if err != nil {
		return nil, err
	}
	r.notify()
	r.log.Info("sandbox recreated", "sandbox", sb.ID, "generation", sb.Generation)
	return r.allocate(ctx, sb.Ref(), sb.Spec)
}

// allocate hands ref to the provider and records what it observed. A sandbox the provider reports as still
// starting is watched in the background until it is ready, fails, or passes the ready timeout. One the
// provider must prepare first (sandbox.Preparer) is moved to starting at once, and prepared, then
// allocated, in the background (prepare).
func (r *Runtime) allocate(ctx context.Context, ref sandbox.Ref, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	done := r.markBusy(ref)
	defer done()
	// Only a requested generation is handed to the provider: a caller that read the sandbox a while ago
	// (a reconcile that waited for an observation) may find it terminated, or allocated, by now.
	sb, err := r.store.Get(ctx, ref.ID)
	if err != nil {
		return nil, err
	}
	if sb.Generation != ref.Generation || sb.State != sandbox.StateRequested {
		return sb, nil
	}
	if prep, ok := r.prov.(sandbox.Preparer); ok {
		var needed bool
		err := r.call(ctx, "needs_preparation", func(ctx context.Context) (err error) {
			needed, err = prep.NeedsPreparation(ctx, ref, spec)
			return err
		})
		if err != nil {
			r.log.Warn("allocation failed", "sandbox", ref.ID, "generation", ref.Generation, "err", err)
			r.failWith(ctx, ref, err)
			return nil, err
		}
		if needed {
			if sb, err = r.advance(ctx, ref, sandbox.ReasonPreparing, nil, sandbox.ActionAllocated); err != nil {
				return nil, err
			}
			if sb.Generation == ref.Generation && sb.State == sandbox.StateStarting {
				r.prepare(ref, spec)
			}
			return sb, nil
		}
	}
	return r.callAllocate(ctx, ref, spec)
}

// callAllocate calls the provider's Allocate of ref and records its answer.
func (r *Runtime) callAllocate(ctx context.Context, ref sandbox.Ref, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	var obs sandbox.Observation
	err := r.call(ctx, "allocate", func(ctx context.Context) (err error) {
		obs, err = r.prov.Allocate(ctx, ref, spec)
		return err
	})
	if err == nil {
		err = obs.Validate(ref)
		if err == nil && obs.State == sandbox.ObservedAbsent {
			err = fmt.Errorf("allocate of %s reported no resource: %w", ref, sandbox.ErrProviderProtocol)
		}
	}
	if err != nil {
		r.log.Warn("allocation failed", "sandbox", ref.ID, "generation", ref.Generation, "err", err)
		r.failWith(ctx, ref, err)
		return nil, err
	}
	sb, err := r.apply(ctx, ref, obs)
	if err != nil {
		return nil, err
	}
	switch {
	case sb.Generation != ref.Generation:
	case sb.State == sandbox.StateStarting:
		r.watchReady(ref)
	case sb.State == sandbox.StateTerminating || sb.State == sandbox.StateTerminated:
		// Terminated while the provider was allocating: the terminate's release may have run before the
		// resource existed, so release again rather than leave it to the next periodic reconcile.
		if err := r.call(ctx, "release", func(ctx context.Context) error { return r.prov.Release(ctx, ref) }); err != nil {
			r.log.Warn("release after a terminate during allocation", "sandbox", ref.ID, "generation", ref.Generation, "err", err)
		}
	}
	return sb, nil
}

// prepare prepares ref, a starting generation, in the background under PrepareTimeout, then allocates
// it; a failed preparation fails it. Only one preparation runs per generation, and a reconcile leaves
// the generation alone meanwhile. Cut short by Close, it records nothing: the provider reports the
// generation as preparing still, and the next start-up reconcile prepares it again.
func (r *Runtime) prepare(ref sandbox.Ref, spec sandbox.Spec) {
	prep, ok := r.prov.(sandbox.Preparer)
	if !ok {
		return
	}
	done, ok := r.claimOnce(r.preparing, ref)
	if !ok {
		return
	}
	r.goBackground(func(ctx context.Context) {
		defer done()
		var obs sandbox.Observation
		err := r.callFor(ctx, "prepare", r.cfg.PrepareTimeout, false, func(ctx context.Context) (err error) {
			obs, err = prep.Prepare(ctx, ref, spec)
			return err
		})
		if ctx.Err() != nil {
			return // closing: the next start-up reconcile prepares it again
		}
		if err == nil {
			err = obs.Validate(ref)
			if err == nil && obs.State != sandbox.ObservedStarting && obs.State != sandbox.ObservedFailed {
				err = fmt.Errorf("prepare of %s reported %s: %w", ref, obs.State, sandbox.ErrProviderProtocol)
			}
		}
		if err != nil {
			r.log.Warn("preparation failed", "sandbox", ref.ID, "generation", ref.Generation, "err", err)
			r.failWith(ctx, ref, err)
			return
		}
		if obs.State == sandbox.ObservedFailed {
			_, _ = r.apply(ctx, ref, obs)
			return
		}
		// Allocated only if still starting: a terminate meanwhile has released what there was.
		if sb, err := r.store.Get(ctx, ref.ID); err != nil || sb.Generation != ref.Generation || sb.State != sandbox.StateStarting {
			return
		}
		_, _ = r.callAllocate(ctx, ref, spec)
	})
}

// apply records an observation of ref as the reaction table says for the state the record holds now. It
// changes nothing when ref is no longer the current generation, and calls the provider for nothing: a
// repair is reconcile's to make.
func (r *Runtime) apply(ctx context.Context, ref sandbox.Ref, obs sandbox.Observation) (*sandbox.Sandbox, error) {
	sb, evs, err := r.store.Update(ctx, ref.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		var ch sandbox.Change
		if sb.Generation != ref.Generation {
			return ch, nil
		}
		for _, st := range sandbox.React(sb.State, obs.State).Record {
			reason, f := st.Reason, (*sandbox.Failure)(nil)
			if st.Action == sandbox.ActionFail {
				failure := obs.Failure()
				reason, f = failure.Code, &failure
			}
			evs, _, err := r.move(sb, st.Action, reason, f)
			if err != nil {
				return ch, err
			}
			ch.Events = append(ch.Events, evs...)
		}
		if obs.State != sandbox.ObservedAbsent && obs.State != sandbox.ObservedFailed {
			ext := withRuntimeExtensions(obs.Extensions, sb.ProviderExtensions)
			if !sameEndpoint(sb.Endpoint, obs.Endpoint) || !sameExtensions(sb.ProviderExtensions, ext) {
				sb.Endpoint, sb.ProviderExtensions = obs.Endpoint, ext
				sb.UpdatedAt = r.now().UTC()
			}
		}
		return ch, nil
	})
	if len(evs) > 0 {
		r.notify()
	}
	return sb, err
}

func sameEndpoint(a, b *sandbox.Endpoint) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func sameExtensions(a, b map[string]json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}
