// Package core is the runtime core: it keeps each sandbox's desired state in the store, drives the provider
// towards it, and records every change as an event in the same transaction as the change.
//
// Its invariants: every mutation is fenced by the sandbox's generation, compared and written atomically in the
// store; a state changes only along the transition table of package sandbox, and on an observation only as
// its reaction table says; whatever the provider returns is validated before it is believed; and a sandbox
// never stays in a transitional state for good (reconcile completes it or moves it to failed).
package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sandboxd/sandbox"
)

// Defaults of Config.
const (
	DefaultProviderTimeout   = 30 * time.Second
	DefaultReadyTimeout      = 60 * time.Second
	DefaultReconcileInterval = 30 * time.Second
	DefaultReleaseBound      = 5 * time.Minute
	DefaultPrepareTimeout    = 30 * time.Minute
)

// Config configures a Runtime.
type Config struct {
	Store           sandbox.Store
	Provider        sandbox.Provider
	Logger          *slog.Logger
	Now             func() time.Time
	ProviderTimeout time.Duration // bound of one provider call; commands get their own timeout on top
	ReadyTimeout    time.Duration // a sandbox starting for longer than this is failed
	// PrepareTimeout bounds a Preparer's preparation of one sandbox (an image pull) in place of
	// ProviderTimeout; a sandbox not prepared within it fails. Its ReadyTimeout starts after.
	PrepareTimeout    time.Duration
	ReconcileInterval time.Duration // periodic reconcile of every live sandbox; negative disables it
	// ReleaseBound is how long a terminate keeps retrying a failing provider clean-up before it declares the
	// sandbox terminated anyway, naming the leftover in the event.
	ReleaseBound time.Duration
	// Lifetimes are the defaults and maxima of sandboxes' lifetimes (lifetime.go).
	Lifetimes LifetimeConfig
	// ObserveProvider, when set, is told of every provider operation once it returns: its name
	// ("allocate", "exec", "release", ...), how long it took, and its error, classified (nil on success).
	ObserveProvider func(op string, d time.Duration, err error)
}

// Runtime is the runtime core. Its methods are safe for concurrent use.
type Runtime struct {
	store sandbox.Store
	prov  sandbox.Provider
	log   *slog.Logger
	now   func() time.Time
	cfg   Config

	manifestMu sync.RWMutex
	manifest   sandbox.Manifest // the last valid manifest

	watchMu  sync.Mutex
	watchers map[chan struct{}]struct{}

	activeMu sync.Mutex
	active   map[sandbox.ID]*activity // requests naming a sandbox, open and last (lifetime.go)
	started  time.Time

	busyMu    sync.Mutex
	busy      map[sandbox.Ref]int  // generations with a provider mutation or readiness wait in flight
	watching  map[sandbox.Ref]bool // generations whose readiness is being watched
	preparing map[sandbox.Ref]bool // generations being prepared (Preparer)
	freezers  map[sandbox.Ref]*freezer

	bg       context.Context // background work; cancelled by Close
	stopBg   context.CancelFunc
	bgWG     sync.WaitGroup
	closeOne sync.Once
}

// New returns a runtime over the store and provider. It asks the provider for its manifest once, so a
// provider that cannot describe itself is refused here (ErrProviderUnavailable, ErrProviderProtocol).
func New(cfg Config) (*Runtime, error) {
	if cfg.Store == nil || cfg.Provider == nil {
		return nil, errors.New("core: a store and a provider are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ProviderTimeout <= 0 {
		cfg.ProviderTimeout = DefaultProviderTimeout
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.PrepareTimeout <= 0 {
		cfg.PrepareTimeout = DefaultPrepareTimeout
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = DefaultReconcileInterval
	}
	if cfg.ReleaseBound <= 0 {
		cfg.ReleaseBound = DefaultReleaseBound
	}
	if cfg.Lifetimes.Interval == 0 {
		cfg.Lifetimes.Interval = DefaultLifetimeInterval
	}
	bg, stop := context.WithCancel(context.Background())
	r := &Runtime{
		store:     cfg.Store,
		prov:      cfg.Provider,
		log:       cfg.Logger,
		now:       cfg.Now,
		cfg:       cfg,
		watchers:  make(map[chan struct{}]struct{}),
		active:    make(map[sandbox.ID]*activity),
		started:   cfg.Now(),
		busy:      make(map[sandbox.Ref]int),
		watching:  make(map[sandbox.Ref]bool),
		preparing: make(map[sandbox.Ref]bool),
		freezers:  make(map[sandbox.Ref]*freezer),
		bg:        bg,
		stopBg:    stop,
	}
	if _, err := r.Manifest(context.Background()); err != nil {
		stop()
		return nil, fmt.Errorf("core: provider manifest: %w", err)
	}
	return r, nil
}

// Start reconciles every live sandbox once, removes provider resources that belong to no live generation,
// and then keeps doing so every ReconcileInterval until Close.
func (r *Runtime) Start(ctx context.Context) error {
	if err := r.ReconcileAll(ctx); err != nil {
		r.log.Warn("start-up reconcile incomplete", "err", err)
	}
	// Lifetimes are checked once a sandbox's state is known again (lifetime.go).
	r.every(r.cfg.Lifetimes.Interval, r.enforceLifetimes)
	r.every(r.cfg.ReconcileInterval, func(ctx context.Context) {
		if err := r.ReconcileAll(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("periodic reconcile incomplete", "err", err)
		}
	})
	return nil
}

// Close stops background work (readiness waits, clean-up retries, periodic reconcile) and waits for it.
// It closes neither the store nor the provider.
func (r *Runtime) Close() error {
	r.closeOne.Do(func() {
		r.stopBg()
		r.bgWG.Wait()
	})
	return nil
}

// every runs fn in the background each interval until Close; nothing when interval is not positive.
func (r *Runtime) every(interval time.Duration, fn func(ctx context.Context)) {
	if interval <= 0 {
		return
	}
	r.goBackground(func(ctx context.Context) {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fn(ctx)
			}
		}
	})
}

func (r *Runtime) goBackground(fn func(ctx context.Context)) {
	r.bgWG.Add(1)
	go func() {
		defer r.bgWG.Done()
		fn(r.bg)
	}()
}

// Manifest asks the provider for its manifest and validates it. It returns ErrProviderUnavailable or
// ErrProviderProtocol when the provider fails or answers nonsense.
func (r *Runtime) Manifest(ctx context.Context) (sandbox.Manifest, error) {
	var m sandbox.Manifest
	err := r.call(ctx, "manifest", func(ctx context.Context) (err error) {
		m, err = r.prov.Manifest(ctx)
		return err
	})
	if err != nil {
		return sandbox.Manifest{}, err
	}
	if err := m.Validate(); err != nil {
		return sandbox.Manifest{}, err
	}
	if err := r.checkHonest(m); err != nil {
		return sandbox.Manifest{}, err
	}
	r.manifestMu.Lock()
	r.manifest = m
	r.manifestMu.Unlock()
	return m, nil
}

// checkHonest refuses a manifest that claims a feature whose interface the provider lacks.
func (r *Runtime) checkHonest(m sandbox.Manifest) error {
	_, exec := r.prov.(sandbox.Executor)
	_, files := r.prov.(sandbox.FileSystem)
	_, pause := r.prov.(sandbox.PauseResumer)
	switch {
	case m.Capabilities.CommandExecution && !exec,
		m.Capabilities.FileAccess && !files,
		m.Capabilities.PauseResume && !pause:
		return fmt.Errorf("manifest of %q claims a capability it does not implement: %w", m.Name, sandbox.ErrProviderProtocol)
	}
	return nil
}

func (r *Runtime) cachedManifest() sandbox.Manifest {
	r.manifestMu.RLock()
	defer r.manifestMu.RUnlock()
	return r.manifest
}

// require returns ErrUnsupportedCapability unless the provider supports every capability.
func (r *Runtime) require(caps ...sandbox.Capability) error {
	m := r.cachedManifest()
	for _, c := range caps {
		if !m.Capabilities.Has(c) {
			return fmt.Errorf("provider %q does not support %s: %w", m.Name, c, sandbox.ErrUnsupportedCapability)
		}
	}
	return nil
}

// Get returns one sandbox, or ErrNotFound.
func (r *Runtime) Get(ctx context.Context, id sandbox.ID) (*sandbox.Sandbox, error) {
	return r.store.Get(ctx, id)
}

// List returns every sandbox, oldest first.
func (r *Runtime) List(ctx context.Context) ([]*sandbox.Sandbox, error) {
	return r.store.List(ctx)
}

// call runs one provider operation with the provider timeout, detached from the caller's cancellation (an
// operation the provider started is finished even when the client goes away), and turns what comes back
// into an error class: a panic, a timeout or an unclassified error is ErrProviderUnavailable.
func (r *Runtime) call(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	return r.callFor(ctx, op, r.cfg.ProviderTimeout, true, fn)
}

func (r *Runtime) callFor(ctx context.Context, op string, d time.Duration, detach bool, fn func(ctx context.Context) error) (err error) {
	if detach {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if observe := r.cfg.ObserveProvider; observe != nil {
		start := time.Now()
		defer func() { observe(op, time.Since(start), err) }()
	}
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("provider panicked", "op", op, "panic", p)
			err = fmt.Errorf("provider %s panicked: %w", op, sandbox.ErrProviderUnavailable)
		}
	}()
	err = fn(ctx)
	if err == nil {
		return nil
	}
	for _, known := range []error{
		sandbox.ErrProviderUnavailable, sandbox.ErrProviderProtocol, sandbox.ErrNotFound,
		sandbox.ErrInvalidRequest, sandbox.ErrInvalidState, sandbox.ErrUnsupportedCapability,
	} {
		if errors.Is(err, known) {
			return fmt.Errorf("provider %s: %w", op, err)
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("provider %s timed out after %v: %v: %w", op, d, err, sandbox.ErrProviderUnavailable)
	}
	return fmt.Errorf("provider %s: %v: %w", op, err, sandbox.ErrProviderUnavailable)
}

// markBusy records a provider operation in flight for ref, so that reconcile leaves the generation alone;
// it returns the function that ends it.
func (r *Runtime) markBusy(ref sandbox.Ref) func() {
	r.busyMu.Lock()
	r.busy[ref]++
	r.busyMu.Unlock()
	return func() {
		r.busyMu.Lock()
		if r.busy[ref]--; r.busy[ref] <= 0 {
			delete(r.busy, ref)
		}
		r.busyMu.Unlock()
	}
}

// claimOnce marks ref in set (the generations being watched, or prepared) and busy, unless set has it
// already: one such background task runs per generation. It returns the function that ends both.
func (r *Runtime) claimOnce(set map[sandbox.Ref]bool, ref sandbox.Ref) (func(), bool) {
	r.busyMu.Lock()
	defer r.busyMu.Unlock()
	if set[ref] {
		return nil, false
	}
	set[ref] = true
	r.busy[ref]++
	return func() {
		r.busyMu.Lock()
		delete(set, ref)
		if r.busy[ref]--; r.busy[ref] <= 0 {
			delete(r.busy, ref)
		}
		r.busyMu.Unlock()
	}, true
}

// freezer is the lock of one generation's pause and resume (lockFreezer).
type freezer struct {
	mu   sync.Mutex
	refs int // holders and waiters; the entry goes at 0
}

// lockFreezer holds ref's freezer lock and returns the function that lets it go. Under it, a pause or
// resume (a checkpoint's included) has the provider carry out what the record says is under way and
// records the outcome, so that reconcile's repair of an interrupted one, which reads the record again
// under the lock, never acts on a move that ended meanwhile: a pause carried out after the resume that
// followed it would leave a frozen sandbox behind a record that says ready. With try, it returns nil
// at once when another holds the lock.
func (r *Runtime) lockFreezer(ref sandbox.Ref, try bool) (unlock func()) {
	r.busyMu.Lock()
	f := r.freezers[ref]
	if f == nil {
		f = &freezer{}
		r.freezers[ref] = f
	}
	f.refs++
	r.busyMu.Unlock()
	drop := func() {
		r.busyMu.Lock()
		if f.refs--; f.refs == 0 {
			delete(r.freezers, ref)
		}
		r.busyMu.Unlock()
	}
	if !try {
		f.mu.Lock()
	} else if !f.mu.TryLock() {
		drop()
		return nil
	}
	return func() {
		f.mu.Unlock()
		drop()
	}
}

func (r *Runtime) isBusy(ref sandbox.Ref) bool {
	r.busyMu.Lock()
	defer r.busyMu.Unlock()
	return r.busy[ref] > 0
}

// checkGeneration is the fence: it returns ErrGenerationConflict unless want is the current generation.
func checkGeneration(sb *sandbox.Sandbox, op string, want sandbox.Generation) error {
	if sb.Generation != want {
		return fmt.Errorf("%s %s: generation %d, current %d: %w", op, sb.ID, want, sb.Generation, sandbox.ErrGenerationConflict)
	}
	return nil
}

// move applies action a to sb along the transition table, stamps it, and returns the state_changed event,
// or no event when the target already holds. failure is recorded when the sandbox fails.
func (r *Runtime) move(sb *sandbox.Sandbox, a sandbox.Action, reason string, failure *sandbox.Failure) ([]sandbox.Event, sandbox.Outcome, error) {
	t, err := sandbox.Next(sb.State, a)
	if err != nil {
		return nil, sandbox.Invalid, fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	if t.Outcome == sandbox.Already {
		return nil, sandbox.Already, nil
	}
	from := sb.State
	now := r.now().UTC()
	sb.State = t.To
	sb.UpdatedAt = now
	if t.To == sandbox.StateFailed {
		sb.Failure = failure
	}
	ev := sandbox.NewEvent(sandbox.EventStateChanged, sb.Ref(), now, sandbox.StateChangedData{From: from, To: t.To, Reason: reason})
	return []sandbox.Event{ev}, sandbox.Move, nil
}

// advance moves the generation ref along the given actions, in order, if it is still the current generation
// and each action applies; actions that do not apply are skipped. It is how provider progress is recorded:
// it never fails because the sandbox moved on meanwhile.
func (r *Runtime) advance(ctx context.Context, ref sandbox.Ref, reason string, failure *sandbox.Failure, actions ...sandbox.Action) (*sandbox.Sandbox, error) {
	sb, evs, err := r.store.Update(ctx, ref.ID, func(sb *sandbox.Sandbox) (sandbox.Change, error) {
		var ch sandbox.Change
		if sb.Generation != ref.Generation {
			return ch, nil
		}
		for _, a := range actions {
			evs, _, err := r.move(sb, a, reason, failure)
			if err != nil {
				continue
			}
			ch.Events = append(ch.Events, evs...)
		}
		return ch, nil
	})
	if len(evs) > 0 {
		r.notify()
	}
	return sb, err
}

// failWith moves ref to failed because of err, a provider error.
func (r *Runtime) failWith(ctx context.Context, ref sandbox.Ref, err error) {
	f := &sandbox.Failure{Code: string(sandbox.ClassOf(err).Code), Message: err.Error()}
	if _, uerr := r.advance(ctx, ref, "provider failure", f, sandbox.ActionFail); uerr != nil {
		r.log.Error("recording a failure", "sandbox", ref.ID, "generation", ref.Generation, "err", uerr)
	}
}
