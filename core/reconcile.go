package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandbox"
)

// Reconcile asks the provider for a fresh observation of the sandbox's current generation and reacts as the
// reaction table of package sandbox says: it records the observation, or repairs whatever transition was
// interrupted (an allocation never made, a pause, resume or release never carried out). It changes no
// desired state.
//
// Errors: ErrNotFound, ErrProviderUnavailable, ErrProviderProtocol.
func (r *Runtime) Reconcile(ctx context.Context, id sandbox.ID) (*sandbox.Sandbox, error) {
	sb, err := r.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return r.reconcile(ctx, sb)
}

func (r *Runtime) reconcile(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
	ref := sb.Ref()
	if sb.State == sandbox.StateTerminated || sb.State == sandbox.StateFailed {
		return sb, nil // no observation moves them
	}
	if sb.State.Transitional() && r.isBusy(ref) {
		return sb, nil // an operation on it is under way and will record its outcome
	}
	var obs sandbox.Observation
	err := r.call(ctx, "observe", func(ctx context.Context) (err error) {
		obs, err = r.prov.Observe(ctx, ref)
		return err
	})
	if err == nil {
		err = obs.Validate(ref)
	}
	if err != nil {
		return nil, err
	}
	// A preparation cut short (the daemon stopped mid-pull) resumes; one not yet begun begins.
	if _, ok := r.prov.(sandbox.Preparer); ok && obs.State == sandbox.ObservedStarting && obs.Reason == sandbox.ReasonPreparing {
		switch sb.State {
		case sandbox.StateRequested:
			return r.allocate(ctx, ref, sb.Spec)
		case sandbox.StateStarting:
			r.prepare(ref, sb.Spec)
			return sb, nil
		}
	}
	// Nothing is in flight: a repair is chosen by the state read before the observation, and carried
	// out only while the record still says so (allocate, repairPauseResume); what is recorded, by
	// apply, by the state the record holds when it is written.
	switch sandbox.React(sb.State, obs.State).Repair {
	case sandbox.RepairAllocate:
		return r.allocate(ctx, ref, sb.Spec)
	case sandbox.RepairRelease:
		if err := r.release(ctx, ref); err != nil {
			return nil, err
		}
		return r.advance(ctx, ref, "released", nil, sandbox.ActionTerminated)
	case sandbox.RepairPause:
		return r.repairPauseResume(ctx, sb, pauseOp)
	case sandbox.RepairResume:
		return r.repairPauseResume(ctx, sb, resumeOp)
	}
	got, err := r.apply(ctx, ref, obs)
	if err == nil && got.Generation == ref.Generation && got.State == sandbox.StateStarting {
		r.watchReady(ref)
	}
	return got, err
}

// ReconcileAll reconciles every live sandbox, then releases every provider resource that belongs to no live
// sandbox generation. It returns the first error met, after trying everything.
func (r *Runtime) ReconcileAll(ctx context.Context) error {
	all, err := r.store.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	live := make(map[sandbox.Ref]bool, len(all))
	for _, listed := range all {
		// Each sandbox costs an observation, so the pass reaches the last ones long after listing them:
		// act on the sandbox as it is now. As listed, one created and terminated meanwhile would still
		// say requested and be allocated again, one paused and resumed would say pausing and be paused.
		sb, err := r.store.Get(ctx, listed.ID)
		if err != nil {
			if !errors.Is(err, sandbox.ErrNotFound) {
				errs = append(errs, fmt.Errorf("reconcile %s: %w", listed.ID, err))
			}
			continue
		}
		if sb.State != sandbox.StateTerminated {
			live[sb.Ref()] = true
		}
		if _, err := r.reconcile(ctx, sb); err != nil {
			errs = append(errs, fmt.Errorf("reconcile %s: %w", sb.ID, err))
		}
	}
	var held []sandbox.Ref
	err = r.call(ctx, "resources", func(ctx context.Context) (err error) {
		held, err = r.prov.Resources(ctx)
		return err
	})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, ref := range held {
		if live[ref] || r.isBusy(ref) {
			continue
		}
		// A resource made after the listing above belongs to a sandbox created meanwhile: look again.
		if sb, err := r.store.Get(ctx, ref.ID); err == nil && sb.Generation == ref.Generation && sb.State != sandbox.StateTerminated {
			continue
		}
		r.log.Info("releasing an orphaned resource", "resource", ref.Name())
		if err := r.call(ctx, "release", func(ctx context.Context) error { return r.prov.Release(ctx, ref) }); err != nil {
			errs = append(errs, fmt.Errorf("release orphan %s: %w", ref, err))
		}
	}
	return errors.Join(errs...)
}

// watchReady polls the provider in the background until ref is ready or failed, and fails it past
// ReadyTimeout. Only one watch runs per generation.
func (r *Runtime) watchReady(ref sandbox.Ref) {
	done, ok := r.claimOnce(r.watching, ref)
	if !ok {
		return
	}
	r.goBackground(func(ctx context.Context) {
		defer done()
		deadline := time.Now().Add(r.cfg.ReadyTimeout)
		delay := time.Millisecond
		for {
			var obs sandbox.Observation
			err := r.call(ctx, "observe", func(ctx context.Context) (err error) {
				obs, err = r.prov.Observe(ctx, ref)
				return err
			})
			if err == nil {
				err = obs.Validate(ref)
			}
			if err == nil && obs.State != sandbox.ObservedStarting {
				_, _ = r.apply(ctx, ref, obs)
				return
			}
			if time.Now().After(deadline) {
				f := &sandbox.Failure{Code: "ready_timeout", Message: fmt.Sprintf("not ready after %v", r.cfg.ReadyTimeout)}
				if err != nil {
					f.Message += ": " + err.Error()
				}
				_, _ = r.advance(ctx, ref, "ready_timeout", f, sandbox.ActionFail)
				return
			}
			select {
			case <-ctx.Done():
				return // start-up reconcile of the next run takes over
			case <-time.After(delay):
			}
			delay = min(delay*2, 250*time.Millisecond)
		}
	})
}
