package proc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

var baseEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "BASE=base", "OVER=base"}

func run(t *testing.T, r *Runner, dir string, cmd sandbox.Command) sandbox.CommandResult {
	t.Helper()
	res, err := r.Run(context.Background(), dir, cmd)
	if err != nil {
		t.Fatalf("run %q: %v", cmd.Argv, err)
	}
	if err := res.Validate(withDefaults(cmd)); err != nil {
		t.Fatalf("run %q: %v", cmd.Argv, err)
	}
	return res
}

func withDefaults(cmd sandbox.Command) sandbox.Command {
	if cmd.MaxOutputBytes == 0 {
		cmd.MaxOutputBytes = sandbox.DefaultMaxOutputBytes
	}
	return cmd
}

func sh(script string) sandbox.Command { return sandbox.Command{Argv: []string{"sh", "-c", script}} }

func wantExit(t *testing.T, res sandbox.CommandResult, code int) {
	t.Helper()
	if res.ExitCode == nil || *res.ExitCode != code {
		t.Fatalf("exit code %v, want %d (stderr %q)", res.ExitCode, code, res.Stderr)
	}
}

// dead reports whether pid is gone or a zombie.
func dead(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return fields[0] == "Z" || fields[0] == "X"
}

// waitFor polls cond until it holds, for at most half a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	var pid int
	waitFor(t, "pid file", func() bool {
		data, err := os.ReadFile(file)
		if err != nil || !strings.HasSuffix(string(data), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	return pid
}

func TestOutputAndExitCodes(t *testing.T) {
	r := &Runner{Env: baseEnv}
	dir := t.TempDir()
	res := run(t, r, dir, sh("echo out; echo err >&2; exit 3"))
	wantExit(t, res, 3)
	if res.Stdout != "out\n" || res.Stderr != "err\n" || res.Truncated || res.TimedOut || res.Cancelled {
		t.Fatalf("result %+v", res)
	}
	wantExit(t, run(t, r, dir, sandbox.Command{Argv: []string{"true"}}), 0)
	// Killed by a signal: 128 + n.
	wantExit(t, run(t, r, dir, sh("kill -TERM $$")), 128+int(unix.SIGTERM))
	// argv goes to the program as is, never through a shell.
	res = run(t, r, dir, sandbox.Command{Argv: []string{"echo", "$HOME", "a;b", "`x`"}})
	if res.Stdout != "$HOME a;b `x`\n" {
		t.Fatalf("argv was interpreted: %q", res.Stdout)
	}
}

func TestCannotStart(t *testing.T) {
	r := &Runner{Env: baseEnv}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "noexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, argv0 := range []string{"no-such-program-xyz", "/no/such/path", "./noexec", filepath.Join(dir, "noexec")} {
		res := run(t, r, dir, sandbox.Command{Argv: []string{argv0}})
		wantExit(t, res, ExitCannotStart)
		if !strings.Contains(res.Stderr, argv0) {
			t.Errorf("%s: stderr %q does not give the reason", argv0, res.Stderr)
		}
	}
	// A working directory that does not exist cannot be entered.
	wantExit(t, run(t, r, filepath.Join(dir, "missing"), sandbox.Command{Argv: []string{"true"}}), ExitCannotStart)
}

func TestEnvAndCwd(t *testing.T) {
	r := &Runner{Env: baseEnv}
	dir := t.TempDir()
	res := run(t, r, dir, sandbox.Command{
		Argv: []string{"sh", "-c", `echo "$BASE $OVER $NEW"; pwd`},
		Env:  map[string]string{"OVER": "request", "NEW": "new value"},
	})
	wantExit(t, res, 0)
	if want := "base request new value\n" + dir + "\n"; res.Stdout != want {
		t.Fatalf("stdout %q, want %q", res.Stdout, want)
	}
	// The runner's own environment does not leak in.
	t.Setenv("PROC_TEST_LEAK", "leak")
	res = run(t, r, dir, sh(`echo "[$PROC_TEST_LEAK]"`))
	if res.Stdout != "[]\n" {
		t.Fatalf("the parent's environment leaked: %q", res.Stdout)
	}
}

func TestInvalid(t *testing.T) {
	r := &Runner{Env: baseEnv}
	for _, cmd := range []sandbox.Command{
		{},
		{Argv: []string{""}},
		{Argv: []string{"echo", "a\x00b"}},
		{Argv: []string{"true"}, Env: map[string]string{"A=B": "x"}},
		{Argv: []string{"true"}, Timeout: -1},
	} {
		if _, err := r.Run(context.Background(), t.TempDir(), cmd); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("%+v: %v, want invalid request", cmd, err)
		}
	}
}

// TestTimeoutKillsGroup runs a command whose grandchild keeps stdout open: the timeout must still end
// the run, and the grandchild must be dead.
func TestTimeoutKillsGroup(t *testing.T) {
	r := &Runner{Env: baseEnv}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	cmd := sh("sleep 300 & echo $! > " + pidFile + "; echo started; sleep 300")
	var res sandbox.CommandResult
	// On a slow machine the timeout may strike before the grandchild exists: try again with more time.
	for cmd.Timeout = 300 * time.Millisecond; ; cmd.Timeout *= 2 {
		if res = run(t, r, dir, cmd); res.Stdout != "" {
			break
		}
	}
	if !res.TimedOut || res.ExitCode != nil || res.Cancelled {
		t.Fatalf("result %+v, want timed out without exit code", res)
	}
	if res.Stdout != "started\n" {
		t.Fatalf("output before the timeout was lost: %q", res.Stdout)
	}
	grandchild := readPid(t, pidFile)
	waitFor(t, "grandchild death", func() bool { return dead(grandchild) })
}

// TestLeaderExitKillsGroup: a background job does not outlive its command, nor hold its pipe.
func TestLeaderExitKillsGroup(t *testing.T) {
	r := &Runner{Env: baseEnv}
	dir := t.TempDir()
	res := run(t, r, dir, sh("sleep 300 & echo $!"))
	wantExit(t, res, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "background job death", func() bool { return dead(pid) })
}

// TestEscapedPipeIsCut: a process that leaves the group keeps the pipe open; Run still returns.
func TestEscapedPipeIsCut(t *testing.T) {
	r := &Runner{Env: baseEnv, PipeGrace: 100 * time.Millisecond}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	// The leader waits until the escaped process has left the group and written its pid.
	res := run(t, r, dir, sh(`setsid sh -c 'echo $$ > `+pidFile+`; exec sleep 300' & while [ ! -s `+pidFile+` ]; do sleep 0.01; done`))
	wantExit(t, res, 0)
	pid := readPid(t, pidFile)
	_ = unix.Kill(pid, unix.SIGKILL)
}

func TestCancel(t *testing.T) {
	r := &Runner{Env: baseEnv}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	res, err := r.Run(ctx, t.TempDir(), sh("sleep 300"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Cancelled || res.ExitCode != nil || res.TimedOut {
		t.Fatalf("result %+v, want cancelled without exit code", res)
	}
}

func TestTruncation(t *testing.T) {
	r := &Runner{Env: baseEnv}
	dir := t.TempDir()
	// 2-byte runes and an odd cap: the cut must not split one.
	cmd := sh(`i=0; while [ $i -lt 100 ]; do printf 'é'; i=$((i+1)); done; echo small >&2`)
	cmd.MaxOutputBytes = 11
	res := run(t, r, dir, cmd)
	wantExit(t, res, 0)
	if !res.Truncated || res.Stdout != strings.Repeat("é", 5) || !utf8.ValidString(res.Stdout) {
		t.Fatalf("stdout %q truncated=%v", res.Stdout, res.Truncated)
	}
	if res.Stderr != "small\n" {
		t.Fatalf("stderr is capped on its own: %q", res.Stderr)
	}
	// A flood far past the cap is drained: the command runs to its end.
	cmd = sh("head -c 20000000 /dev/zero; head -c 3000 /dev/zero >&2; echo end >&2")
	cmd.MaxOutputBytes = 4096
	res = run(t, r, dir, cmd)
	wantExit(t, res, 0)
	if len(res.Stdout) != 4096 || len(res.Stderr) != 3004 || !res.Truncated {
		t.Fatalf("stdout %d bytes, stderr %d bytes, truncated=%v", len(res.Stdout), len(res.Stderr), res.Truncated)
	}
}

func TestStopContinue(t *testing.T) {
	r := &Runner{Env: baseEnv}
	dir := t.TempDir()
	pidFile, fifo := filepath.Join(dir, "pid"), filepath.Join(dir, "go")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	var res sandbox.CommandResult
	var runErr error
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		// Builtins only, until the test writes the fifo: a shell stopped while it vforks a command (dash
		// does) waits for the stopped child in uninterruptible sleep, so it would never show "T".
		res, runErr = r.Run(context.Background(), dir, sh("echo $$ > "+pidFile+"; read word < "+fifo+"; echo finished $word"))
	}()
	pid := readPid(t, pidFile)
	r.Stop()
	if !r.Stopped() {
		t.Fatal("not stopped after Stop")
	}
	waitFor(t, "stopped state", func() bool {
		select {
		case <-ran:
			t.Fatalf("the command ended while it should be stopped: %+v %v", res, runErr)
		default:
		}
		return procState(pid) == "T"
	})
	if _, err := r.Run(context.Background(), dir, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("run while stopped: %v", err)
	}
	r.Continue()
	// The continued shell opens the fifo to read: only then can a writer open it without blocking.
	var w *os.File
	waitFor(t, "a reader of the fifo", func() bool {
		var err error
		w, err = os.OpenFile(fifo, os.O_WRONLY|unix.O_NONBLOCK, 0)
		return err == nil
	})
	if _, err := w.WriteString("now\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	<-ran
	if runErr != nil {
		t.Fatal(runErr)
	}
	wantExit(t, res, 0)
	if res.Stdout != "finished now\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
	wantExit(t, run(t, r, dir, sandbox.Command{Argv: []string{"true"}}), 0)
}

func procState(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(data)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

func TestClose(t *testing.T) {
	r := &Runner{Env: baseEnv}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	var res sandbox.CommandResult
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res, _ = r.Run(context.Background(), dir, sh("echo $$ > "+pidFile+"; sleep 300"))
	}()
	pid := readPid(t, pidFile)
	// A stopped group is killed too.
	r.Stop()
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !res.Cancelled || res.ExitCode != nil {
		t.Fatalf("result %+v, want cancelled", res)
	}
	waitFor(t, "leader death", func() bool { return dead(pid) })
	if _, err := r.Run(context.Background(), dir, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("run after close: %v", err)
	}
}

func TestReaper(t *testing.T) {
	reaper := NewReaper()
	defer reaper.Stop()
	r := &Runner{Env: baseEnv, Waiter: reaper}
	dir := t.TempDir()
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.Run(context.Background(), dir, sh("exit "+strconv.Itoa(i)))
			if err != nil || res.ExitCode == nil || *res.ExitCode != i {
				t.Errorf("command %d: %+v, %v", i, res, err)
			}
		}()
	}
	wg.Wait()
	// Commands that exit at once, many at a time: each is delivered, and (goleak, in TestMain) leaves
	// no goroutine waiting on its pidfd.
	for round := 0; round < 10; round++ {
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := r.Run(context.Background(), dir, sandbox.Command{Argv: []string{"true"}})
				if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
					t.Errorf("true: %+v, %v", res, err)
				}
			}()
		}
		wg.Wait()
	}
	cmd := sh("sleep 300")
	cmd.Timeout = 100 * time.Millisecond
	if res := run(t, r, dir, cmd); !res.TimedOut {
		t.Fatalf("timeout under the reaper: %+v", res)
	}
}

// TestKillWait: with a reaper in a subreaper, Run returns only once the members of the command's
// group are dead and reaped, so the group is empty.
func TestKillWait(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	reaper := NewReaper()
	defer reaper.Stop()
	r := &Runner{Env: baseEnv, Waiter: reaper, KillWait: time.Minute}
	res := run(t, r, t.TempDir(), sh("for i in 1 2 3 4 5 6 7 8; do sleep 300 & done; echo $$"))
	wantExit(t, res, 0)
	pgid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(-pgid, 0); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("group %d not empty when Run returned: %v", pgid, err)
	}
}

// TestReaperQuietWhileBusy: while commands run, SIGCHLD is not delivered (SIG_DFL) and commands are
// reaped through their pidfds; an orphan that exits meanwhile is reaped all the same, by the periodic
// sweep; once nothing has run for a sweep, the runtime's handler is back and reaps on signals; Stop
// gives the handler back at once.
func TestReaperQuietWhileBusy(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	defer func(d time.Duration) { orphanSweep = d }(orphanSweep)
	orphanSweep = 200 * time.Millisecond
	reaper := NewReaper()
	stop := sync.OnceFunc(reaper.Stop)
	defer stop()
	if !reaper.pidfds {
		t.Skip("no pidfd_open here: SIGCHLD stays on")
	}
	r := &Runner{Env: baseEnv, Waiter: reaper}
	dir := t.TempDir()
	goHandler := sigchldHandler(t)
	if goHandler == 0 {
		t.Fatal("SIGCHLD has no handler before the reaper ran anything")
	}
	long := make(chan sandbox.CommandResult, 1)
	pidFile := filepath.Join(t.TempDir(), "long.pid")
	go func() {
		res, _ := r.Run(context.Background(), dir, sh("echo $$ > "+pidFile+"; sleep 3; exit 3"))
		long <- res
	}()
	longPID := readPid(t, pidFile)
	// The orphan leaves the group and outlives the command that started it, then exits while the
	// long command still runs, when no command's exit is due to sweep it up.
	orphan := orphanPID(t, run(t, r, dir, orphanScript("0.3")))
	if h := sigchldHandler(t); h != 0 {
		t.Fatalf("SIGCHLD handler %#x while a command runs, want SIG_DFL", h)
	}
	waitFor(t, "reaping of the orphan", func() bool { return gone(orphan) })
	if dead(longPID) {
		t.Fatal("the orphan was reaped only once the long command had ended")
	}
	wantExit(t, <-long, 3)
	waitFor(t, "runtime's handler once idle", func() bool { return sigchldHandler(t) == goHandler })

	// An orphan that exits after the handler is back is reaped on its signal.
	orphan = orphanPID(t, run(t, r, dir, orphanScript("1.5")))
	ended := time.Now()
	waitFor(t, "runtime's handler", func() bool { return sigchldHandler(t) == goHandler })
	if gone(orphan) {
		t.Fatalf("the orphan ended before the handler was back (%v after the command ended)", time.Since(ended))
	}
	waitFor(t, "reaping of the orphan on its signal", func() bool { return gone(orphan) })

	// Stop in the middle of a command gives SIGCHLD back at once.
	go func() {
		res, _ := r.Run(context.Background(), dir, sh("sleep 1"))
		long <- res
	}()
	waitFor(t, "SIGCHLD off for a command", func() bool { return sigchldHandler(t) == 0 })
	stop()
	if h := sigchldHandler(t); h != goHandler {
		t.Fatalf("SIGCHLD handler %#x after Stop, want the runtime's %#x", h, goHandler)
	}
	wantExit(t, <-long, 0) // its pidfd still tells
}

// TestWatchAfterExit: a command that has exited, and whose pidfd's readiness the runtime's poller
// has already taken in, before its watcher first waits, is still delivered and its watcher ends.
func TestWatchAfterExit(t *testing.T) {
	reaper := NewReaper()
	defer reaper.Stop()
	if !reaper.pidfds {
		t.Skip("no pidfd_open here")
	}
	reaper.mu.Lock()
	pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
	if err != nil {
		reaper.mu.Unlock()
		t.Fatal(err)
	}
	ch := make(chan unix.WaitStatus, 1)
	reaper.waiting[pid] = ch
	f, err := pidfdFile(pid)
	reaper.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	// Let the child exit, and the poller run (a sleeping goroutine leaves the Ps idle, and an idle P
	// polls): the readiness of the pidfd is taken in before anyone waits on it.
	time.Sleep(200 * time.Millisecond)
	done := make(chan struct{})
	go func() {
		reaper.watch(f, pid, ch)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher of an exited command still waits")
	}
	if ws := <-ch; !ws.Exited() || ws.ExitStatus() != 0 {
		t.Fatalf("status %v", ws)
	}
}

// sigchldHandler is SIGCHLD's current handler as the kernel has it (0: SIG_DFL).
func sigchldHandler(t *testing.T) uintptr {
	t.Helper()
	var cur sigaction
	if err := rtSigaction(unix.SIGCHLD, nil, &cur); err != nil {
		t.Fatal(err)
	}
	return cur.handler
}

// orphanScript starts a process that leaves the command's group (with setsid, before the command
// ends and its group is killed) and exits after sleeping secs, and prints its pid.
func orphanScript(secs string) sandbox.Command {
	return sh("setsid sh -c 'sleep " + secs + "' </dev/null >/dev/null 2>&1 & p=$!; " +
		`until [ "$(cut -d' ' -f6 /proc/$p/stat)" = "$p" ]; do sleep 0.01; done; echo $p`)
}

// orphanPID is the pid a command printed, after checking that it exited 0.
func orphanPID(t *testing.T, res sandbox.CommandResult) int {
	t.Helper()
	wantExit(t, res, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatalf("no pid in %q", res.Stdout)
	}
	return pid
}

// gone reports whether pid has exited and been reaped.
func gone(pid int) bool { return errors.Is(unix.Kill(pid, 0), unix.ESRCH) }

// TestOOMScoreAdj: a command gets the runner's OOMScoreAdj, not the runner's own score.
func TestOOMScoreAdj(t *testing.T) {
	own, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	score, err := strconv.Atoi(strings.TrimSpace(string(own)))
	if err != nil {
		t.Fatal(err)
	}
	want := score + 1
	if score == 1000 {
		want = score - 1
	}
	r := &Runner{Env: baseEnv, OOMScoreAdj: want}
	// The score is written right after the fork: the command waits until it sees it.
	w := strconv.Itoa(want)
	cmd := sh(`until [ "$(cat /proc/$$/oom_score_adj)" = ` + w + ` ]; do sleep 0.01; done; cat /proc/$$/oom_score_adj`)
	cmd.Timeout = time.Minute
	res := run(t, r, t.TempDir(), cmd)
	wantExit(t, res, 0)
	if res.Stdout != w+"\n" {
		t.Fatalf("oom_score_adj %q, want %s", res.Stdout, w)
	}
}

func TestMain(m *testing.M) {
	// Every Run must leave no goroutine behind: pipe readers and waiters end with the command.
	goleak.VerifyTestMain(m)
}
