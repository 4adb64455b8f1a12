package oci

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// runtimeClass is the kind of OCI runtime the provider drives, told in New from what the binary says
// of itself (`--version`), not from its name. It is what the manifest reports, and everything the
// provider does differently for one runtime follows from it, in three places: the flags (runc.go:
// runc.cmd and runc.run), the spec (containerSpec) and the start of a container (Provider.start).
//
// gVisor's runsc runs the sandbox on a kernel of its own, the sentry (a host process), with a gofer
// process for its files. Against runc it takes:
//   - no inherited listening socket: runsc imports a descriptor it passes on (--pass-fd, or stdio)
//     as a connected socket, on which accept fails. So the agent binds its socket itself, in a host
//     directory bound into the sandbox, and gVisor makes it on the host (--host-uds=create). Before
//     anything else runs in the sandbox, the provider links that socket into the run directory, out
//     of the sandbox's sight, where it dials it as it dials the socket it binds itself for runc, and
//     takes the directory from the sandbox (takeAgentSocket);
//   - no user namespace joined by path (runsc would set it on its multithreaded self, which the kernel
//     refuses): runsc makes one from the spec's mappings, owned by the host's root, and runs the
//     sentry, its stubs and the gofer in it as the sandbox's uid range;
//   - no overlay or "rro" (a read-only bind is read-only all the way down), no mqueue, no idmapped
//     mounts, no `features` subcommand, no nr_inodes for a tmpfs (its files are the sentry's, in the
//     sandbox's memory); the spec's seccomp filter only with --oci-seccomp, applied by the sentry;
//   - rlimits set in the spec (the sentry is the kernel that holds them), so the sandbox's task limit
//     is its kernel's RLIMIT_NPROC, and the host's pids cgroup bounds the sentry's own host processes
//     (gvisorHostPids);
//   - a kernel that has openat2, which the agent needs (checkGVisor).
//
// Both runtimes take the same subcommands (run, state, list, kill, pause, resume, delete) and answer
// state and list with the same JSON.
type runtimeClass string

const (
	classRunc   runtimeClass = "runc"
	classGVisor runtimeClass = "gvisor"
)

// detectClass runs the runtime binary at path with --version: runsc (gVisor) says "runsc version ...";
// anything else is taken as runc, whose flags and spec it must then take.
func detectClass(ctx context.Context, path string) (runtimeClass, error) {
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	if strings.HasPrefix(first, "runsc ") {
		return classGVisor, nil
	}
	return classRunc, nil
}

// checkGVisor reports why the runsc at path cannot run the agent, or nil when it can. The agent
// confines every file it touches to the sandbox's root with openat2 (fsroot), which gVisor's kernel
// has had since 2026-08: in an older one (Debian 12's is from 2022-12) the agent starts and answers,
// but no command and no file call can resolve a path. runsc lists what its kernel implements in
// `runsc help syscalls`.
func checkGVisor(ctx context.Context, path string) error {
	out, err := exec.CommandContext(ctx, path, "help", "syscalls").Output()
	if err != nil {
		return fmt.Errorf("%s help syscalls: %w", path, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		// NUM NAME SUPPORT NOTE, for each architecture: "437  openat2  Full Support  ..."
		if f := strings.Fields(line); len(f) >= 3 && f[1] == "openat2" && f[2] != "Unimplemented" {
			return nil
		}
	}
	return fmt.Errorf("the gVisor kernel of %s (%s) has no openat2, which the sandbox agent needs to resolve "+
		"paths inside the sandbox; use a gVisor from 2026-08 or later", path, gvisorVersion(ctx, path))
}

// gvisorVersion is what runsc says its version is.
func gvisorVersion(ctx context.Context, path string) string {
	out, _ := exec.CommandContext(ctx, path, "--version").Output()
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first)
}

// unmountNullNetNS unmounts what runsc pins in its root: the empty network namespace its gofers share,
// a bind mount it leaves for the next sandbox. It goes when the provider closes.
func unmountNullNetNS(root string) {
	for unix.Unmount(filepath.Join(root, "null-netns"), unix.MNT_DETACH) == nil {
	}
}

// guestSockDir is where a gVisor sandbox's agent binds its socket: the host directory l.sockDir(),
// bound read-write.
const guestSockDir = "/.sandboxd/sock"

// takeAgentSocket waits, until ctx ends, for the agent of the gVisor sandbox laid out in l to have
// bound its socket in l.sockDir() (gVisor makes it on the host, owned by the sandbox's root, host
// uid idBase) and made it its own (mode 0600), then links it at l.socket(), in the run directory
// no sandbox sees, where the provider dials it. Only the agent runs in the sandbox until then, so what
// is linked is the agent's socket; the link holds it, so nothing the sandbox does later to the file it
// sees changes what the provider dials. Last, the socket and its directory become the host root's
// (mode 0600 and 0700): root in the sandbox, without CAP_DAC_OVERRIDE, can neither replace the file
// nor connect to its agent through it.
func takeAgentSocket(ctx context.Context, l layout, idBase uint32) error {
	return takeAgentSocketAs(ctx, l, idBase, filepath.Base(l.socket()))
}

// takeAgentSocketAs is takeAgentSocket of the socket name in l.sockDir() (checkpoint.go: an agent
// woken after a checkpoint binds a name of its own).
func takeAgentSocketAs(ctx context.Context, l layout, idBase uint32, name string) error {
	dir, err := unix.Open(l.sockDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	var sock int
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 5*time.Millisecond) {
		fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				unix.Close(fd)
				return err
			}
			if st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Uid != idBase {
				unix.Close(fd)
				return fmt.Errorf("%s in the socket directory is not the agent's socket (mode %o, uid %d)", name, st.Mode, st.Uid)
			}
			if st.Mode&0o777 == 0o600 {
				sock = fd
				break
			}
			unix.Close(fd)
		} else if err != unix.ENOENT {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the agent bound no socket: %w", ctx.Err())
		case <-time.After(delay):
		}
	}
	defer unix.Close(sock)
	self := "/proc/self/fd/" + strconv.Itoa(sock)
	if err := unix.Linkat(unix.AT_FDCWD, self, unix.AT_FDCWD, l.socket(), unix.AT_SYMLINK_FOLLOW); err != nil {
		return fmt.Errorf("link the agent's socket: %w", err)
	}
	if err := os.Chown(self, 0, 0); err != nil {
		return err
	}
	if err := unix.Fchownat(dir, "", 0, 0, unix.AT_EMPTY_PATH); err != nil {
		return err
	}
	return os.Chmod("/proc/self/fd/"+strconv.Itoa(dir), 0o700)
}

// children watches, by container, the runtime's processes that are this process's children once the
// runtime has returned, and reaps each as it ends. A runc container has one, its init, which stop
// reaps by the pid runc reports. A gVisor sandbox has two: its kernel, the sentry (the pid runsc
// reports while it runs), and the gofer, which no runtime call names. runsc takes a sentry that has
// ended but is not reaped for a running sandbox (and waits for the gofer to be gone before it deletes
// the container), so they are reaped as they end, not when the container is removed. A process reaps
// only what it started: a restarted daemon is the parent of neither.
var children runtimeChildren

type runtimeChildren struct {
	mu   sync.Mutex
	byID map[string][]chan struct{} // each closed once its child is reaped
}

// watch reaps, as each ends, the processes in the cgroup at path that are children of this process:
// those of the container id (its runtime root and name).
func (c *runtimeChildren) watch(id, path string) {
	var done []chan struct{}
	self := os.Getpid()
	for _, pid := range cgroupProcs(path) {
		if parentOf(pid) == self {
			ch := make(chan struct{})
			done = append(done, ch)
			go func() {
				defer close(ch)
				waitChild(pid)
			}()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[string][]chan struct{}{}
	}
	c.byID[id] = done
}

// reap waits, up to 30 s, until every watched process of the container id has been reaped.
func (c *runtimeChildren) reap(ctx context.Context, id string) error {
	c.mu.Lock()
	done := c.byID[id]
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, ch := range done {
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the runtime's processes of %s: %w", id, ctx.Err())
		}
	}
	c.mu.Lock()
	delete(c.byID, id)
	c.mu.Unlock()
	return nil
}

// waitChild waits until the child pid has ended, on a pidfd in the runtime's poller (no thread waits),
// and reaps it.
func waitChild(pid int) {
	reaped := func() bool {
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		return got == pid || err == unix.ECHILD
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		waitExit(context.Background(), pid) // no pidfds: poll
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err == nil {
		// Reaped before each wait, the first included: the poller forgets a readiness that came
		// before its first wait.
		err = rc.Read(func(uintptr) bool { return reaped() })
	}
	if err != nil {
		waitExit(context.Background(), pid)
	}
}

// cgroupProcs lists the processes in the cgroup at path: of its pids hierarchy (v1), or of the unified
// one (v2).
func cgroupProcs(path string) []int {
	raw, err := os.ReadFile(filepath.Join(cgroupRoot, "pids", path, "cgroup.procs"))
	if err != nil {
		raw, _ = os.ReadFile(filepath.Join(cgroupRoot, path, "cgroup.procs"))
	}
	var pids []int
	for _, f := range strings.Fields(string(raw)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// parentOf is the parent pid of pid, or 0 when it cannot be read.
func parentOf(pid int) int {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(raw[i+1:])) // state, ppid, ...
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
