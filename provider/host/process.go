package host

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// Background processes run the agent's own table (agent.Processes) in the daemon: each generation has
// one, beside its runner, whose journals are files of the daemon's temporary directory. They are the
// daemon's children, like the provider's commands: a restart of the daemon loses them (the oci
// provider's live in each sandbox's agent, and do not).

var _ sandbox.ProcessManager = (*Provider)(nil)

// table returns the process table of ref, once ref is allocated.
func (p *Provider) table(ref sandbox.Ref) (*agent.Processes, string, error) {
	dir, err := p.live(ref)
	if err != nil {
		return nil, "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.tables[ref.Name()]
	if t == nil {
		t = &agent.Processes{}
		p.tables[ref.Name()] = t
	}
	return t, dir, nil
}

// dropTable removes ref's journals once its processes are gone (Release).
func (p *Provider) dropTable(ref sandbox.Ref) {
	p.mu.Lock()
	t := p.tables[ref.Name()]
	delete(p.tables, ref.Name())
	p.mu.Unlock()
	if t != nil {
		t.Close()
	}
}

// StartProcess starts spec in ref's directory (spec.Cwd resolves inside it). Errors: ErrNotFound,
// ErrInvalidRequest, ErrInvalidState while paused.
func (p *Provider) StartProcess(_ context.Context, ref sandbox.Ref, spec sandbox.ProcessSpec) (sandbox.Process, error) {
	t, dir, err := p.table(ref)
	if err != nil {
		return sandbox.Process{}, err
	}
	cwd, err := p.resolveCwd(dir, spec.Cwd)
	if err != nil {
		return sandbox.Process{}, fmt.Errorf("host provider: start process in %s: %w", ref, err)
	}
	if spec.Cwd == "" {
		spec.Cwd = "/"
	}
	proc, err := t.Start(p.runner(ref, dir), cwd, "", spec)
	if err != nil {
		return sandbox.Process{}, fmt.Errorf("host provider: start process in %s: %w", ref, err)
	}
	return proc, nil
}

// ListProcesses lists ref's processes.
func (p *Provider) ListProcesses(_ context.Context, ref sandbox.Ref) ([]sandbox.Process, error) {
	t, _, err := p.table(ref)
	if err != nil {
		return nil, err
	}
	return t.List(), nil
}

// GetProcess returns one of ref's processes, waiting up to wait for it to end.
func (p *Provider) GetProcess(ctx context.Context, ref sandbox.Ref, pid int, wait time.Duration) (sandbox.Process, error) {
	t, _, err := p.table(ref)
	if err != nil {
		return sandbox.Process{}, err
	}
	return t.Wait(ctx, pid, wait)
}

// ReadOutput reads a process's output from offset after.
func (p *Provider) ReadOutput(ctx context.Context, ref sandbox.Ref, pid int, after int64, max int, wait time.Duration) (sandbox.OutputChunk, error) {
	t, _, err := p.table(ref)
	if err != nil {
		return sandbox.OutputChunk{}, err
	}
	return t.Read(ctx, pid, after, max, wait)
}

// WriteStdin writes to a process's stdin, within ctx's deadline.
func (p *Provider) WriteStdin(ctx context.Context, ref sandbox.Ref, pid int, data []byte, closeStdin bool) error {
	t, _, err := p.table(ref)
	if err != nil {
		return err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	return t.Stdin(pid, data, closeStdin, deadline)
}

// SignalProcess signals a process's group.
func (p *Provider) SignalProcess(_ context.Context, ref sandbox.Ref, pid int, signal string) error {
	t, _, err := p.table(ref)
	if err != nil {
		return err
	}
	return t.Signal(pid, signal)
}

var _ sandbox.TerminalManager = (*Provider)(nil)

// ResizeProcess sets the size of a pty process's terminal.
func (p *Provider) ResizeProcess(_ context.Context, ref sandbox.Ref, pid int, size sandbox.TerminalSize) error {
	t, _, err := p.table(ref)
	if err != nil {
		return err
	}
	return t.Resize(pid, size)
}

var _ sandbox.TerminalStreamer = (*Provider)(nil)

// AttachTerminal opens the terminal stream of a pty process of ref: the agent's own stream, served in
// the daemon on one end of a pipe whose other end is the stream returned.
func (p *Provider) AttachTerminal(_ context.Context, ref sandbox.Ref, pid int, after int64, beat time.Duration) (sandbox.TerminalStream, error) {
	t, _, err := p.table(ref)
	if err != nil {
		return nil, err
	}
	term, err := t.Terminal(pid, after)
	if errors.Is(err, agent.ErrNotTerminal) {
		return nil, fmt.Errorf("host provider: %v: %w", err, sandbox.ErrUnsupportedCapability)
	}
	if err != nil {
		return nil, fmt.Errorf("host provider: attach terminal in %s: %w", ref, err)
	}
	beat = min(max(beat, protocol.MinTerminalBeat), protocol.MaxTerminalBeat)
	theirs, ours := net.Pipe()
	go term.Serve(context.Background(), theirs, bufio.NewReader(theirs), beat)
	return agentclient.NewTerminalStream(ours, bufio.NewReader(ours), after, beat), nil
}
