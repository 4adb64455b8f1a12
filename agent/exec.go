package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

// drainGrace is how long the agent keeps reading a command's output after its process group is gone;
// only a process that left the group (setsid) and kept the pipes can make it matter.
const drainGrace = 2 * time.Second

// childOOMScoreAdj makes a command, not the agent, the memory cgroup's choice when it runs out.
const childOOMScoreAdj = "500"

// exitStarting is the exit code of a command that could not be started.
const exitStarting = 127

// run executes req and always returns a result: a command that cannot start exits 127 with the reason
// on stderr. It returns early, with the process group killed, when ctx ends (cancelled) or cancel fires.
func (a *Agent) run(ctx context.Context, req ExecRequest, cancel <-chan struct{}) ExecResult {
	started := time.Now()
	failed := func(format string, args ...any) ExecResult {
		code := exitStarting
		msg := []byte(fmt.Sprintf(format, args...) + "\n")
		return ExecResult{ExitCode: &code, Stderr: sandbox.TruncateUTF8(msg, req.MaxOutputBytes),
			Truncated: len(msg) > req.MaxOutputBytes, StartedAt: started, FinishedAt: time.Now()}
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = a.workdir
	}
	dir, err := a.root.ResolveDir(cwd)
	if err != nil {
		return failed("cwd %q: %v", req.Cwd, err)
	}
	env := a.environ(req.Env)
	prog, err := lookPath(req.Argv[0], envValue(env, "PATH"), dir)
	if err != nil {
		return failed("%s: %v", req.Argv[0], err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return failed("pipe: %v", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return failed("pipe: %v", err)
	}
	pid, status, err := a.reaper.start(func() (int, error) {
		return syscall.ForkExec(prog, req.Argv, &syscall.ProcAttr{
			Dir:   dir,
			Env:   env,
			Files: []uintptr{a.devNull.Fd(), outW.Fd(), errW.Fd()},
			Sys:   &syscall.SysProcAttr{Setpgid: true},
		})
	})
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return failed("%s: %v", req.Argv[0], err)
	}
	// Best effort: a process that exits at once has no file left to write.
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(childOOMScoreAdj), 0)

	var wg sync.WaitGroup
	var stdout, stderr capture
	wg.Add(2)
	go func() { defer wg.Done(); stdout.read(outR, req.MaxOutputBytes) }()
	go func() { defer wg.Done(); stderr.read(errR, req.MaxOutputBytes) }()

	res := ExecResult{StartedAt: started}
	timer := time.NewTimer(time.Duration(req.TimeoutMs) * time.Millisecond)
	defer timer.Stop()
	var ws unix.WaitStatus
	select {
	case ws = <-status:
	case <-timer.C:
		res.TimedOut = true
	case <-cancel:
		res.Cancelled = true
	case <-ctx.Done():
		res.Cancelled = true
	}
	// The whole group goes, also when the leader ended by itself: nothing outlives its command.
	killGroup(pid)
	if res.TimedOut || res.Cancelled {
		ws = <-status
	}
	res.FinishedAt = time.Now()
	if !res.TimedOut && !res.Cancelled {
		code := exitCode(ws)
		res.ExitCode = &code
	}

	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace):
		outR.SetReadDeadline(time.Now())
		errR.SetReadDeadline(time.Now())
		<-drained
	}
	outR.Close()
	errR.Close()
	res.Stdout, res.Stderr = stdout.buf, stderr.buf
	res.Truncated = stdout.truncated || stderr.truncated
	return res
}

// killGroup kills the process group of leader until it is empty. kill(-pgid) is atomic with respect to
// fork, so a fork bomb inside the group cannot outrun it; a zombie stays in the group until the reaper
// collects it, so an empty group also means its pids are free again.
func killGroup(leader int) {
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		if err := unix.Kill(-leader, unix.SIGKILL); err != nil {
			return // ESRCH: the group is empty
		}
		if i == 0 {
			runtime.Gosched()
			continue
		}
		time.Sleep(time.Millisecond)
	}
}

func exitCode(ws unix.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return exitStarting
}

// capture keeps the first max bytes of a stream, cut on a UTF-8 boundary, and drains the rest so the
// writer never blocks.
type capture struct {
	buf       []byte
	truncated bool
}

func (c *capture) read(r io.Reader, max int) {
	chunk := make([]byte, 32<<10)
	total := 0
	for {
		n, err := r.Read(chunk)
		total += n
		// A few bytes past max let the cut below see whether the last sequence is whole.
		if room := max + utf8.UTFMax - len(c.buf); n > 0 && room > 0 {
			c.buf = append(c.buf, chunk[:min(n, room)]...)
		}
		if err != nil {
			break
		}
	}
	if total > max {
		c.truncated = true
		c.buf = sandbox.TruncateUTF8(c.buf, max)
	}
}

// environ is the agent's own environment with extra on top.
func (a *Agent) environ(extra map[string]string) []string {
	env := make([]string, 0, len(a.env)+len(extra))
	for _, kv := range a.env {
		k, _, _ := strings.Cut(kv, "=")
		if _, over := extra[k]; !over {
			env = append(env, kv)
		}
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

var errNotFound = errors.New("command not found")

// lookPath finds prog in pathList the way a shell would. A name with a slash is used as it is, relative
// to dir.
func lookPath(prog, pathList, dir string) (string, error) {
	if prog == "" {
		return "", errNotFound
	}
	if strings.Contains(prog, "/") {
		return prog, nil
	}
	for _, d := range filepath.SplitList(pathList) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, prog)
		check := p
		if !filepath.IsAbs(check) {
			check = filepath.Join(dir, check)
		}
		if st, err := os.Stat(check); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errNotFound
}
