package core

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandbox"
)

// checkpointer is the provider's Checkpointer, or ErrUnsupportedCapability.
func (r *Runtime) checkpointer() (sandbox.Checkpointer, error) {
	if err := r.require(sandbox.CapMemorySnapshot); err != nil {
		return nil, err
	}
	cp, ok := r.prov.(sandbox.Checkpointer)
	if !ok {
		return nil, fmt.Errorf("provider cannot write checkpoints: %w", sandbox.ErrUnsupportedCapability)
	}
	return cp, nil
}

// Checkpoint writes a checkpoint of the ready sandbox id, fenced by gen. Without leaveRunning the
// sandbox goes ready -> pausing -> paused, stopped at the checkpoint, and resume restores it from
// there; with it, the sandbox stays ready. A provider that fails the checkpoint after it began
// fails the sandbox, as a failed pause does: its state is unknown.
//
// Errors: ErrNotFound, ErrUnsupportedCapability, ErrGenerationConflict, ErrInvalidState, and the
// provider's ErrProviderUnavailable or ErrProviderProtocol.
func (r *Runtime) Checkpoint(ctx context.Context, id sandbox.ID, gen sandbox.Generation, leaveRunning bool) (*sandbox.Sandbox, sandbox.Checkpoint, error) {
	sb, err := r.store.Get(ctx, id)
	if err != nil {
		return nil, sandbox.Checkpoint{}, err
	}
	cp, err := r.checkpointer()
	if err != nil {
		return nil, sandbox.Checkpoint{}, err
	}
	if err := checkGeneration(sb, "checkpoint", gen); err != nil {
		return nil, sandbox.Checkpoint{}, err
	}
	if sb.State != sandbox.StateReady {
		return nil, sandbox.Checkpoint{}, fmt.Errorf("checkpoint of sandbox %s: it is %s, not ready: %w", id, sb.State, sandbox.ErrInvalidState)
	}
	ref := sb.Ref()
	// Marked from before its first step, as a pause (pauseResume).
	done := r.markBusy(ref)
	defer done()
	if !leaveRunning {
		if sb, _, err = r.begin(ctx, id, gen, sandbox.ActionPause, "checkpoint requested"); err != nil {
			return nil, sandbox.Checkpoint{}, err
		}
		if sb.State != sandbox.StatePausing {
			return nil, sandbox.Checkpoint{}, fmt.Errorf("checkpoint of sandbox %s: it is %s: %w", id, sb.State, sandbox.ErrInvalidState)
		}
		unlock := r.lockFreezer(ref, false) // a pause's like any other (pauseResume)
		defer unlock()
	}
	var c sandbox.Checkpoint
	err = r.call(ctx, "checkpoint", func(ctx context.Context) (err error) {
		c, err = cp.Checkpoint(ctx, ref, leaveRunning)
		return err
	})
	if err != nil {
		r.log.Warn("checkpoint failed", "sandbox", id, "generation", ref.Generation, "err", err)
		if !leaveRunning {
			r.failWith(ctx, ref, err)
		} else {
			r.providerTrouble(ref, err)
		}
		return nil, sandbox.Checkpoint{}, err
	}
	if !leaveRunning {
		if sb, err = r.advance(ctx, ref, "checkpointed "+c.ID, nil, sandbox.ActionPaused); err != nil {
			return nil, sandbox.Checkpoint{}, err
		}
	}
	return sb, c, nil
}

// Checkpoints lists the checkpoints taken of sandbox id, in any generation, oldest first.
//
// Errors: ErrNotFound, ErrUnsupportedCapability, ErrProviderUnavailable.
func (r *Runtime) Checkpoints(ctx context.Context, id sandbox.ID) ([]sandbox.Checkpoint, error) {
	if _, err := r.store.Get(ctx, id); err != nil {
		return nil, err
	}
	cp, err := r.checkpointer()
	if err != nil {
		return nil, err
	}
	var out []sandbox.Checkpoint
	err = r.call(ctx, "checkpoints", func(ctx context.Context) (err error) {
		out, err = cp.Checkpoints(ctx, id)
		return err
	})
	return out, err
}
