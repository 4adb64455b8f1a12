package agent

import (
	"fmt"
	"net/http"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/proc"
)

// eofKey is the terminal's default end-of-file key (^D), which a close of a pty process's stdin types.
const eofKey = 0x04

// spawn starts spec through runner, on a pty when spec asks for one.
func spawn(runner *proc.Runner, dir string, spec sandbox.ProcessSpec) (*proc.Spawned, error) {
	if spec.PTY != nil {
		return runner.SpawnPTY(dir, spec.Argv, spec.Env, spec.PTY.Rows, spec.PTY.Cols)
	}
	return runner.Spawn(dir, spec.Argv, spec.Env)
}

// Resize sets the size of process pid's terminal. A process without one, or that has ended, is
// ErrInvalidState.
func (ps *Processes) Resize(pid int, size sandbox.TerminalSize) error {
	if err := size.Validate(); err != nil {
		return err
	}
	p, err := ps.lookup(pid)
	if err != nil {
		return err
	}
	if !p.sp.TTY {
		return fmt.Errorf("process %d has no terminal: %w", pid, sandbox.ErrInvalidState)
	}
	select {
	case <-p.done:
		return fmt.Errorf("process %d has exited: %w", pid, sandbox.ErrInvalidState)
	default:
	}
	if err := proc.Resize(p.sp.Output, size.Rows, size.Cols); err != nil {
		// The pump closed the master: the terminal is gone with the process.
		return fmt.Errorf("process %d: resize: %v: %w", pid, err, sandbox.ErrInvalidState)
	}
	return nil
}

func (a *Agent) resizeProcess(w http.ResponseWriter, r *http.Request) {
	var req protocol.ProcessResize
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if !checkDeadline(w, r) {
		return
	}
	if err := a.procs.Resize(req.PID, sandbox.TerminalSize{Rows: req.Rows, Cols: req.Cols}); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
