package agentclient

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandbox"
)

// The DataPlane's background processes: each call finds the sandbox's agent and makes the call,
// bounded by CallTimeout (and a long poll by its wait on top).

var _ sandbox.ProcessManager = DataPlane{}

func (d DataPlane) withAgent(ctx context.Context, ref sandbox.Ref, op string, wait time.Duration, f func(ctx context.Context, c *Client) error) error {
	c, err := d.Agents.Agent(ctx, ref)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d.CallTimeout+wait)
	defer cancel()
	if err := f(ctx, c); err != nil {
		return fmt.Errorf("%s in %s: %w", op, ref, err)
	}
	return nil
}

// StartProcess starts a background process in the sandbox.
func (d DataPlane) StartProcess(ctx context.Context, ref sandbox.Ref, spec sandbox.ProcessSpec) (p sandbox.Process, err error) {
	err = d.withAgent(ctx, ref, "start process", 0, func(ctx context.Context, c *Client) (err error) {
		p, err = c.StartProcess(ctx, spec)
		return err
	})
	return p, err
}

// ListProcesses lists the sandbox's background processes.
func (d DataPlane) ListProcesses(ctx context.Context, ref sandbox.Ref) (list []sandbox.Process, err error) {
	err = d.withAgent(ctx, ref, "list processes", 0, func(ctx context.Context, c *Client) (err error) {
		list, err = c.Processes(ctx)
		return err
	})
	return list, err
}

// GetProcess returns one process, waiting up to wait for it to end.
func (d DataPlane) GetProcess(ctx context.Context, ref sandbox.Ref, pid int, wait time.Duration) (p sandbox.Process, err error) {
	err = d.withAgent(ctx, ref, "get process", wait, func(ctx context.Context, c *Client) (err error) {
		p, err = c.Process(ctx, pid, wait)
		return err
	})
	return p, err
}

// ReadOutput reads a process's output from offset after.
func (d DataPlane) ReadOutput(ctx context.Context, ref sandbox.Ref, pid int, after int64, max int, wait time.Duration) (out sandbox.OutputChunk, err error) {
	err = d.withAgent(ctx, ref, "read output", wait, func(ctx context.Context, c *Client) (err error) {
		out, err = c.Output(ctx, pid, after, max, wait)
		return err
	})
	return out, err
}

// WriteStdin writes to a process's stdin.
func (d DataPlane) WriteStdin(ctx context.Context, ref sandbox.Ref, pid int, data []byte, closeStdin bool) error {
	return d.withAgent(ctx, ref, "write stdin", 0, func(ctx context.Context, c *Client) error { return c.Stdin(ctx, pid, data, closeStdin) })
}

// SignalProcess signals a process's group.
func (d DataPlane) SignalProcess(ctx context.Context, ref sandbox.Ref, pid int, signal string) error {
	return d.withAgent(ctx, ref, "signal process", 0, func(ctx context.Context, c *Client) error { return c.Signal(ctx, pid, signal) })
}
