package proc

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

// Spawned is a process Spawn started in the background: its own process group, its stdout and stderr
// on one pipe (Output), its stdin on another (Stdin). Done is closed once the process has exited and
// what was left of its group is killed; Status is its wait status from then on.
type Spawned struct {
	PID    int
	Output *os.File // the read end of the combined stdout and stderr, pollable
	Stdin  *os.File // the write end of the process's stdin
	TTY    bool     // Output and Stdin are a pty's master (SpawnPTY)
	Done   <-chan struct{}
	Status unix.WaitStatus
}

// Spawn starts argv in dir with the runner's environment and env on top, in a process group of its
// own that Stop, Continue and Close reach as they reach Run's. It does not wait: the process runs
// until it exits or is signalled, and Close kills it. Errors: ErrInvalidRequest for a malformed
// command, ErrInvalidState when the runner is stopped or closed; a program that cannot be found or
// started is an error too (the caller has no result to put it in).
func (r *Runner) Spawn(dir string, argv []string, env map[string]string) (*Spawned, error) {
	if err := validate(sandbox.Command{Argv: argv, Env: env}); err != nil {
		return nil, err
	}
	full := mergeEnv(r.Env, env)
	path, err := lookPath(argv[0], dir, full)
	if err != nil {
		return nil, fmt.Errorf("cannot start %q: %v: %w", argv[0], err, sandbox.ErrInvalidRequest)
	}
	outR, outW, err := outputPipe()
	if err != nil {
		return nil, fmt.Errorf("spawn %q: %w", argv[0], err)
	}
	var in [2]int
	if err := unix.Pipe2(in[:], unix.O_CLOEXEC); err != nil {
		outR.Close()
		unix.Close(outW)
		return nil, fmt.Errorf("spawn %q: %w", argv[0], err)
	}
	if err := unix.SetNonblock(in[1], true); err != nil { // pollable, so that a write has a deadline
		outR.Close()
		unix.Close(outW)
		unix.Close(in[0])
		unix.Close(in[1])
		return nil, fmt.Errorf("spawn %q: %w", argv[0], err)
	}
	closeChild := func() {
		unix.Close(outW)
		unix.Close(in[0])
	}
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   full,
		Files: []uintptr{uintptr(in[0]), uintptr(outW), uintptr(outW)},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Credential: r.Credential},
	}
	sp := &Spawned{Output: outR, Stdin: os.NewFile(uintptr(in[1]), "|stdin")}
	if err := r.fork(sp, path, argv, attr, closeChild); err != nil {
		outR.Close()
		sp.Stdin.Close()
		return nil, err
	}
	return sp, nil
}

// fork starts path with attr as sp's process, calls closeChild (the child's ends of its files) once
// the child has them, and fills in sp's PID and Done. The caller closes sp's files on an error.
func (r *Runner) fork(sp *Spawned, path string, argv []string, attr *syscall.ProcAttr, closeChild func()) error {
	r.mu.Lock()
	if err := r.refuseLocked(argv[0]); err != nil {
		r.mu.Unlock()
		closeChild()
		return err
	}
	var pgid int
	waiter, pgid, exited, startErr := r.forkLocked(path, argv, attr, func(error) { _ = unix.Kill(-pgid, unix.SIGKILL) })
	r.mu.Unlock()
	closeChild()
	if startErr != nil {
		return fmt.Errorf("cannot start %q: %v: %w", argv[0], startErr, sandbox.ErrInvalidRequest)
	}
	done := make(chan struct{})
	sp.PID, sp.Done = pgid, done
	go func() {
		defer r.wg.Done()
		ws := <-exited
		reap := func() {}
		if rp, ok := waiter.(interface{ Reap() }); ok {
			reap = rp.Reap
		}
		killGroup(pgid, r.KillWait, reap)
		r.mu.Lock()
		delete(r.running, pgid)
		r.mu.Unlock()
		sp.Status = ws
		close(done)
	}()
	return nil
}

// ExitCode is the exit code of a wait status: its exit status, or 128+n for a process killed by
// signal n.
func ExitCode(ws unix.WaitStatus) int { return exitCode(ws) }
