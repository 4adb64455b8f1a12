package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandbox"
)

// A sandbox's lifetime: spec.extensions["sandboxd.lifetime"] asks for a time to live (from the
// generation's create or recreate) and an idle bound (no API call naming the sandbox, no request of
// it open and no background process running in it, for that long), with daemon-wide defaults and maxima (LifetimeConfig). What holds for a
// generation is computed when it is recorded and kept with it, in
// providerExtensions["sandboxd.lifetime"] (the deadline as a time), so that the daemon enforces it from
// the store: a restart neither forgets a deadline nor moves it, and the automatic transition is an
// ordinary fenced action, which cannot fire twice (a second terminate or pause of the same generation
// changes nothing). Every automatic transition is a state_changed event whose reason is "ttl_expired"
// or "idle".
//
// Idleness is measured in memory from the last activity; a daemon that restarts counts its start as
// activity, so an idle bound is never cut short by a restart, and may be lengthened by it.

// LifetimeKey is the spec.extensions and providerExtensions key of a sandbox's lifetime.
const LifetimeKey = "sandboxd.lifetime"

// Reasons of the automatic transitions.
const (
	ReasonTTLExpired = "ttl_expired"
	ReasonIdle       = "idle"
)

// LifetimeConfig holds the daemon-wide defaults and maxima of lifetimes. A zero duration is "none".
type LifetimeConfig struct {
	DefaultTTL  time.Duration // for a sandbox that asks for none
	MaxTTL      time.Duration // the most a sandbox may ask for, and the bound of one that asks for none
	DefaultIdle time.Duration
	MaxIdle     time.Duration
	// DefaultOnIdle is "pause" or "terminate"; empty: pause where the provider can, else terminate.
	DefaultOnIdle string
	// Interval is how often deadlines are checked; DefaultLifetimeInterval if zero, none if negative.
	Interval time.Duration
}

// DefaultLifetimeInterval is LifetimeConfig.Interval when zero.
const DefaultLifetimeInterval = time.Second

// lifetimeSpec is what a spec asks for.
type lifetimeSpec struct {
	TTLSeconds   int64  `json:"ttlSeconds,omitempty"`
	IdleSeconds  int64  `json:"idleSeconds,omitempty"`
	OnIdle       string `json:"onIdle,omitempty"`
	ResumeOnCall *bool  `json:"resumeOnCall,omitempty"`
}

// Lifetime is what holds for one generation, as recorded in providerExtensions["sandboxd.lifetime"].
type Lifetime struct {
	Since        time.Time  `json:"since"` // when the generation was recorded: its lifetime's start
	TTLSeconds   int64      `json:"ttlSeconds,omitempty"`
	ExpiresAt    *time.Time `json:"expiresAt,omitempty"`
	IdleSeconds  int64      `json:"idleSeconds,omitempty"`
	OnIdle       string     `json:"onIdle,omitempty"`
	ResumeOnCall bool       `json:"resumeOnCall,omitempty"`
}

// lifetimeOf computes the lifetime of a generation recorded at now from its spec and the daemon's
// defaults and maxima; nil when it has none. Errors: ErrInvalidRequest (a value over a maximum, a
// malformed key), ErrUnsupportedCapability (pause on idle without pauseResume).
func (r *Runtime) lifetimeOf(spec sandbox.Spec, now time.Time) (*Lifetime, error) {
	var ask lifetimeSpec
	if raw, ok := spec.Extensions[LifetimeKey]; ok {
		if err := json.Unmarshal(raw, &ask); err != nil {
			return nil, fmt.Errorf("extensions %q: %v: %w", LifetimeKey, err, sandbox.ErrInvalidRequest)
		}
		if ask.TTLSeconds < 0 || ask.IdleSeconds < 0 {
			return nil, fmt.Errorf("extensions %q: negative seconds: %w", LifetimeKey, sandbox.ErrInvalidRequest)
		}
	}
	c := r.cfg.Lifetimes
	ttl, err := bounded("ttlSeconds", ask.TTLSeconds, c.DefaultTTL, c.MaxTTL)
	if err != nil {
		return nil, err
	}
	idle, err := bounded("idleSeconds", ask.IdleSeconds, c.DefaultIdle, c.MaxIdle)
	if err != nil {
		return nil, err
	}
	if ttl == 0 && idle == 0 {
		return nil, nil
	}
	lt := &Lifetime{Since: now.UTC(), TTLSeconds: ttl}
	if ttl > 0 {
		at := now.Add(time.Duration(ttl) * time.Second).UTC()
		lt.ExpiresAt = &at
	}
	if idle > 0 {
		lt.IdleSeconds = idle
		lt.OnIdle = ask.OnIdle
		if lt.OnIdle == "" {
			lt.OnIdle = c.DefaultOnIdle
		}
		canPause := r.cachedManifest().Capabilities.Has(sandbox.CapPauseResume)
		switch {
		case lt.OnIdle == "" && canPause:
			lt.OnIdle = "pause"
		case lt.OnIdle == "":
			lt.OnIdle = "terminate"
		case lt.OnIdle == "pause" && !canPause:
			return nil, fmt.Errorf("extensions %q: onIdle pause: provider %q does not support %s: %w",
				LifetimeKey, r.cachedManifest().Name, sandbox.CapPauseResume, sandbox.ErrUnsupportedCapability)
		case lt.OnIdle != "pause" && lt.OnIdle != "terminate":
			return nil, fmt.Errorf("extensions %q: onIdle %q: want pause or terminate: %w", LifetimeKey, lt.OnIdle, sandbox.ErrInvalidRequest)
		}
		lt.ResumeOnCall = lt.OnIdle == "pause"
		if ask.ResumeOnCall != nil {
			lt.ResumeOnCall = *ask.ResumeOnCall && lt.OnIdle == "pause"
		}
	}
	return lt, nil
}

// bounded is the seconds a sandbox gets of one bound: what it asks for, refused over the maximum; when
// it asks for nothing, the default, itself bounded by the maximum.
func bounded(name string, asked int64, def, most time.Duration) (int64, error) {
	max := int64(most / time.Second)
	if asked > 0 {
		if max > 0 && asked > max {
			return 0, fmt.Errorf("extensions %q: %s %d is over this daemon's maximum of %d: %w", LifetimeKey, name, asked, max, sandbox.ErrInvalidRequest)
		}
		return asked, nil
	}
	d := int64(def / time.Second)
	if max > 0 && (d == 0 || d > max) {
		d = max
	}
	return d, nil
}

// setLifetime records lt in sb's providerExtensions, or removes the key when lt is nil.
func setLifetime(sb *sandbox.Sandbox, lt *Lifetime) {
	if lt == nil {
		delete(sb.ProviderExtensions, LifetimeKey)
		return
	}
	raw, _ := json.Marshal(lt) // plain fields: cannot fail
	if sb.ProviderExtensions == nil {
		sb.ProviderExtensions = map[string]json.RawMessage{}
	}
	sb.ProviderExtensions[LifetimeKey] = raw
}

// LifetimeOf returns the lifetime recorded for sb's generation, or nil.
func LifetimeOf(sb *sandbox.Sandbox) *Lifetime {
	raw, ok := sb.ProviderExtensions[LifetimeKey]
	if !ok {
		return nil
	}
	var lt Lifetime
	if json.Unmarshal(raw, &lt) != nil {
		return nil
	}
	return &lt
}

// runtimeExtensions are the providerExtensions keys the runtime writes itself: an observation never
// replaces or removes them, and a provider cannot set them.
var runtimeExtensions = []string{LifetimeKey}

// withRuntimeExtensions returns a provider's extensions with the runtime's own keys of current.
func withRuntimeExtensions(observed, current map[string]json.RawMessage) map[string]json.RawMessage {
	var out map[string]json.RawMessage
	for k, v := range observed {
		if isRuntimeExtension(k) {
			continue
		}
		if out == nil {
			out = map[string]json.RawMessage{}
		}
		out[k] = v
	}
	for _, k := range runtimeExtensions {
		if v, ok := current[k]; ok {
			if out == nil {
				out = map[string]json.RawMessage{}
			}
			out[k] = v
		}
	}
	return out
}

func isRuntimeExtension(k string) bool { return slices.Contains(runtimeExtensions, k) }

// activity is what the runtime knows of a sandbox's use: requests naming it now open, and when it was
// last used.
type activity struct {
	open int
	last time.Time
}

// Active records the start of a request naming sandbox id (an API call, or a stream open on it) and
// returns the function that records its end. While one is open the sandbox is not idle.
func (r *Runtime) Active(id sandbox.ID) (done func()) {
	r.activeMu.Lock()
	a := r.active[id]
	if a == nil {
		a = &activity{}
		r.active[id] = a
	}
	a.open++
	a.last = r.now()
	r.activeMu.Unlock()
	return func() {
		r.activeMu.Lock()
		a.open--
		a.last = r.now()
		r.activeMu.Unlock()
	}
}

// idleFor is how long sandbox id, whose generation's lifetime began at since, has been without an open
// request, or 0 while one is open. A sandbox not used since this runtime started is idle since its
// start, or since its generation's, whichever is later.
func (r *Runtime) idleFor(id sandbox.ID, since, now time.Time) time.Duration {
	from := r.started
	if since.After(from) {
		from = since
	}
	r.activeMu.Lock()
	defer r.activeMu.Unlock()
	if a := r.active[id]; a != nil {
		if a.open > 0 {
			return 0
		}
		if a.last.After(from) {
			from = a.last
		}
	}
	return now.Sub(from)
}

// enforceLifetimes terminates every live sandbox past its time to live, and pauses or terminates
// every ready one idle past its bound, each by an ordinary fenced action of the generation it read.
func (r *Runtime) enforceLifetimes(ctx context.Context) {
	list, err := r.store.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("lifetimes: listing sandboxes", "err", err)
		}
		return
	}
	now := r.now()
	r.forgetActivity(list)
	for _, sb := range list {
		if sb.State == sandbox.StateTerminated || sb.State == sandbox.StateTerminating {
			continue
		}
		lt := LifetimeOf(sb)
		if lt == nil {
			continue
		}
		var err error
		switch {
		case lt.ExpiresAt != nil && !now.Before(*lt.ExpiresAt):
			r.log.Info("sandbox past its time to live", "sandbox", sb.ID, "generation", sb.Generation, "expired", lt.ExpiresAt)
			_, err = r.terminate(ctx, sb.ID, sb.Generation, ReasonTTLExpired)
		case lt.IdleSeconds > 0 && sb.State == sandbox.StateReady && r.idleFor(sb.ID, lt.Since, now) >= time.Duration(lt.IdleSeconds)*time.Second:
			if r.runsProcesses(ctx, sb.Ref()) {
				r.Active(sb.ID)() // a process running in the background is use
				continue
			}
			r.log.Info("sandbox idle", "sandbox", sb.ID, "generation", sb.Generation, "action", lt.OnIdle)
			if lt.OnIdle == "pause" {
				_, err = r.pauseResume(ctx, sb.ID, sb.Generation, pauseOp, ReasonIdle)
			} else {
				_, err = r.terminate(ctx, sb.ID, sb.Generation, ReasonIdle)
			}
		}
		if err != nil && ctx.Err() == nil {
			r.log.Warn("lifetimes: automatic transition failed", "sandbox", sb.ID, "generation", sb.Generation, "err", err)
		}
	}
}

// forgetActivity drops what is known of the use of sandboxes not in list or terminated, with no request
// open: ids a client named that are no sandbox, or no longer a live one.
func (r *Runtime) forgetActivity(list []*sandbox.Sandbox) {
	live := make(map[sandbox.ID]bool, len(list))
	for _, sb := range list {
		live[sb.ID] = sb.State != sandbox.StateTerminated
	}
	r.activeMu.Lock()
	defer r.activeMu.Unlock()
	for id, a := range r.active {
		if !live[id] && a.open == 0 {
			delete(r.active, id)
		}
	}
}

// runsProcesses reports whether a background process runs in ref (sandbox.ProcessManager), or whether
// the provider could not say: a sandbox is never idled on a guess.
func (r *Runtime) runsProcesses(ctx context.Context, ref sandbox.Ref) bool {
	pm, ok := r.prov.(sandbox.ProcessManager)
	if !ok {
		return false
	}
	var list []sandbox.Process
	err := r.call(ctx, "list processes", func(ctx context.Context) (err error) {
		list, err = pm.ListProcesses(ctx, ref)
		return err
	})
	if errors.Is(err, sandbox.ErrUnsupportedCapability) {
		return false
	}
	if err != nil {
		r.log.Warn("lifetimes: cannot tell whether a sandbox runs processes; not idled this time", "sandbox", ref.ID, "err", err)
		return true
	}
	for _, p := range list {
		if p.Running {
			return true
		}
	}
	return false
}
