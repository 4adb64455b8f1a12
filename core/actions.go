package core

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandbox"
)

// pauseResumeOp describes one of the two freezer actions.
type pauseResumeOp struct {
	name          string
	start, finish sandbox.Action
	do            func(context.Context, sandbox.PauseResumer, sandbox.Ref) error
}

var (
	pauseOp = pauseResumeOp{"pause", sandbox.ActionPause, sandbox.ActionPaused,
		func(ctx context.Context, p sandbox.PauseResumer, ref sandbox.Ref) error { return p.Pause(ctx, ref) }}
	resumeOp = pauseResumeOp{"resume", sandbox.ActionResume, sandbox.ActionResumed,
		func(ctx context.Context, p sandbox.PauseResumer, ref sandbox.Ref) error { return p.Resume(ctx, ref) }}
)

// Pause freezes a ready sandbox. Pausing a paused or pausing sandbox returns it as it is.
//
// Errors: ErrNotFound, ErrUnsupportedCapability, ErrGenerationConflict, ErrInvalidState, and the provider's
// ErrProviderUnavailable or ErrProviderProtocol (the sandbox is then failed: its state is unknown).
func (r *Runtime) Pause(ctx context.Context, id sandbox.ID, gen sandbox.Generation) (*sandbox.Sandbox, error) {
	return r.pauseResume(ctx, id, gen, pauseOp, "pause requested")
}

// Resume thaws a paused sandbox. Resuming a ready or resuming sandbox returns it as it is.
// Errors as for Pause.
func (r *Runtime) Resume(ctx context.Context, id sandbox.ID, gen sandbox.Generation) (*sandbox.Sandbox, error) {
	return r.pauseResume(ctx, id, gen, resumeOp, "resume requested")
}

// pauseResume records op's first step with reason, then has the provider carry it out under the
// generation's freezer lock.
func (r *Runtime) pauseResume(ctx context.Context, id sandbox.ID, gen sandbox.Generation, op pauseResumeOp, reason string) (*sandbox.Sandbox, error) {
	if _, err := r.store.Get(ctx, id); err != nil {
		return nil, err
	}
	if err := r.require(sandbox.CapPauseResume); err != nil {
		return nil, err
	}
	// Marked from before its first step: a reconcile that reads the record this step writes leaves
	// the move to this call.
	done := r.markBusy(sandbox.Ref{ID: id, Generation: gen})
	defer done()
	sb, moved, err := r.begin(ctx, id, gen, op.start, reason)
	if err != nil || !moved {
		return sb, err
	}
	unlock := r.lockFreezer(sb.Ref(), false)
	defer unlock()
	return r.carryOut(ctx, sb.Ref(), op)
}

// repairPauseResume carries out the pause or resume that sb, read before reconcile's observation,
// says is under way, as nothing is carrying it out. Chosen on that read, the repair would be stale if
// the move ended meanwhile (and another followed it), so it acts only when the record, read again
// under the freezer's lock, still says the same; when another holds the lock, that one is carrying
// it out.
func (r *Runtime) repairPauseResume(ctx context.Context, sb *sandbox.Sandbox, op pauseResumeOp) (*sandbox.Sandbox, error) {
	ref := sb.Ref()
	done := r.markBusy(ref)
	defer done()
	unlock := r.lockFreezer(ref, true)
	if unlock == nil {
		return sb, nil
	}
	defer unlock()
	now, err := r.store.Get(ctx, ref.ID)
	if err != nil || now.Generation != ref.Generation || now.State != sb.State {
		return now, err
	}
	return r.carryOut(ctx, ref, op)
}

// carryOut has the provider carry out op on ref and records the outcome; the caller holds the
// generation's freezer lock.
func (r *Runtime) carryOut(ctx context.Context, ref sandbox.Ref, op pauseResumeOp) (*sandbox.Sandbox, error) {
	pr, ok := r.prov.(sandbox.PauseResumer)
	if !ok {
		return nil, fmt.Errorf("provider cannot %s: %w", op.name, sandbox.ErrUnsupportedCapability)
	}
	if err := r.call(ctx, op.name, func(ctx context.Context) error { return op.do(ctx, pr, ref) }); err != nil {
		r.log.Warn(op.name+" failed", "sandbox", ref.ID, "generation", ref.Generation, "err", err)
		r.failWith(ctx, ref, err)
		return nil, err
	}
	return r.advance(ctx, ref, op.name+"d", nil, op.finish)
}

// begin is the fenced first step of a client action: it checks the generation and the table and records
// the move. moved is false when the action's target already holds (the sandbox is returned as it is).
func (r *Runtime) begin(ctx context.Context, id sandbox.ID, gen sandbox.Generation, a sandbox.Action, reason string) (sb *sandbox.Sandbox, moved bool, err error) {
	sb, evs, err := r.store.Update(ctx, id, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		var ch sandbox.Change
		if err := checkGeneration(sb, string(a), gen); err != nil {
			return ch, err
		}
		evs, outcome, err := r.move(sb, a, reason, nil)
		moved = outcome == sandbox.Move
		ch.Events = evs
		return ch, err
	})
	if err != nil {
		return nil, false, err
	}
	if len(evs) > 0 {
		r.notify()
	}
	return sb, moved, nil
}

// Terminate stops a sandbox and releases everything the provider holds for it. It works in every
// non-terminal state, failed included. When the provider's clean-up fails, the sandbox is returned as
// terminating and the clean-up is retried in the background; it reaches terminated once the provider
// confirms, or after ReleaseBound with the leftover named in the event.
//
// Errors: ErrNotFound, ErrGenerationConflict.
func (r *Runtime) Terminate(ctx context.Context, id sandbox.ID, gen sandbox.Generation) (*sandbox.Sandbox, error) {
	return r.terminate(ctx, id, gen, "terminate requested")
}

// terminate is Terminate, its first step recorded with reason.
func (r *Runtime) terminate(ctx context.Context, id sandbox.ID, gen sandbox.Generation, reason string) (*sandbox.Sandbox, error) {
	sb, _, err := r.begin(ctx, id, gen, sandbox.ActionTerminate, reason)
	if err != nil {
		return nil, err
	}
	if sb.State != sandbox.StateTerminating {
		return sb, nil // terminated already
	}
	ref := sb.Ref()
	if err := r.release(ctx, ref); err != nil {
		r.log.Warn("release failed; retrying in the background", "sandbox", id, "generation", ref.Generation, "err", err)
		r.retryRelease(ref)
		return r.store.Get(ctx, id)
	}
	return r.advance(ctx, ref, "released", nil, sandbox.ActionTerminated)
}

func (r *Runtime) release(ctx context.Context, ref sandbox.Ref) error {
	done := r.markBusy(ref)
	defer done()
	return r.call(ctx, "release", func(ctx context.Context) error { return r.prov.Release(ctx, ref) })
}

// retryRelease keeps releasing ref with backoff until the provider confirms or ReleaseBound passes; then
// the sandbox is terminated anyway and the event names what may be left behind.
func (r *Runtime) retryRelease(ref sandbox.Ref) {
	r.goBackground(func(ctx context.Context) {
		done := r.markBusy(ref)
		defer done()
		deadline := r.now().Add(r.cfg.ReleaseBound)
		delay := 100 * time.Millisecond
		var err error
		for {
			select {
			case <-ctx.Done():
				return // the next start-up reconcile takes over
			case <-time.After(delay):
			}
			err = r.call(ctx, "release", func(ctx context.Context) error { return r.prov.Release(ctx, ref) })
			if err == nil {
				_, _ = r.advance(ctx, ref, "released", nil, sandbox.ActionTerminated)
				return
			}
			if r.now().After(deadline) {
				break
			}
			delay = min(delay*2, 10*time.Second)
		}
		reason := fmt.Sprintf("provider clean-up failed for %v; leftover resource %s: %v", r.cfg.ReleaseBound, ref.Name(), err)
		r.log.Error("giving up on release", "sandbox", ref.ID, "generation", ref.Generation, "err", err)
		_, _ = r.advance(ctx, ref, reason, nil, sandbox.ActionTerminated)
	})
}
