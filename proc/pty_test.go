package proc

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

// readUntil reads f until want has come, within 10 s, and returns what was read.
func readUntil(t *testing.T, f *os.File, want string) string {
	t.Helper()
	_ = f.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got []byte
	buf := make([]byte, 512)
	for !strings.Contains(string(got), want) {
		n, err := f.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("waiting for %q: %v after %q", want, err, got)
		}
	}
	return string(got)
}

// TestSpawnPTY: a process on a pty leads a session whose controlling terminal is the pty, sees the
// size it was given and each Resize, and its master is pollable: a read has a deadline.
func TestSpawnPTY(t *testing.T) {
	r := &Runner{Env: baseEnv}
	defer r.Close(t.Context())
	sp, err := r.SpawnPTY(t.TempDir(), []string{"sh", "-c", "stty size; read x; stty size"}, nil, 24, 80)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Output.Close()
	defer sp.Stdin.Close()
	if !sp.TTY {
		t.Fatal("no TTY")
	}
	readUntil(t, sp.Output, "24 80")
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(sp.PID) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ppid pgrp session tty_nr ...
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	if f[2] != strconv.Itoa(sp.PID) || f[3] != strconv.Itoa(sp.PID) || f[4] == "0" {
		t.Fatalf("pgrp %s, session %s, tty %s; want %d, %d and a tty", f[2], f[3], f[4], sp.PID, sp.PID)
	}
	if err := Resize(sp.Output, 30, 100); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][2]int{{0, 80}, {24, 0}, {1 << 16, 80}} {
		if err := Resize(sp.Output, bad[0], bad[1]); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("resize to %v: %v", bad, err)
		}
	}
	if _, err := sp.Stdin.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, sp.Output, "30 100")
	select {
	case <-sp.Done:
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not exit")
	}
	if code := ExitCode(sp.Status); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	// Nothing holds the pty's other end now: a read ends at once instead of waiting.
	_ = sp.Output.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	for {
		if _, err := sp.Output.Read(buf); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the master's read waited for its deadline after the exit")
			}
			break
		}
	}
	if _, err := r.SpawnPTY(t.TempDir(), []string{"true"}, nil, 0, 80); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("a pty of 0 rows: %v", err)
	}
}

// TestSpawnPTYDeadlines: the master's copies are non-blocking, so a deadline cuts a read of a
// terminal that says nothing and a write to one whose process reads nothing (its input fills up).
func TestSpawnPTYDeadlines(t *testing.T) {
	r := &Runner{Env: baseEnv}
	defer r.Close(t.Context())
	sp, err := r.SpawnPTY(t.TempDir(), []string{"sleep", "60"}, nil, 24, 80)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Output.Close()
	defer sp.Stdin.Close()
	for _, f := range []*os.File{sp.Output, sp.Stdin} {
		sc, err := f.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		_ = sc.Control(func(fd uintptr) {
			if fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK == 0 {
				t.Errorf("%s: flags %#o, %v: blocking", f.Name(), fl, err)
			}
		})
	}
	_ = sp.Output.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := sp.Output.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read of a quiet terminal: %v", err)
	}
	_ = sp.Stdin.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := sp.Stdin.Write(make([]byte, 4<<20)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a write to a terminal nobody reads: %v", err)
	}
}

// TestSpawnAsTheRunnersUser: a background process, on a pty or not, runs as the runner's user, as
// its commands do.
func TestSpawnAsTheRunnersUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run as another user")
	}
	r := &Runner{Env: baseEnv, Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	defer r.Close(t.Context())
	dir := "/" // a test's own directories are its user's alone
	for _, tty := range []bool{false, true} {
		spawn := r.Spawn
		if tty {
			spawn = func(dir string, argv []string, env map[string]string) (*Spawned, error) {
				return r.SpawnPTY(dir, argv, env, 24, 80)
			}
		}
		sp, err := spawn(dir, []string{"sh", "-c", "echo uid=$(id -u):$(id -g)"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		readUntil(t, sp.Output, "uid=65534:65534")
		<-sp.Done
		sp.Output.Close()
		sp.Stdin.Close()
	}
}
