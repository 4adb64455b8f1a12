// Package fault is a fault-injecting sandbox provider, for tests only. It wraps a real provider and
// lets a test replace any method's behaviour through a function field: return an error, hang until
// the context is done, mangle what the inner provider returned, or let the inner call run and then
// fail as if the provider crashed half way. Lose releases a resource behind the runtime's back.
//
// Main invariant: with no hook set, the wrapper behaves exactly like the inner provider.
package fault

import (
	"context"
	"fmt"
	"sync"

	"github.com/sandboxd/sandbox"
)

// Op names the call a hook intercepts.
type Op struct {
	Method string      // "Manifest", "Allocate", "Observe", "Release", "Resources", "Exec", "ReadFile", ...
	Ref    sandbox.Ref // zero for Manifest and Resources
	Path   string      // for the file methods
}

// Hook intercepts one call. call runs the inner provider; a hook may call it, skip it, or change its
// answer. Methods that return only an error use T = struct{}.
type Hook[T any] func(ctx context.Context, op Op, call func(context.Context) (T, error)) (T, error)

// Fail returns err without calling the inner provider.
func Fail[T any](err error) Hook[T] {
	return func(context.Context, Op, func(context.Context) (T, error)) (T, error) {
		var zero T
		return zero, err
	}
}

// Hang blocks until ctx is done and returns its error, without calling the inner provider.
func Hang[T any]() Hook[T] {
	return func(ctx context.Context, _ Op, _ func(context.Context) (T, error)) (T, error) {
		<-ctx.Done()
		var zero T
		return zero, ctx.Err()
	}
}

// Hold returns a hook that holds every call until release is called, then makes it; entered is closed
// when the first call arrives. It lets a test change the world while a call is under way.
func Hold[T any]() (h Hook[T], entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	var arrived, released sync.Once
	h = func(ctx context.Context, _ Op, call func(context.Context) (T, error)) (T, error) {
		arrived.Do(func() { close(in) })
		select {
		case <-out:
			return call(ctx)
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
	}
	return h, in, func() { released.Do(func() { close(out) }) }
}

// Crash runs the inner call to its end and then returns err instead of its answer, as a provider that
// did the work but died before replying.
func Crash[T any](err error) Hook[T] {
	return func(ctx context.Context, _ Op, call func(context.Context) (T, error)) (T, error) {
		_, _ = call(ctx)
		var zero T
		return zero, err
	}
}

// Mangle runs the inner call and passes a successful answer through f, to make it malformed.
func Mangle[T any](f func(T) T) Hook[T] {
	return func(ctx context.Context, _ Op, call func(context.Context) (T, error)) (T, error) {
		v, err := call(ctx)
		if err != nil {
			return v, err
		}
		return f(v), nil
	}
}

// Only applies h to calls about ref and lets the others through.
func Only[T any](ref sandbox.Ref, h Hook[T]) Hook[T] {
	return func(ctx context.Context, op Op, call func(context.Context) (T, error)) (T, error) {
		if op.Ref != ref {
			return call(ctx)
		}
		return h(ctx, op, call)
	}
}

// Provider wraps Inner. Set the hook fields before use, or under SetHooks' lock afterwards.
// Executor, FileSystem and PauseResumer methods return ErrUnsupportedCapability when Inner does not
// implement them.
type Provider struct {
	Inner sandbox.Provider

	OnManifest  Hook[sandbox.Manifest]
	OnAllocate  Hook[sandbox.Observation]
	OnObserve   Hook[sandbox.Observation]
	OnRelease   Hook[struct{}]
	OnResources Hook[[]sandbox.Ref]
	OnExec      Hook[sandbox.CommandResult]
	OnReadFile  Hook[[]byte]
	OnWriteFile Hook[struct{}]
	OnListFiles Hook[[]sandbox.FileEntry]
	OnPause     Hook[struct{}]
	OnResume    Hook[struct{}]

	mu    sync.Mutex
	calls map[string]int
}

var (
	_ sandbox.Provider     = (*Provider)(nil)
	_ sandbox.Executor     = (*Provider)(nil)
	_ sandbox.FileSystem   = (*Provider)(nil)
	_ sandbox.PauseResumer = (*Provider)(nil)
)

// New wraps inner with no hooks set.
func New(inner sandbox.Provider) *Provider { return &Provider{Inner: inner} }

// SetHooks changes hooks while calls may be running.
func (p *Provider) SetHooks(f func(p *Provider)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

// Calls returns how many times method was called on the wrapper, hooked or not.
func (p *Provider) Calls(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[method]
}

// Lose releases ref in the inner provider without the runtime knowing: the resource is gone behind
// its back.
func (p *Provider) Lose(ctx context.Context, ref sandbox.Ref) error { return p.Inner.Release(ctx, ref) }

// do counts the call, reads the hook under the lock and runs it, or the inner call when it is nil.
func do[T any](p *Provider, ctx context.Context, op Op, hook *Hook[T], call func(context.Context) (T, error)) (T, error) {
	p.mu.Lock()
	if p.calls == nil {
		p.calls = make(map[string]int)
	}
	p.calls[op.Method]++
	h := *hook
	p.mu.Unlock()
	if h == nil {
		return call(ctx)
	}
	return h(ctx, op, call)
}

func unit(err error) (struct{}, error) { return struct{}{}, err }

func unsupported[T any](op Op) (T, error) {
	var zero T
	return zero, fmt.Errorf("fault provider: inner provider has no %s: %w", op.Method, sandbox.ErrUnsupportedCapability)
}

// Manifest implements sandbox.Provider.
func (p *Provider) Manifest(ctx context.Context) (sandbox.Manifest, error) {
	return do(p, ctx, Op{Method: "Manifest"}, &p.OnManifest, p.Inner.Manifest)
}

// Allocate implements sandbox.Provider.
func (p *Provider) Allocate(ctx context.Context, ref sandbox.Ref, spec sandbox.Spec) (sandbox.Observation, error) {
	return do(p, ctx, Op{Method: "Allocate", Ref: ref}, &p.OnAllocate, func(ctx context.Context) (sandbox.Observation, error) {
		return p.Inner.Allocate(ctx, ref, spec)
	})
}

// Observe implements sandbox.Provider.
func (p *Provider) Observe(ctx context.Context, ref sandbox.Ref) (sandbox.Observation, error) {
	return do(p, ctx, Op{Method: "Observe", Ref: ref}, &p.OnObserve, func(ctx context.Context) (sandbox.Observation, error) {
		return p.Inner.Observe(ctx, ref)
	})
}

// Release implements sandbox.Provider.
func (p *Provider) Release(ctx context.Context, ref sandbox.Ref) error {
	_, err := do(p, ctx, Op{Method: "Release", Ref: ref}, &p.OnRelease, func(ctx context.Context) (struct{}, error) {
		return unit(p.Inner.Release(ctx, ref))
	})
	return err
}

// Resources implements sandbox.Provider.
func (p *Provider) Resources(ctx context.Context) ([]sandbox.Ref, error) {
	return do(p, ctx, Op{Method: "Resources"}, &p.OnResources, p.Inner.Resources)
}

// Exec implements sandbox.Executor.
func (p *Provider) Exec(ctx context.Context, ref sandbox.Ref, cmd sandbox.Command) (sandbox.CommandResult, error) {
	op := Op{Method: "Exec", Ref: ref}
	return do(p, ctx, op, &p.OnExec, func(ctx context.Context) (sandbox.CommandResult, error) {
		e, ok := p.Inner.(sandbox.Executor)
		if !ok {
			return unsupported[sandbox.CommandResult](op)
		}
		return e.Exec(ctx, ref, cmd)
	})
}

func (p *Provider) fs(op Op) (sandbox.FileSystem, error) {
	fs, ok := p.Inner.(sandbox.FileSystem)
	if !ok {
		_, err := unsupported[struct{}](op)
		return nil, err
	}
	return fs, nil
}

// ReadFile implements sandbox.FileSystem.
func (p *Provider) ReadFile(ctx context.Context, ref sandbox.Ref, path string) ([]byte, error) {
	op := Op{Method: "ReadFile", Ref: ref, Path: path}
	return do(p, ctx, op, &p.OnReadFile, func(ctx context.Context) ([]byte, error) {
		fs, err := p.fs(op)
		if err != nil {
			return nil, err
		}
		return fs.ReadFile(ctx, ref, path)
	})
}

// WriteFile implements sandbox.FileSystem.
func (p *Provider) WriteFile(ctx context.Context, ref sandbox.Ref, path string, data []byte) error {
	op := Op{Method: "WriteFile", Ref: ref, Path: path}
	_, err := do(p, ctx, op, &p.OnWriteFile, func(ctx context.Context) (struct{}, error) {
		fs, err := p.fs(op)
		if err != nil {
			return unit(err)
		}
		return unit(fs.WriteFile(ctx, ref, path, data))
	})
	return err
}

// ListFiles implements sandbox.FileSystem.
func (p *Provider) ListFiles(ctx context.Context, ref sandbox.Ref, path string) ([]sandbox.FileEntry, error) {
	op := Op{Method: "ListFiles", Ref: ref, Path: path}
	return do(p, ctx, op, &p.OnListFiles, func(ctx context.Context) ([]sandbox.FileEntry, error) {
		fs, err := p.fs(op)
		if err != nil {
			return nil, err
		}
		return fs.ListFiles(ctx, ref, path)
	})
}

// Pause implements sandbox.PauseResumer.
func (p *Provider) Pause(ctx context.Context, ref sandbox.Ref) error {
	op := Op{Method: "Pause", Ref: ref}
	_, err := do(p, ctx, op, &p.OnPause, func(ctx context.Context) (struct{}, error) {
		pr, ok := p.Inner.(sandbox.PauseResumer)
		if !ok {
			return unsupported[struct{}](op)
		}
		return unit(pr.Pause(ctx, ref))
	})
	return err
}

// Resume implements sandbox.PauseResumer.
func (p *Provider) Resume(ctx context.Context, ref sandbox.Ref) error {
	op := Op{Method: "Resume", Ref: ref}
	_, err := do(p, ctx, op, &p.OnResume, func(ctx context.Context) (struct{}, error) {
		pr, ok := p.Inner.(sandbox.PauseResumer)
		if !ok {
			return unsupported[struct{}](op)
		}
		return unit(pr.Resume(ctx, ref))
	})
	return err
}
