package core

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandbox"
)

// Background processes: each call is checked like the contract's data plane (dataPlane: the sandbox
// exists, the provider runs commands, the generation matches, the sandbox is ready), then made through
// the provider's sandbox.ProcessManager, which a provider without one answers 422 to. The processes and
// their output are the sandbox's (its agent keeps them): the daemon holds nothing of them between
// calls, so a restart of it loses nothing.

// MaxOutputRead bounds the bytes of one ReadOutput.
const MaxOutputRead = 1 << 20

// maxPoll bounds one long poll to the provider; a longer wait is made of several.
const maxPoll = 25 * time.Second

func (r *Runtime) processes(ctx context.Context, id sandbox.ID, gen sandbox.Generation, op string) (sandbox.Ref, sandbox.ProcessManager, error) {
	ref, err := r.dataPlane(ctx, id, gen, op, sandbox.CapCommandExecution)
	if err != nil {
		return sandbox.Ref{}, nil, err
	}
	pm, ok := r.prov.(sandbox.ProcessManager)
	if !ok {
		return sandbox.Ref{}, nil, fmt.Errorf("provider cannot run background processes: %w", sandbox.ErrUnsupportedCapability)
	}
	return ref, pm, nil
}

// processCall makes one provider call on ref's processes, bounded by the provider timeout and wait,
// ended by the caller's context; a provider failure that is not the caller's going away schedules a
// reconcile.
func (r *Runtime) processCall(ctx context.Context, ref sandbox.Ref, op string, wait time.Duration, fn func(ctx context.Context) error) error {
	err := r.callFor(ctx, op, r.cfg.ProviderTimeout+wait, false, fn)
	if err != nil && ctx.Err() == nil {
		r.providerTrouble(ref, err)
	}
	return err
}

func checkPID(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("pid %d: %w", pid, sandbox.ErrInvalidRequest)
	}
	return nil
}

// StartProcess starts a background process in a ready sandbox.
//
// Errors: ErrNotFound, ErrInvalidRequest, ErrUnsupportedCapability, ErrGenerationConflict,
// ErrInvalidState, ErrProviderUnavailable, ErrProviderProtocol.
func (r *Runtime) StartProcess(ctx context.Context, id sandbox.ID, gen sandbox.Generation, spec sandbox.ProcessSpec) (sandbox.Process, error) {
	if err := spec.Validate(); err != nil {
		return sandbox.Process{}, err
	}
	ref, pm, err := r.processes(ctx, id, gen, "start process")
	if err != nil {
		return sandbox.Process{}, err
	}
	if spec.PTY != nil {
		if err := r.terminals(pm); err != nil {
			return sandbox.Process{}, err
		}
	}
	var p sandbox.Process
	// Detached: the process outlives the request that starts it, and so must its start.
	err = r.callFor(ctx, "start process", r.cfg.ProviderTimeout, true, func(ctx context.Context) (err error) {
		p, err = pm.StartProcess(ctx, ref, spec)
		return err
	})
	if err != nil {
		r.providerTrouble(ref, err)
		return sandbox.Process{}, err
	}
	return p, nil
}

// ListProcesses lists a ready sandbox's background processes, oldest first. Errors: as StartProcess.
func (r *Runtime) ListProcesses(ctx context.Context, id sandbox.ID, gen sandbox.Generation) ([]sandbox.Process, error) {
	ref, pm, err := r.processes(ctx, id, gen, "list processes")
	if err != nil {
		return nil, err
	}
	var list []sandbox.Process
	err = r.processCall(ctx, ref, "list processes", 0, func(ctx context.Context) (err error) {
		list, err = pm.ListProcesses(ctx, ref)
		return err
	})
	return list, err
}

// WaitProcess returns a process of a ready sandbox once it has ended, or as it is when timeout
// passes first (Running says which). A zero timeout answers at once. Errors: as StartProcess, and
// ErrNotFound for a pid the sandbox does not know.
func (r *Runtime) WaitProcess(ctx context.Context, id sandbox.ID, gen sandbox.Generation, pid int, timeout time.Duration) (sandbox.Process, error) {
	if err := checkPID(pid); err != nil {
		return sandbox.Process{}, err
	}
	if timeout < 0 || timeout > sandbox.MaxProcessWait {
		return sandbox.Process{}, fmt.Errorf("wait of %v out of 0..%v: %w", timeout, sandbox.MaxProcessWait, sandbox.ErrInvalidRequest)
	}
	deadline := time.Now().Add(timeout)
	for {
		// Each poll is checked again: a sandbox paused or terminated meanwhile ends the wait.
		ref, pm, err := r.processes(ctx, id, gen, "wait process")
		if err != nil {
			return sandbox.Process{}, err
		}
		wait := min(max(time.Until(deadline), 0), maxPoll)
		var p sandbox.Process
		err = r.processCall(ctx, ref, "wait process", wait, func(ctx context.Context) (err error) {
			p, err = pm.GetProcess(ctx, ref, pid, wait)
			return err
		})
		if err != nil || !p.Running || !time.Now().Before(deadline) {
			return p, err
		}
	}
}

// ReadOutput reads up to max bytes (at most MaxOutputRead) of a process's output from offset after,
// waiting up to wait (at most maxPoll) for one when none is there yet. Errors: as WaitProcess, and
// ErrInvalidRequest for an offset past the end.
func (r *Runtime) ReadOutput(ctx context.Context, id sandbox.ID, gen sandbox.Generation, pid int, after int64, max int, wait time.Duration) (sandbox.OutputChunk, error) {
	if err := checkPID(pid); err != nil {
		return sandbox.OutputChunk{}, err
	}
	if after < 0 || max <= 0 {
		return sandbox.OutputChunk{}, fmt.Errorf("read of %d bytes from %d: %w", max, after, sandbox.ErrInvalidRequest)
	}
	max, wait = min(max, MaxOutputRead), min(wait, maxPoll)
	ref, pm, err := r.processes(ctx, id, gen, "read output")
	if err != nil {
		return sandbox.OutputChunk{}, err
	}
	var out sandbox.OutputChunk
	err = r.processCall(ctx, ref, "read output", wait, func(ctx context.Context) (err error) {
		out, err = pm.ReadOutput(ctx, ref, pid, after, max, wait)
		return err
	})
	if err == nil && (out.Start < after || len(out.Data) > max || out.Start+int64(len(out.Data)) > out.End) {
		err = fmt.Errorf("read output of %d from %d: %d bytes from %d, end %d: %w", pid, after, len(out.Data), out.Start, out.End, sandbox.ErrProviderProtocol)
	}
	return out, err
}

// WriteStdin writes data to a process's stdin, then closes it when closeStdin. Errors: as
// WaitProcess, and ErrInvalidState for a stdin that is closed or a process that does not read it.
func (r *Runtime) WriteStdin(ctx context.Context, id sandbox.ID, gen sandbox.Generation, pid int, data []byte, closeStdin bool) error {
	if err := checkPID(pid); err != nil {
		return err
	}
	if len(data) > sandbox.MaxProcessStdinBytes {
		return fmt.Errorf("stdin of %d bytes past %d: %w", len(data), sandbox.MaxProcessStdinBytes, sandbox.ErrInvalidRequest)
	}
	ref, pm, err := r.processes(ctx, id, gen, "write stdin")
	if err != nil {
		return err
	}
	return r.processCall(ctx, ref, "write stdin", 0, func(ctx context.Context) error {
		return pm.WriteStdin(ctx, ref, pid, data, closeStdin)
	})
}

// SignalProcess sends a signal (one of sandbox.ProcessSignals) to a process's group. Errors: as
// WaitProcess, and ErrInvalidState for a process that has exited.
func (r *Runtime) SignalProcess(ctx context.Context, id sandbox.ID, gen sandbox.Generation, pid int, signal string) error {
	if err := checkPID(pid); err != nil {
		return err
	}
	known := false
	for _, s := range sandbox.ProcessSignals {
		known = known || s == signal
	}
	if !known {
		return fmt.Errorf("signal %.16q is none of %v: %w", signal, sandbox.ProcessSignals, sandbox.ErrInvalidRequest)
	}
	ref, pm, err := r.processes(ctx, id, gen, "signal process")
	if err != nil {
		return err
	}
	return r.processCall(ctx, ref, "signal process", 0, func(ctx context.Context) error {
		return pm.SignalProcess(ctx, ref, pid, signal)
	})
}

// ResizeProcess sets the size of a pty process's terminal. Errors: as WaitProcess, ErrInvalidRequest
// for a size out of bounds, ErrUnsupportedCapability when the provider has no terminals, and
// ErrInvalidState for a process without a terminal or that has exited.
func (r *Runtime) ResizeProcess(ctx context.Context, id sandbox.ID, gen sandbox.Generation, pid int, size sandbox.TerminalSize) error {
	if err := checkPID(pid); err != nil {
		return err
	}
	if err := size.Validate(); err != nil {
		return err
	}
	ref, pm, err := r.processes(ctx, id, gen, "resize process")
	if err != nil {
		return err
	}
	if err := r.terminals(pm); err != nil {
		return err
	}
	tm := pm.(sandbox.TerminalManager)
	return r.processCall(ctx, ref, "resize process", 0, func(ctx context.Context) error {
		return tm.ResizeProcess(ctx, ref, pid, size)
	})
}

// terminals refuses a provider whose processes cannot run on a pseudo-terminal: one that does not
// say interactiveTerminal, or has no TerminalManager.
func (r *Runtime) terminals(pm sandbox.ProcessManager) error {
	if err := r.require(sandbox.CapInteractiveTerminal); err != nil {
		return err
	}
	if _, ok := pm.(sandbox.TerminalManager); !ok {
		return fmt.Errorf("provider has no terminals: %w", sandbox.ErrUnsupportedCapability)
	}
	return nil
}

// AttachTerminal opens the stream of a pty process's terminal from offset after, where the provider
// has them (sandbox.TerminalStreamer); the sandbox says it is there every beat. Only the opening is
// bounded by the provider timeout; the stream is the caller's to close. Errors: as WaitProcess,
// ErrInvalidRequest for an offset past the end, and ErrUnsupportedCapability where there is no stream
// (the provider, the sandbox's agent, or a process without a terminal): the caller reads and writes
// through ReadOutput and WriteStdin instead.
func (r *Runtime) AttachTerminal(ctx context.Context, id sandbox.ID, gen sandbox.Generation, pid int, after int64, beat time.Duration) (sandbox.TerminalStream, error) {
	if err := checkPID(pid); err != nil {
		return nil, err
	}
	if after < 0 {
		return nil, fmt.Errorf("offset %d is negative: %w", after, sandbox.ErrInvalidRequest)
	}
	ref, pm, err := r.processes(ctx, id, gen, "attach terminal")
	if err != nil {
		return nil, err
	}
	ts, ok := pm.(sandbox.TerminalStreamer)
	if !ok || r.terminals(pm) != nil {
		return nil, fmt.Errorf("provider has no terminal streams: %w", sandbox.ErrUnsupportedCapability)
	}
	var st sandbox.TerminalStream
	err = r.processCall(ctx, ref, "attach terminal", 0, func(ctx context.Context) (err error) {
		st, err = ts.AttachTerminal(ctx, ref, pid, after, beat)
		return err
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// StreamFailed tells the runtime that a terminal stream of generation gen of sandbox id failed with
// err after it opened: as a failed call's, a provider failure schedules a reconcile of the sandbox.
func (r *Runtime) StreamFailed(id sandbox.ID, gen sandbox.Generation, err error) {
	r.providerTrouble(sandbox.Ref{ID: id, Generation: gen}, err)
}
