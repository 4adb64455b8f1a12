package oci

import (
	"context"
	"fmt"
	"os"

	"github.com/sandboxd/sandbox"
)

// RawBundle is one generation's bundle laid out exactly as Allocate lays it out, but not started: what a
// benchmark hands to the runtime binary itself, to measure the provider beside its floor.
type RawBundle struct {
	Runtime string // the runtime binary
	Root    string // its state root, for --root
	Dir     string // the bundle directory, for --bundle
	Name    string // the container name
	Socket  string // the host path of the agent's socket

	// Files are what the agent takes as descriptors 3, 4, …: its listening socket, bound at Socket,
	// and its seccomp program. Pass them to the runtime as exec.Cmd.ExtraFiles with
	// --preserve-fds len(Files), and close them once it has returned.
	Files []*os.File
}

// PrepareBundle lays out the bundle of ref as Allocate would, and returns it without starting it. The
// caller may run it with `Runtime --root Root run -d --preserve-fds 2 --bundle Dir Name`, Files as
// descriptors 3 and 4; Release(ref) removes it, started or not. Errors: ErrInvalidRequest for unusable resources, ErrProviderUnavailable otherwise (an
// existing generation of the same name included, and a runtime other than runc, which takes no
// descriptor this way).
func (p *Provider) PrepareBundle(ctx context.Context, ref sandbox.Ref, spec sandbox.Spec) (RawBundle, error) {
	if p.runc.class != classRunc {
		return RawBundle{}, fmt.Errorf("prepare %s: a raw bundle is runc's, and the runtime is %s: %w", ref, p.runc.class, sandbox.ErrProviderUnavailable)
	}
	res, rerr := p.resources(spec)
	if rerr != nil {
		return RawBundle{}, rerr
	}
	b := p.box(ref)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := os.Stat(b.l.dir); err == nil {
		return RawBundle{}, fmt.Errorf("prepare %s: it exists: %w", ref, sandbox.ErrProviderUnavailable)
	}
	m, _, err := p.prepare(ctx, b, res, false)
	if err == nil {
		// The runtime makes the user namespace itself: what a caller of the runtime does.
		err = p.writeBundle(b.l, m, "")
	}
	var ln, filter *os.File
	if err == nil {
		ln, err = listenAgent(b.l)
	}
	if err == nil {
		if filter, err = seccompFile(); err != nil {
			ln.Close()
		}
	}
	if err != nil {
		if cerr := p.releaseLocked(context.WithoutCancel(ctx), b); cerr != nil {
			p.log.Error("cleaning up a failed bundle", "sandbox", ref, "err", cerr)
		}
		return RawBundle{}, fmt.Errorf("prepare %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	// The container will be started behind the provider's back: the next data call looks at it first.
	b.known.Store(false)
	b.gone.Store(false)
	return RawBundle{Runtime: p.runc.path, Root: p.runc.root, Dir: b.l.dir, Name: ref.Name(), Socket: b.l.socket(),
		Files: []*os.File{ln, filter}}, nil
}
