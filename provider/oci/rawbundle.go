package oci

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/sandboxd/sandbox"
)

// RawBundle is one generation's bundle laid out exactly as Allocate lays it out, but not started: what a
// benchmark hands to the runtime binary itself, to measure the provider beside its floor.
type RawBundle struct {
	Runtime string   // the runtime binary
	Root    string   // its state root, for --root
	Flags   []string // the global flags the provider passes it (gVisor's)
	Dir     string   // the bundle directory, for --bundle
	Name    string   // the container name
	Socket  string   // the host path of the agent's socket, to dial once the runtime has returned
	Log     string   // where the runtime logs, in JSON (LastError reads it)

	// Files are what the agent takes as descriptors 3, 4, … on runc: its listening socket, bound at
	// Socket, and its seccomp program; none on gVisor, whose agent binds Socket itself. Command
	// passes them; close them once the runtime has returned.
	Files []*os.File
}

// Command is the runtime's command line for sub (e.g. "run", "--detach", …, or "exec", Name, "true") with
// the root and flags the provider gives it; for "run", Files become the process's descriptors 3, ….
func (r RawBundle) Command(ctx context.Context, sub ...string) *exec.Cmd {
	args := append([]string{"--root", r.Root, "--log", r.Log, "--log-format", "json"}, r.Flags...)
	if len(sub) > 0 && sub[0] == "run" && len(r.Files) > 0 {
		sub = append([]string{"run", "--preserve-fds", strconv.Itoa(len(r.Files))}, sub[1:]...)
	}
	cmd := exec.CommandContext(ctx, r.Runtime, append(args, sub...)...)
	if len(sub) > 0 && sub[0] == "run" {
		cmd.ExtraFiles = r.Files
	}
	return cmd
}

// LastError is the last error the runtime logged, to say why a command failed.
func (r RawBundle) LastError() string { return lastLogError(r.Log) }

// PrepareBundle lays out the bundle of ref as Allocate would, and returns it without starting it. The
// caller may run it with `Command(ctx, "run", "--detach", "--bundle", Dir, Name)`; Release(ref) removes it,
// started or not. Errors: ErrInvalidRequest for unusable resources, ErrProviderUnavailable otherwise
// (an existing generation of the same name included).
func (p *Provider) PrepareBundle(ctx context.Context, ref sandbox.Ref, spec sandbox.Spec) (RawBundle, error) {
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
	m, _, err := p.prepare(ctx, b, res, nil, false)
	if err == nil {
		// The runtime makes the user namespace itself: what a caller of the runtime does.
		err = p.writeBundle(b.l, m, "")
	}
	gvisor := p.runc.class == classGVisor
	var ln, filter *os.File
	if err == nil && !gvisor {
		ln, err = listenAgent(b.l)
		if err == nil {
			if filter, err = seccompFile(); err != nil {
				ln.Close()
			}
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
	raw := RawBundle{Runtime: p.runc.path, Root: p.runc.root, Dir: b.l.dir, Name: ref.Name(), Socket: b.l.socket(),
		Log: b.l.runcLog(), Files: []*os.File{ln, filter}}
	if gvisor {
		raw.Flags, raw.Files = gvisorFlags, nil
		raw.Socket = filepath.Join(b.l.sockDir(), "agent.sock")
	}
	return raw, nil
}

// AdoptBundle makes the raw bundle of ref, started by hand, the provider's as Allocate's start would:
// on gVisor its runtime's processes are reaped and its agent's socket is taken, so that the provider's
// own calls reach it; on runc there is nothing to do.
func (p *Provider) AdoptBundle(ctx context.Context, ref sandbox.Ref) error {
	if p.runc.class != classGVisor {
		return nil
	}
	b := p.box(ref)
	b.mu.Lock()
	defer b.mu.Unlock()
	m, err := readMeta(b.l)
	if err != nil {
		return fmt.Errorf("adopt %s: %w", ref, err)
	}
	if err := p.adoptGVisor(ctx, b.l, m, ref.Name()); err != nil {
		return fmt.Errorf("adopt %s: %w", ref, err)
	}
	return nil
}
