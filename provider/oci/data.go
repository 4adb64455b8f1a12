package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sandboxd/sandbox"
)

// execSlack is how much longer than a command's timeout the provider waits for its result: the agent
// needs time to kill the group and answer.
const execSlack = 5 * time.Second

// cancelWait bounds how long a cancelled Exec waits for the agent's cancelled result.
const cancelWait = 3 * time.Second

// usable returns the box of ref when it can take data calls. Errors: ErrNotFound when the provider
// holds nothing for ref, ErrInvalidState when it is paused.
func (p *Provider) usable(ctx context.Context, ref sandbox.Ref) (*box, error) {
	b := p.box(ref)
	if !b.known.Load() {
		b.mu.Lock()
		if !b.known.Load() {
			st, err := p.runc.state(ctx, b.container())
			switch {
			case errors.Is(err, errNoContainer):
				b.mu.Unlock()
				if _, serr := os.Stat(b.l.dir); os.IsNotExist(serr) {
					p.forget(b)
				}
				return nil, fmt.Errorf("sandbox %s: %w", ref, sandbox.ErrNotFound)
			case err != nil:
				b.mu.Unlock()
				return nil, fmt.Errorf("sandbox %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
			}
			b.paused.Store(st.Status == "paused")
			b.known.Store(true)
		}
		b.mu.Unlock()
	}
	if b.paused.Load() {
		return nil, fmt.Errorf("sandbox %s is paused: %w", ref, sandbox.ErrInvalidState)
	}
	return b, nil
}

// Exec runs cmd through the sandbox's agent. When ctx ends first, the command is cancelled and its
// result says so. Errors: ErrNotFound, ErrInvalidState (paused), ErrInvalidRequest,
// ErrProviderUnavailable (agent unreachable or silent), ErrProviderProtocol (malformed answer).
func (p *Provider) Exec(ctx context.Context, ref sandbox.Ref, cmd sandbox.Command) (sandbox.CommandResult, error) {
	b, err := p.usable(ctx, ref)
	if err != nil {
		return sandbox.CommandResult{}, err
	}
	res, err := b.client.Run(ctx, cmd, execSlack, cancelWait)
	if err != nil {
		return sandbox.CommandResult{}, fmt.Errorf("exec in %s: %w", ref, err)
	}
	return res, nil
}

// ReadFile reads a file inside the sandbox. Errors: ErrNotFound (sandbox or file), ErrInvalidRequest
// (a directory, or too large), ErrInvalidState, ErrProviderUnavailable, ErrProviderProtocol.
func (p *Provider) ReadFile(ctx context.Context, ref sandbox.Ref, path string) ([]byte, error) {
	b, err := p.usable(ctx, ref)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	data, err := b.client.ReadFile(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("read in %s: %w", ref, err)
	}
	return data, nil
}

// WriteFile replaces a file inside the sandbox atomically, creating parent directories.
// Errors: as ReadFile.
func (p *Provider) WriteFile(ctx context.Context, ref sandbox.Ref, path string, data []byte) error {
	b, err := p.usable(ctx, ref)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	if err := b.client.WriteFile(ctx, path, data); err != nil {
		return fmt.Errorf("write in %s: %w", ref, err)
	}
	return nil
}

// ListFiles lists one directory inside the sandbox. Errors: as ReadFile.
func (p *Provider) ListFiles(ctx context.Context, ref sandbox.Ref, path string) ([]sandbox.FileEntry, error) {
	b, err := p.usable(ctx, ref)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	entries, err := b.client.List(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("list in %s: %w", ref, err)
	}
	return entries, nil
}
