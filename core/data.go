package core

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/sandboxd/sandbox"
)

// dataPlane checks what every command and file call needs, in the contract's order: the sandbox exists
// (ErrNotFound), the provider supports the call (ErrUnsupportedCapability), the generation matches
// (ErrGenerationConflict), and the sandbox is ready (ErrInvalidState).
func (r *Runtime) dataPlane(ctx context.Context, id sandbox.ID, gen sandbox.Generation, op string, c sandbox.Capability) (sandbox.Ref, error) {
	sb, err := r.store.Get(ctx, id)
	if err != nil {
		return sandbox.Ref{}, err
	}
	if sb, err = r.dataPlaneOf(ctx, sb, gen, op, c); err != nil {
		return sandbox.Ref{}, err
	}
	return sb.Ref(), nil
}

// dataPlaneOf is dataPlane on sb, the sandbox as the store holds it now; it returns the sandbox as it
// is once ready (resumed, if its lifetime says so).
func (r *Runtime) dataPlaneOf(ctx context.Context, sb *sandbox.Sandbox, gen sandbox.Generation, op string, c sandbox.Capability) (*sandbox.Sandbox, error) {
	id := sb.ID
	var err error
	if err := r.require(c); err != nil {
		return nil, err
	}
	if err := checkGeneration(sb, op, gen); err != nil {
		return nil, err
	}
	r.Active(id)() // a data-plane call is use, whoever makes it
	if lt := LifetimeOf(sb); sb.State == sandbox.StatePaused && lt != nil && lt.ResumeOnCall {
		// A sandbox whose lifetime pauses it when idle is resumed by the next call that needs it.
		if sb, err = r.pauseResume(ctx, id, gen, resumeOp, "resumed for "+op); err != nil {
			return nil, err
		}
	}
	if sb.State != sandbox.StateReady {
		return nil, fmt.Errorf("%s in sandbox %s: it is %s, not ready: %w", op, id, sb.State, sandbox.ErrInvalidState)
	}
	return sb, nil
}

// providerTrouble schedules a reconcile of ref after the provider failed a data-plane call, so that a
// sandbox whose resource broke is noticed and moved to failed.
func (r *Runtime) providerTrouble(ref sandbox.Ref, err error) {
	if !errors.Is(err, sandbox.ErrProviderUnavailable) && !errors.Is(err, sandbox.ErrProviderProtocol) {
		return
	}
	r.goBackground(func(ctx context.Context) {
		if sb, gerr := r.store.Get(ctx, ref.ID); gerr == nil && sb.Generation == ref.Generation {
			_, _ = r.reconcile(ctx, sb)
		}
	})
}

// Exec runs a command in a ready sandbox and records its completion as an event. The command is
// normalised here (sandbox.Command.Normalize) before the provider sees it, and the provider's result
// checked against it (sandbox.CommandResult.Validate). The caller's context cancels the command (the
// result says cancelled).
//
// Errors: ErrNotFound, ErrInvalidRequest, ErrUnsupportedCapability, ErrGenerationConflict,
// ErrInvalidState, ErrProviderUnavailable, ErrProviderProtocol.
func (r *Runtime) Exec(ctx context.Context, id sandbox.ID, gen sandbox.Generation, cmd sandbox.Command) (sandbox.CommandResult, error) {
	defer r.Active(id)() // in use while the command runs, however it was called
	cmd, err := cmd.Normalize()
	if err != nil {
		return sandbox.CommandResult{}, err
	}
	ref, err := r.dataPlane(ctx, id, gen, "exec", sandbox.CapCommandExecution)
	if err != nil {
		return sandbox.CommandResult{}, err
	}
	ex, ok := r.prov.(sandbox.Executor)
	if !ok {
		return sandbox.CommandResult{}, fmt.Errorf("provider cannot run commands: %w", sandbox.ErrUnsupportedCapability)
	}
	var res sandbox.CommandResult
	// Not detached: a client that goes away cancels its command.
	err = r.callFor(ctx, "exec", cmd.Timeout+r.cfg.ProviderTimeout, false, func(ctx context.Context) (err error) {
		res, err = ex.Exec(ctx, ref, cmd)
		return err
	})
	if err == nil {
		err = res.Validate(cmd)
	}
	if err != nil {
		r.providerTrouble(ref, err)
		return sandbox.CommandResult{}, err
	}
	ev := sandbox.NewEvent(sandbox.EventCommandCompleted, ref, r.now(), sandbox.CommandCompletedData{
		ExitCode:   res.ExitCode,
		TimedOut:   res.TimedOut,
		Cancelled:  res.Cancelled,
		Truncated:  res.Truncated,
		DurationMs: res.FinishedAt.Sub(res.StartedAt).Milliseconds(),
	})
	r.appendEvents(context.WithoutCancel(ctx), ev)
	return res, nil
}

// appendEvents records events that change no sandbox. A failure is logged: the call they report has
// already happened and its result is the caller's.
func (r *Runtime) appendEvents(ctx context.Context, evs ...sandbox.Event) {
	if _, err := r.store.AppendEvents(ctx, evs); err != nil {
		r.log.Error("appending events", "err", err)
		return
	}
	r.notify()
}

func (r *Runtime) fileSystem() (sandbox.FileSystem, error) {
	fs, ok := r.prov.(sandbox.FileSystem)
	if !ok {
		return nil, fmt.Errorf("provider has no file access: %w", sandbox.ErrUnsupportedCapability)
	}
	return fs, nil
}

func checkPath(p string) error {
	if p == "" {
		return fmt.Errorf("empty path: %w", sandbox.ErrInvalidRequest)
	}
	for i := 0; i < len(p); i++ {
		if p[i] == 0 {
			return fmt.Errorf("path with a NUL byte: %w", sandbox.ErrInvalidRequest)
		}
	}
	return nil
}

// ReadFile returns the content of a file in a ready sandbox.
//
// Errors: ErrNotFound (sandbox or file), ErrInvalidRequest (a directory, or a file past
// sandbox.MaxFileBytes), ErrUnsupportedCapability, ErrGenerationConflict, ErrInvalidState,
// ErrProviderUnavailable, ErrProviderProtocol.
func (r *Runtime) ReadFile(ctx context.Context, id sandbox.ID, gen sandbox.Generation, p string) ([]byte, error) {
	if err := checkPath(p); err != nil {
		return nil, err
	}
	ref, err := r.dataPlane(ctx, id, gen, "read file", sandbox.CapFileAccess)
	if err != nil {
		return nil, err
	}
	fs, err := r.fileSystem()
	if err != nil {
		return nil, err
	}
	var data []byte
	err = r.call(ctx, "read file", func(ctx context.Context) (err error) {
		data, err = fs.ReadFile(ctx, ref, p)
		return err
	})
	if err == nil && len(data) > sandbox.MaxFileBytes {
		err = fmt.Errorf("read of %s returned %d bytes, past %d: %w", p, len(data), sandbox.MaxFileBytes, sandbox.ErrProviderProtocol)
	}
	if err != nil {
		r.providerTrouble(ref, err)
		return nil, err
	}
	return data, nil
}

// WriteFile replaces a file in a ready sandbox atomically, creating its parent directories, and records
// the write as an event.
//
// Errors as for ReadFile; ErrInvalidRequest also for content past sandbox.MaxFileBytes.
func (r *Runtime) WriteFile(ctx context.Context, id sandbox.ID, gen sandbox.Generation, p string, data []byte) error {
	if err := checkPath(p); err != nil {
		return err
	}
	if len(data) > sandbox.MaxFileBytes {
		return fmt.Errorf("file of %d bytes past %d: %w", len(data), sandbox.MaxFileBytes, sandbox.ErrInvalidRequest)
	}
	ref, err := r.dataPlane(ctx, id, gen, "write file", sandbox.CapFileAccess)
	if err != nil {
		return err
	}
	fs, err := r.fileSystem()
	if err != nil {
		return err
	}
	err = r.call(ctx, "write file", func(ctx context.Context) error { return fs.WriteFile(ctx, ref, p, data) })
	if err != nil {
		r.providerTrouble(ref, err)
		return err
	}
	r.appendEvents(context.WithoutCancel(ctx), sandbox.NewEvent(sandbox.EventFileWritten, ref, r.now(),
		sandbox.FileWrittenData{Path: p, Size: int64(len(data))}))
	return nil
}

// maxListEntries bounds a listing a provider may return.
const maxListEntries = 100_000

// ListFiles lists one directory of a ready sandbox.
//
// Errors as for ReadFile; ErrInvalidRequest for a path that is a file.
func (r *Runtime) ListFiles(ctx context.Context, id sandbox.ID, gen sandbox.Generation, p string) ([]sandbox.FileEntry, error) {
	if err := checkPath(p); err != nil {
		return nil, err
	}
	ref, err := r.dataPlane(ctx, id, gen, "list files", sandbox.CapFileAccess)
	if err != nil {
		return nil, err
	}
	fs, err := r.fileSystem()
	if err != nil {
		return nil, err
	}
	var entries []sandbox.FileEntry
	err = r.call(ctx, "list files", func(ctx context.Context) (err error) {
		entries, err = fs.ListFiles(ctx, ref, p)
		return err
	})
	if err == nil {
		err = validateEntries(entries)
	}
	if err != nil {
		r.providerTrouble(ref, err)
		return nil, err
	}
	if entries == nil {
		entries = []sandbox.FileEntry{}
	}
	return entries, nil
}

func validateEntries(entries []sandbox.FileEntry) error {
	if len(entries) > maxListEntries {
		return fmt.Errorf("listing of %d entries past %d: %w", len(entries), maxListEntries, sandbox.ErrProviderProtocol)
	}
	for _, e := range entries {
		if e.Path == "" || e.Size < 0 || (e.Kind != sandbox.KindFile && e.Kind != sandbox.KindDirectory) || path.Clean(e.Path) == ".." {
			return fmt.Errorf("malformed listing entry %+v: %w", e, sandbox.ErrProviderProtocol)
		}
	}
	return nil
}
