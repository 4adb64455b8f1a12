package proc

import (
	"fmt"
	"os"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

// SpawnPTY is Spawn on a pseudo-terminal of size rows×cols: the process leads a session of its own
// whose controlling terminal is the pty's, so that the terminal's keys (^C, ^Z) signal its foreground
// group and its size changes reach it as SIGWINCH. Output and Stdin are both the pty's master, as two
// pollable files (closing Stdin leaves Output open); Resize changes its size. The session's id is its
// group's, so Stop, Continue and Close reach it as they reach Spawn's. Errors: as Spawn's.
func (r *Runner) SpawnPTY(dir string, argv []string, env map[string]string, rows, cols int) (*Spawned, error) {
	if err := validate(sandbox.Command{Argv: argv, Env: env}); err != nil {
		return nil, err
	}
	if err := (sandbox.TerminalSize{Rows: rows, Cols: cols}).Validate(); err != nil {
		return nil, err
	}
	full := mergeEnv(r.Env, env)
	path, err := lookPath(argv[0], dir, full)
	if err != nil {
		return nil, fmt.Errorf("cannot start %q: %v: %w", argv[0], err, sandbox.ErrInvalidRequest)
	}
	output, stdin, tty, err := openPTY(rows, cols)
	if err != nil {
		return nil, fmt.Errorf("spawn %q: pty: %w", argv[0], err)
	}
	if c := r.Credential; c != nil {
		// The terminal is its user's, as login makes it: a program that opens it again by name may.
		_ = tty.Chown(int(c.Uid), int(c.Gid))
	}
	fd := tty.Fd()
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   full,
		Files: []uintptr{fd, fd, fd},
		// Ctty is a descriptor of the child's: its stdin.
		Sys: &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: r.Credential},
	}
	sp := &Spawned{Output: output, Stdin: stdin, TTY: true}
	if err := r.fork(sp, path, argv, attr, func() { tty.Close() }); err != nil {
		output.Close()
		stdin.Close()
		return nil, err
	}
	return sp, nil
}

// openPTY opens a pty of size rows×cols and returns its master as two pollable files, and its slave.
func openPTY(rows, cols int) (output, stdin, tty *os.File, err error) {
	master, tty, err := pty.Open()
	if err != nil {
		return nil, nil, nil, err
	}
	// pty.Open leaves the master blocking (it asks for its descriptor), which no deadline can cut: the
	// copies made here are non-blocking, and so in the runtime's poller. O_NONBLOCK is a flag of the
	// open file, which the copies share with the master, and each master.Fd() clears it again: the
	// master's descriptor is asked for once, before the flag is set, and the copies are made after.
	defer master.Close()
	mfd := int(master.Fd())
	err = unix.IoctlSetWinsize(mfd, unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
	if err == nil {
		err = unix.SetNonblock(mfd, true)
	}
	dup := func(name string) (*os.File, error) {
		fd, err := unix.FcntlInt(uintptr(mfd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		return os.NewFile(uintptr(fd), name), nil
	}
	if err == nil {
		if output, err = dup("ptmx"); err == nil {
			if stdin, err = dup("ptmx|stdin"); err != nil {
				output.Close()
			}
		}
	}
	if err != nil {
		tty.Close()
		return nil, nil, nil, err
	}
	return output, stdin, tty, nil
}

// Resize sets the size of the pty whose master is f (a Spawned's Output of SpawnPTY); the kernel
// sends SIGWINCH to the terminal's foreground group.
func Resize(f *os.File, rows, cols int) error {
	if err := (sandbox.TerminalSize{Rows: rows, Cols: cols}).Validate(); err != nil {
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	// Through the raw descriptor, not f.Fd(), which would make the file blocking again.
	err = rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
	})
	if err != nil {
		return err
	}
	return ioErr
}
