package agentclient

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandbox"
)

// Agents finds the agent of each of a provider's sandboxes: which sandboxes it holds, and how each
// agent is reached, are the provider's.
type Agents interface {
	// Agent returns the client of the agent of a sandbox that can take data calls now, or the error
	// that says why not (ErrNotFound, ErrInvalidState when paused, ErrProviderUnavailable).
	Agent(ctx context.Context, ref sandbox.Ref) (*Client, error)
}

// DataPlane is a provider's sandbox.Executor and sandbox.FileSystem when every sandbox has an agent:
// it finds the sandbox's client through Agents and makes the call through it. The oci and kubernetes
// providers embed one.
type DataPlane struct {
	Agents Agents
	// ExecSlack is how much longer than a command's timeout Exec waits for its result (the agent
	// needs time to kill the group and answer); CancelWait bounds the wait for a cancelled command's
	// result; CallTimeout bounds a file call.
	ExecSlack, CancelWait, CallTimeout time.Duration
}

// Exec runs cmd through the sandbox's agent. When ctx ends first, the command is cancelled and its
// result says so. Errors: those of Agents, ErrInvalidRequest, ErrProviderUnavailable (agent
// unreachable or silent), ErrProviderProtocol (malformed answer).
func (d DataPlane) Exec(ctx context.Context, ref sandbox.Ref, cmd sandbox.Command) (sandbox.CommandResult, error) {
	c, err := d.Agents.Agent(ctx, ref)
	if err != nil {
		return sandbox.CommandResult{}, err
	}
	res, err := c.Run(ctx, cmd, d.ExecSlack, d.CancelWait)
	if err != nil {
		return sandbox.CommandResult{}, fmt.Errorf("exec in %s: %w", ref, err)
	}
	return res, nil
}

// ReadFile reads a file inside the sandbox. Errors: those of Agents, ErrNotFound (the file),
// ErrInvalidRequest (a directory, or too large), ErrProviderUnavailable, ErrProviderProtocol.
func (d DataPlane) ReadFile(ctx context.Context, ref sandbox.Ref, path string) ([]byte, error) {
	c, err := d.Agents.Agent(ctx, ref)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.CallTimeout)
	defer cancel()
	data, err := c.ReadFile(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("read in %s: %w", ref, err)
	}
	return data, nil
}

// WriteFile replaces a file inside the sandbox atomically, creating parent directories.
// Errors: as ReadFile.
func (d DataPlane) WriteFile(ctx context.Context, ref sandbox.Ref, path string, data []byte) error {
	c, err := d.Agents.Agent(ctx, ref)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d.CallTimeout)
	defer cancel()
	if err := c.WriteFile(ctx, path, data); err != nil {
		return fmt.Errorf("write in %s: %w", ref, err)
	}
	return nil
}

// ListFiles lists one directory inside the sandbox. Errors: as ReadFile.
func (d DataPlane) ListFiles(ctx context.Context, ref sandbox.Ref, path string) ([]sandbox.FileEntry, error) {
	c, err := d.Agents.Agent(ctx, ref)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.CallTimeout)
	defer cancel()
	entries, err := c.List(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("list in %s: %w", ref, err)
	}
	return entries, nil
}

var (
	_ sandbox.Executor   = DataPlane{}
	_ sandbox.FileSystem = DataPlane{}
)
