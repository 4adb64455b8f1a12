// Package proc runs one command at a time per call, directly (never through a shell), in its own
// process group, with a timeout, cancellation, and capped output.
//
// Main invariant: when Run returns, the command's whole process group is dead. The group is killed with
// SIGKILL on timeout, on cancellation, and also when the command's leader exits by itself, so nothing a
// command started in its group (a background "&" job, say) outlives it. A process that leaves the group
// with setsid escapes this; its open pipes are then cut after Runner.PipeGrace.
//
// Reaping: by default proc waits for each leader itself, with wait4 on its pid. A PID-1 agent, whose
// own wait4(-1) loop would otherwise steal those exit statuses, sets Runner.Waiter to a Reaper (or its
// own Waiter): then only the reaper calls wait4, and proc registers each pid with it under the
// reaper's lock around the fork; a Waiter with a Reap method is asked to reap while Run waits for a
// killed group to empty. Such a process also sets Runner.KillWait, so that Run returns only
// once the group's members are reaped and their pids free again.
package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

// ExitCannotStart is the exit code of a command whose program could not be started.
const ExitCannotStart = 127

// DefaultPipeGrace is how long Run waits for output after the process group is dead, for pipes held
// open by a process that left the group.
const DefaultPipeGrace = time.Second

// Waiter owns waiting for started processes. Start calls start, which forks the child and returns its
// pid, and returns a channel that receives the child's wait status once it has exited and been reaped.
type Waiter interface {
	Start(start func() (pid int, err error)) (pid int, exited <-chan unix.WaitStatus, err error)
}

// Runner runs commands and keeps track of the process groups of those still running, so they can be
// stopped, continued or killed together. The zero value is ready to use. A Runner is safe for
// concurrent use. Its fields must not change once it has run a command.
type Runner struct {
	Env    []string // the base environment, "KEY=value"; a command's Env is added on top
	Waiter Waiter   // nil: proc waits for its children itself
	// Credential, when not nil, is the user and groups commands run as.
	Credential *syscall.Credential
	PipeGrace  time.Duration // zero: DefaultPipeGrace

	// KillWait is how long Run keeps killing a command's group, once its leader is gone, until the
	// group is empty: every member dead and reaped, so a fork bomb's pids are free again when Run
	// returns. Zero: one SIGKILL, and members left as zombies are reaped later by their new parent.
	// Set it only where orphans are reaped promptly (a Reaper as Waiter in a subreaper or PID 1):
	// an unreaped zombie keeps its group non-empty until KillWait runs out.
	KillWait time.Duration

	// OOMScoreAdj, when not zero, is written to each command's /proc/PID/oom_score_adj right after
	// the fork (so the command runs briefly with the runner's own score), making the command rather
	// than the runner the choice of an out-of-memory kill. Best effort: a value out of -1000..1000,
	// or one below the runner's own without CAP_SYS_RESOURCE, leaves the command's score unchanged.
	OOMScoreAdj int

	mu      sync.Mutex
	running map[int]context.CancelCauseFunc // pgid -> cancel of the Run that owns it
	stopped bool
	closed  bool
	wg      sync.WaitGroup
}

var (
	errClosed = errors.New("runner closed")
)

// Run runs cmd with dir as its working directory and waits for it. A zero Timeout or MaxOutputBytes is
// the default (sandbox.Command.Normalize). It returns ErrInvalidRequest for a malformed command or one
// past the bounds of Normalize, and ErrInvalidState when the runner is stopped or closed. Everything else, a
// program that cannot start included, is a result: exit code 127 with the reason on stderr, 128+n for a
// command killed by signal n, no exit code and TimedOut or Cancelled when Run killed it.
func (r *Runner) Run(ctx context.Context, dir string, cmd sandbox.Command) (sandbox.CommandResult, error) {
	if err := validate(cmd); err != nil {
		return sandbox.CommandResult{}, err
	}
	cmd, err := cmd.Normalize()
	if err != nil {
		return sandbox.CommandResult{}, err
	}
	timeout, max := cmd.Timeout, cmd.MaxOutputBytes
	env := mergeEnv(r.Env, cmd.Env)
	started := time.Now()
	res := sandbox.CommandResult{StartedAt: started}

	path, err := lookPath(cmd.Argv[0], dir, env)
	if err != nil {
		return cannotStart(res, cmd.Argv[0], err, max), nil
	}
	outR, outW, err := outputPipe()
	if err != nil {
		return res, fmt.Errorf("run %q: %w", cmd.Argv[0], err)
	}
	errR, errW, err := outputPipe()
	if err != nil {
		outR.Close()
		unix.Close(outW)
		return res, fmt.Errorf("run %q: %w", cmd.Argv[0], err)
	}
	closeWriters := func() {
		unix.Close(outW)
		unix.Close(errW)
	}
	null, err := devNull()
	if err != nil {
		outR.Close()
		errR.Close()
		closeWriters()
		return res, fmt.Errorf("run %q: %w", cmd.Argv[0], err)
	}
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []uintptr{uintptr(null), uintptr(outW), uintptr(errW)},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Credential: r.Credential},
	}

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.mu.Lock()
	if err := r.refuseLocked(cmd.Argv[0]); err != nil {
		r.mu.Unlock()
		outR.Close()
		errR.Close()
		closeWriters()
		return res, err
	}
	waiter, pgid, exited, startErr := r.forkLocked(path, cmd.Argv, attr, cancel)
	r.mu.Unlock()
	closeWriters()
	if startErr != nil {
		outR.Close()
		errR.Close()
		return cannotStart(res, cmd.Argv[0], startErr, max), nil
	}
	defer r.wg.Done()

	outc, errc := make(chan captured, 1), make(chan captured, 1)
	go func() { outc <- capture(outR, max) }()
	go func() { errc <- capture(errR, max) }()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var ws unix.WaitStatus
	select {
	case ws = <-exited:
	case <-timer.C:
		res.TimedOut = true
		ws = killUntilExited(pgid, exited)
	case <-runCtx.Done():
		res.Cancelled = true
		ws = killUntilExited(pgid, exited)
	}
	// The leader is gone: kill whatever is left of its group, then unregister it.
	reap := func() {}
	if rp, ok := waiter.(interface{ Reap() }); ok {
		reap = rp.Reap // the group's members are the waiter's to reap
	}
	killGroup(pgid, r.KillWait, reap)
	r.mu.Lock()
	delete(r.running, pgid)
	r.mu.Unlock()

	grace := r.PipeGrace
	if grace == 0 {
		grace = DefaultPipeGrace
	}
	cut := time.AfterFunc(grace, func() {
		_ = outR.SetReadDeadline(time.Now())
		_ = errR.SetReadDeadline(time.Now())
	})
	out, errOut := <-outc, <-errc
	cut.Stop()
	outR.Close()
	errR.Close()

	res.Stdout, res.Stderr = out.data, errOut.data
	res.Truncated = out.truncated || errOut.truncated
	if !res.TimedOut && !res.Cancelled {
		code := exitCode(ws)
		res.ExitCode = &code
	}
	res.FinishedAt = time.Now()
	return res, nil
}

// refuseLocked is the error of a start while the runner is stopped or closed. The caller holds r.mu.
func (r *Runner) refuseLocked(name string) error {
	switch {
	case r.closed:
		return fmt.Errorf("run %q: the sandbox is closed: %w", name, sandbox.ErrInvalidState)
	case r.stopped:
		return fmt.Errorf("run %q: the sandbox is paused: %w", name, sandbox.ErrInvalidState)
	}
	return nil
}

// forkLocked forks path with attr through the runner's waiter and registers its group, which cancel
// kills, for Stop, Continue and Close. The caller holds r.mu: the fork is under the lock, so that Stop
// cannot miss a group that is being born; after a nil error it calls r.wg.Done once the group is gone.
func (r *Runner) forkLocked(path string, argv []string, attr *syscall.ProcAttr, cancel context.CancelCauseFunc) (Waiter, int, <-chan unix.WaitStatus, error) {
	waiter := r.Waiter
	if waiter == nil {
		waiter = directWaiter{}
	}
	pgid, exited, err := waiter.Start(func() (int, error) {
		pid, err := syscall.ForkExec(path, argv, attr)
		if err == nil && r.OOMScoreAdj != 0 {
			// The waiter cannot have reaped pid yet, so the pid is still the command's.
			setOOMScoreAdj(pid, r.OOMScoreAdj)
		}
		return pid, err
	})
	if err != nil {
		return waiter, 0, nil, err
	}
	if r.running == nil {
		r.running = make(map[int]context.CancelCauseFunc)
	}
	r.running[pgid] = cancel
	r.wg.Add(1)
	return waiter, pgid, exited, nil
}

// Stop sends SIGSTOP to every running command's process group and refuses new commands until Continue.
func (r *Runner) Stop() { r.signalAll(true, unix.SIGSTOP) }

// Continue sends SIGCONT to every running command's process group and accepts new commands again.
func (r *Runner) Continue() { r.signalAll(false, unix.SIGCONT) }

// Stopped reports whether the runner is stopped.
func (r *Runner) Stopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

func (r *Runner) signalAll(stopped bool, sig unix.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = stopped
	for pgid := range r.running {
		_ = unix.Kill(-pgid, sig)
	}
}

// Close refuses new commands, cancels the running ones (they end as Cancelled, their groups killed)
// and waits for them to return, or for ctx.
func (r *Runner) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	for _, cancel := range r.running {
		cancel(errClosed)
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close runner: %w", ctx.Err())
	}
}

// rekill is how often killUntilExited kills a group again while its leader lives on.
const rekill = 10 * time.Millisecond

// killUntilExited kills the process group pgid, and again every rekill until its leader's status
// arrives on exited (until then the leader's pid, and so the group's, cannot be taken by another
// process). On Linux the first kill takes the whole group, forks in flight included; gVisor's kernel
// lets a member forked during the kill escape it, and a fork bomb's escapees kept that kernel too busy
// to end the leader for 18 s and more, with the one kill there was.
func killUntilExited(pgid int, exited <-chan unix.WaitStatus) unix.WaitStatus {
	_ = unix.Kill(-pgid, unix.SIGKILL)
	tick := time.NewTicker(rekill)
	defer tick.Stop()
	for {
		select {
		case ws := <-exited:
			return ws
		case <-tick.C:
			_ = unix.Kill(-pgid, unix.SIGKILL)
		}
	}
}

// killGroup kills the process group pgid, and keeps killing it for up to wait until it is empty,
// calling reap between looks. kill(-pgid) is atomic with respect to fork, so a fork bomb inside the
// group cannot outrun it; a zombie stays in the group until it is reaped, so an empty group also
// means its pids are free.
func killGroup(pgid int, wait time.Duration, reap func()) {
	deadline := time.Now().Add(wait)
	for i := 0; ; i++ {
		if err := unix.Kill(-pgid, unix.SIGKILL); err != nil {
			return // ESRCH: the group is empty
		}
		if !time.Now().Before(deadline) {
			return
		}
		reap() // members already dead stay in the group until they are reaped
		if i == 0 {
			runtime.Gosched()
			continue
		}
		time.Sleep(time.Millisecond)
	}
}

// validate refuses a command no process can be started from. Behind the agent's socket it is the runner's
// own guard, whatever the daemon checked before.
func validate(cmd sandbox.Command) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("command: "+format+": %w", append(args, sandbox.ErrInvalidRequest)...)
	}
	if len(cmd.Argv) == 0 || cmd.Argv[0] == "" {
		return bad("empty argv")
	}
	for _, a := range cmd.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return bad("NUL byte in argv")
		}
	}
	for k, v := range cmd.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return bad("bad environment variable %q", k)
		}
	}
	if cmd.Timeout < 0 || cmd.MaxOutputBytes < 0 {
		return bad("negative timeout or output cap")
	}
	return nil
}

// mergeEnv returns base with extra added on top, in a stable order.
func mergeEnv(base []string, extra map[string]string) []string {
	env := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, over := extra[k]; !over {
			env = append(env, kv)
		}
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+extra[k])
	}
	return env
}

// lookPath finds name the way execvp would, in the PATH of the command's own environment.
func lookPath(name, dir string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil // relative names resolve against dir, after the child's chdir
	}
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable file not found in $PATH")
}

// outputPipe returns a pipe for a command's stdout or stderr: the read end pollable by the runtime (so
// that reads can be cut by a deadline), the write end a plain blocking descriptor, which is only handed
// to the child and closed, and so is never registered with the runtime's poller.
func outputPipe() (r *os.File, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, -1, err
	}
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, -1, err
	}
	return os.NewFile(uintptr(p[0]), "|0"), p[1], nil
}

// devNull returns a descriptor of /dev/null, opened once for every command's stdin.
var devNull = sync.OnceValues(func() (int, error) {
	return unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
})

// setOOMScoreAdj writes score to pid's oom_score_adj, best effort.
func setOOMScoreAdj(pid, score int) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	_, _ = unix.Write(fd, []byte(strconv.Itoa(score)))
	unix.Close(fd)
}

func cannotStart(res sandbox.CommandResult, name string, err error, max int) sandbox.CommandResult {
	code := ExitCannotStart
	msg := fmt.Sprintf("cannot start %q: %v\n", name, err)
	res.ExitCode = &code
	res.Stderr = sandbox.TruncateUTF8(msg, max)
	res.Truncated = len(res.Stderr) < len(msg)
	res.FinishedAt = time.Now()
	return res
}

func exitCode(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

type captured struct {
	data      string
	truncated bool
}

// capture reads f to its end (or until its read deadline), keeping at most max bytes cut on a UTF-8
// boundary and dropping the rest, so the writer never blocks on a full pipe. The output is kept in a
// strings.Builder: the result's string is the bytes read, not a copy of them.
func capture(f *os.File, max int) captured {
	keep := max + utf8.UTFMax // enough to see whether the cut at max splits a sequence
	chunk := chunks.Get().(*[]byte)
	defer chunks.Put(chunk)
	var buf strings.Builder // most commands print little or nothing: grown as output comes
	over := false
	for {
		n, err := f.Read(*chunk)
		if room := keep - buf.Len(); n > room {
			buf.Write((*chunk)[:room])
			over = true
		} else {
			buf.Write((*chunk)[:n])
		}
		if err != nil {
			break
		}
	}
	if buf.Len() > max {
		return captured{data: sandbox.TruncateUTF8(buf.String(), max), truncated: true}
	}
	return captured{data: buf.String(), truncated: over}
}

// chunks are capture's read buffers, reused across commands.
var chunks = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// directWaiter waits for each child with wait4 on its pid.
type directWaiter struct{}

func (directWaiter) Start(start func() (int, error)) (int, <-chan unix.WaitStatus, error) {
	pid, err := start()
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	go func() {
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
		ch <- ws
	}()
	return pid, ch, nil
}
