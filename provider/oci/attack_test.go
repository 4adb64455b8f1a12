package oci_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

// The attacks of a sandbox's root on its host, its neighbours and its own limits, each tried for real
// in runc containers, and the promises that hold them off (docs/security.md). Every command here runs
// as root inside the sandbox.

// syscalls is a python3 program, run inside a sandbox, that makes each raw system call named in its
// arguments ("name:number:arg,arg,...") and prints "name result errno" a line.
const syscalls = `
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
for spec in sys.argv[1:]:
    name, nr, args = spec.split(":")
    argv = [ctypes.c_long(int(a)) for a in args.split(",") if a]
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(int(nr)), *argv)
    print(name, r, ctypes.get_errno())
`

// pysyscalls runs syscalls in the sandbox and returns each call's result and errno by name.
func pysyscalls(t *testing.T, p *oci.Provider, ref sandbox.Ref, calls ...string) map[string][2]int {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skip("system call numbers are amd64's")
	}
	res, err := p.Exec(ctxFor(t), ref, sandbox.Command{Argv: append([]string{"python3", "-c", syscalls}, calls...), Timeout: time.Minute})
	if err != nil || code(res) != 0 {
		t.Fatalf("syscalls: %+v %v", res, err)
	}
	out := map[string][2]int{}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		f := strings.Fields(line)
		r, _ := strconv.Atoi(f[1])
		e, _ := strconv.Atoi(f[2])
		out[f[0]] = [2]int{r, e}
	}
	return out
}

// TestAttackRedirectsAgentSocket: root in sandbox A swaps whatever it can reach for a symlink to sandbox
// B's agent socket or to a host socket, and the daemon's connections are cut. The next call on A still
// runs in A, and the host socket is never dialled: the daemon reaches each agent through a socket in a
// directory no sandbox sees.
func TestAttackRedirectsAgentSocket(t *testing.T) {
	dir := testenv.StateDir(t)
	p := newProviderAt(t, dir)
	a, b := ready(t, p, nil), ready(t, p, nil)
	for ref, who := range map[sandbox.Ref]string{a: "A", b: "B"} {
		if err := p.WriteFile(ctxFor(t), ref, "whoami", []byte(who)); err != nil {
			t.Fatal(err)
		}
	}
	hostSock := filepath.Join(t.TempDir(), "host.sock")
	ln, err := net.Listen("unix", hostSock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialled := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			dialled <- struct{}{}
			c.Close()
		}
	}()
	bSock := filepath.Join(dir, "sandboxes", b.Name(), "run", "agent.sock")
	for _, target := range []string{bSock, hostSock} {
		// Every directory the sandbox could hold the daemon's dial path in, and the ones a host path of
		// the state directory shows up in (mountinfo).
		script := fmt.Sprintf(`
for d in /.sandboxd/run /.sandboxd/sock /.sandboxd /run /workspace; do
  rm -f "$d/agent.sock" 2>/dev/null; ln -s %q "$d/agent.sock" 2>/dev/null && echo "linked $d"
done
grep -o '%s[^ ,]*' /proc/self/mountinfo | sort -u
true`, target, dir)
		res := sh(t, p, a, script)
		if strings.Contains(res.Stdout, "linked /.sandboxd") {
			t.Errorf("the sandbox replaced the agent's socket: %+v", res)
		}
		if strings.Contains(res.Stdout, filepath.Join(dir, "sandboxes", a.Name(), "run")) {
			t.Errorf("the sandbox sees the run directory of its agent's socket: %s", res.Stdout)
		}
		// The file API cannot reach it either.
		if err := p.WriteFile(ctxFor(t), a, "/.sandboxd/run/agent.sock", []byte("x")); err == nil {
			t.Error("the file API wrote the agent's socket path")
		}
		oci.DropAgentConnections(p)
		got, err := p.ReadFile(ctxFor(t), a, "whoami")
		if err != nil || string(got) != "A" {
			t.Fatalf("after the swap to %s, a read on A answered %q, %v", target, got, err)
		}
		if res := sh(t, p, a, "cat whoami"); res.Stdout != "A" {
			t.Fatalf("after the swap to %s, an exec on A ran in %q", target, res.Stdout)
		}
	}
	select {
	case <-dialled:
		t.Fatal("the daemon dialled the host socket a sandbox pointed it to")
	default:
	}
	if st, err := os.Stat(filepath.Join(dir, "sandboxes", a.Name(), "run")); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("run directory: %v %v", st, err)
	}
}

// TestAttackLiftsOwnLimits: root in a 64 MiB sandbox cannot make a user namespace (and through it a
// cgroup namespace and a cgroup mount) to raise its own limits; the limits hold and a 256 MiB
// allocation fails. (On the code before, the namespaces were made; the cgroupfs mount itself was
// refused on this kernel all the same.)
func TestAttackLiftsOwnLimits(t *testing.T) {
	limited(t, sandbox.Resources{MemoryMiB: 64, CPUMillis: 500}, func(t *testing.T, p *oci.Provider, ref sandbox.Ref, cg func(string) string) {
		// The way up: a user namespace (full capabilities in it), a cgroup namespace and a mount
		// namespace owned by it, a cgroupfs mounted there (with the raw system call: mount(8) wants a
		// mapped uid 0), and the limit files written through it.
		res := sh(t, p, ref, `
unshare -U true && echo "userns made"
unshare -U -C -m true && echo "cgroupns made"
mkdir -p /tmp/cg
unshare -U -C -m python3 -c '
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for ctl, f in (("memory", "memory.limit_in_bytes"), ("pids", "pids.max"), ("cpu", "cpu.cfs_quota_us")):
    if libc.mount(b"none", b"/tmp/cg", b"cgroup", 0, ctl.encode()) == 0:
        print("cgroup mounted", ctl)
        open("/tmp/cg/" + f, "w").write("-1")
        print("wrote", f)
        libc.umount2(b"/tmp/cg", 2)
'
for f in /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max; do
  [ -e "$f" ] && echo -1 > "$f" && echo "wrote $f"
done
true`)
		for _, bad := range []string{"userns made", "cgroupns made", "cgroup mounted", "wrote"} {
			if strings.Contains(res.Stdout, bad) {
				t.Errorf("%s: %+v", bad, res)
			}
		}
		want := map[string]string{
			filepath.Join(cg("memory"), "memory.limit_in_bytes"): strconv.Itoa(64 << 20),
			filepath.Join(cg("cpu"), "cpu.cfs_quota_us"):         "50000",
			filepath.Join(cg("pids"), "pids.max"):                strconv.FormatInt(hostPids(t, p, 512), 10),
		}
		for file, v := range want {
			if raw, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(raw)) != v {
				t.Errorf("%s: %q %v, want %s", file, raw, err, v)
			}
		}
		const alloc = "python3 -c 'b = bytearray(256 << 20); b[::4096] = b\"x\" * len(b[::4096]); print(\"allocated\")'"
		if onGVisor(t, p) {
			endsGVisor(t, p, ref, alloc)
			return
		}
		big := sh(t, p, ref, alloc)
		if code(big) == 0 || strings.Contains(big.Stdout, "allocated") {
			t.Errorf("a 256 MiB allocation in a 64 MiB sandbox: %+v", big)
		}
	})
}

// TestAttackHostKeyrings: a sandbox neither reads a key the host's root stored nor stores one of its
// own (which a second sandbox, or the host, would read).
func TestAttackHostKeyrings(t *testing.T) {
	p := newProvider(t)
	ref := ready(t, p, nil)
	id, err := unix.AddKey("user", "sandboxd-test-"+string(sandbox.NewID()), []byte("host secret"), unix.KEY_SPEC_USER_KEYRING)
	if err != nil {
		t.Fatalf("add a host key: %v", err)
	}
	t.Cleanup(func() { unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0) })
	const userKeyring = -4 // KEY_SPEC_USER_KEYRING
	got := pysyscalls(t, p, ref,
		fmt.Sprintf("read:250:%d,%d,0,0", unix.KEYCTL_READ, id),
		fmt.Sprintf("describe:250:%d,%d,0,0", unix.KEYCTL_DESCRIBE, id),
		fmt.Sprintf("getkeyring:250:%d,%d,0", unix.KEYCTL_GET_KEYRING_ID, userKeyring),
		fmt.Sprintf("addkey:248:0,0,0,0,%d", userKeyring))
	for name, r := range got {
		if r[0] != -1 {
			t.Errorf("keyctl %s from the sandbox: %d (errno %d)", name, r[0], r[1])
		}
	}
	if res := sh(t, p, ref, "cat /proc/keys 2>/dev/null | wc -c"); strings.TrimSpace(res.Stdout) != "0" {
		t.Errorf("keys visible in the sandbox: %+v", res)
	}
}

// TestAttackAgentDescriptors: nothing in a sandbox traces its agent, takes its descriptors
// (pidfd_getfd, /proc/1/fd) or writes to its log, which is a file of the daemon's.
func TestAttackAgentDescriptors(t *testing.T) {
	dir := testenv.StateDir(t)
	p := newProviderAt(t, dir)
	ref := ready(t, p, nil)
	log := filepath.Join(dir, "sandboxes", ref.Name(), "agent.log")
	before, err := os.Stat(log)
	if err != nil {
		t.Fatal(err)
	}
	got := pysyscalls(t, p, ref,
		"ptrace:101:16,1,0,0", // PTRACE_ATTACH to PID 1
		"pidfd_open:434:1,0")
	if r := got["ptrace"]; r[0] != -1 || r[1] != int(unix.EPERM) {
		t.Errorf("ptrace attach to the agent: %v", r)
	}
	res := sh(t, p, ref, `
python3 - <<'EOF'
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.syscall(434, 1, 0)
print("getfd", libc.syscall(438, fd, 3, 0), ctypes.get_errno())
EOF
for i in 1 2 3; do head -c 1048576 /dev/zero > /proc/1/fd/1 2>/dev/null && echo "wrote fd/1"; done
readlink /proc/1/fd/3 && echo "read fd 3"
true`)
	if !strings.Contains(res.Stdout, "getfd -1 1\n") || strings.Contains(res.Stdout, "wrote") || strings.Contains(res.Stdout, "read fd") {
		t.Errorf("the agent's descriptors: %+v", res)
	}
	after, err := os.Stat(log)
	if err != nil || after.Size() != before.Size() {
		t.Errorf("the agent's log grew from %d to %v bytes: %v", before.Size(), after, err)
	}
}

// TestAttackHostQuotas: per-uid kernel quotas are the sandbox's own. A sandbox that takes every inotify
// instance it can leaves the host's root all of its own.
func TestAttackHostQuotas(t *testing.T) {
	p := newProvider(t)
	ref := ready(t, p, nil)
	done := make(chan sandbox.CommandResult, 1)
	go func() {
		res, _ := p.Exec(context.Background(), ref, sandbox.Command{Argv: []string{"python3", "-c", `
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 4000:
    fd = libc.inotify_init()
    if fd < 0:
        break
    fds.append(fd)
open("/workspace/taken", "w").write(str(len(fds)))
for _ in range(1200):
    if os.path.exists("/workspace/release"):
        break
    time.sleep(0.05)
print(len(fds))
`}, Timeout: 2 * time.Minute})
		done <- res
	}()
	waitFor(t, func() bool { _, err := p.ReadFile(ctxFor(t), ref, "taken"); return err == nil })
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Errorf("the host's root cannot make an inotify instance while a sandbox holds its own: %v", err)
	} else {
		unix.Close(fd)
	}
	if err := p.WriteFile(ctxFor(t), ref, "release", nil); err != nil {
		t.Fatal(err)
	}
	if res := <-done; code(res) != 0 {
		t.Fatalf("%+v", res)
	}
}

// TestIsolationPromises: the sandbox's root is an unprivileged host uid range of its own, behind a
// seccomp filter, on a read-only root whose daemon directories it cannot write, and two sandboxes
// neither see nor signal each other.
func TestIsolationPromises(t *testing.T) {
	dir := testenv.StateDir(t)
	p := newProviderAt(t, dir)
	a, b := ready(t, p, nil), ready(t, p, nil)
	baseA, err := oci.IDBase(p, a)
	if err != nil {
		t.Fatal(err)
	}
	baseB, err := oci.IDBase(p, b)
	if err != nil || baseA == 0 || baseA == baseB {
		t.Fatalf("uid ranges %d and %d: %v", baseA, baseB, err)
	}
	t.Run("UIDMap", func(t *testing.T) {
		res := sh(t, p, a, "cat /proc/self/uid_map /proc/self/gid_map; id -u")
		want := fmt.Sprintf("0 %d %d\n0 %d %d\n0\n", baseA, oci.IDRangeSize, baseA, oci.IDRangeSize)
		gvisor := onGVisor(t, p)
		if gvisor {
			// gVisor's kernel has user namespaces of its own: the sandbox is in that kernel's first,
			// which maps every id to itself. No process of the sandbox is a host process; the host
			// processes that run it (its kernel, that kernel's stubs, the gofer) are in the sandbox's
			// host user namespace, checked below.
			want = "0 0 4294967295\n0 0 4294967295\n0\n"
		}
		if strings.Join(strings.Fields(res.Stdout), " ") != strings.Join(strings.Fields(want), " ") {
			t.Fatalf("inside: %q, want %q", res.Stdout, want)
		}
		if gvisor {
			cg, err := filepath.Glob("/sys/fs/cgroup/pids/sandboxd-*-" + a.Name() + "/cgroup.procs")
			if err != nil || len(cg) != 1 {
				t.Fatalf("pids cgroup of %s: %v %v", a, cg, err)
			}
			raw, _ := os.ReadFile(cg[0])
			for _, pid := range strings.Fields(string(raw)) {
				status, _ := os.ReadFile("/proc/" + pid + "/status")
				if !strings.Contains(string(status), fmt.Sprintf("Uid:\t%d\t%d", baseA, baseA)) {
					t.Fatalf("host process %s of the sandbox:\n%s", pid, status)
				}
			}
		}
		// Outside, the agent (gVisor: the kernel that runs it) is the range's first uid.
		pid := agentPid(t, p, a)
		st, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		if err != nil {
			t.Fatal(err)
		}
		if uid := st.Sys().(*syscall.Stat_t).Uid; uid != 0 && uid != baseA {
			t.Fatalf("the agent runs as host uid %d", uid)
		}
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if !strings.Contains(string(status), fmt.Sprintf("Uid:\t%d\t%d", baseA, baseA)) {
			t.Fatalf("the agent's host credentials:\n%s", status)
		}
	})
	t.Run("Seccomp", func(t *testing.T) {
		if res := sh(t, p, a, "grep '^Seccomp:' /proc/self/status"); strings.Join(strings.Fields(res.Stdout), " ") != "Seccomp: 2" {
			t.Fatalf("%+v", res)
		}
		got := pysyscalls(t, p, a,
			"unshare_user:272:268435456", // CLONE_NEWUSER
			"unshare_mnt:272:131072",     // CLONE_NEWNS
			"mount:165:0,0,0,0,0",
			"bpf:321:0,0,0",
			"perf_event_open:298:0,0,0,0,0",
			"userfaultfd:323:0",
			"keyctl:250:0,0,0,0",
			"add_key:248:0,0,0,0,0",
			"pidfd_getfd:438:0,0,0")
		for name, r := range got {
			if r[0] != -1 || r[1] != int(unix.EPERM) {
				t.Errorf("%s: %v, want EPERM", name, r)
			}
		}
		if len(got) != 9 {
			t.Fatalf("%d answers", len(got))
		}
	})
	t.Run("DaemonDirectories", func(t *testing.T) {
		res := sh(t, p, a, `
ls -a /.sandboxd
for f in /.sandboxd/x /.sandboxd/run/x /x /usr/x /etc/x; do touch "$f" 2>/dev/null && echo "wrote $f"; done
true`)
		if strings.Contains(res.Stdout, "wrote") || strings.Contains(res.Stdout, "run") {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("Neighbours", func(t *testing.T) {
		// B's agent, by its host pid: out of A's sight and reach.
		pid := agentPid(t, p, b)
		res := sh(t, p, a, fmt.Sprintf("kill -0 %d && echo signalled; ls /proc | grep -c '^[0-9]'; cat /proc/%d/status 2>/dev/null | head -1", pid, pid))
		if strings.Contains(res.Stdout, "signalled") || strings.Contains(res.Stdout, "Name:") {
			t.Fatalf("%+v", res)
		}
	})
}

// TestDefaultLimits: a sandbox whose spec sets no limit has the provider's: memory, a /workspace disk,
// bounded tmpfs inodes, open files; and a spec above a maximum is refused before anything is made.
func TestDefaultLimits(t *testing.T) {
	cfg := testConfig(t, testenv.StateDir(t))
	cfg.DefaultMemoryMiB, cfg.MaxMemoryMiB, cfg.DefaultDiskMiB, cfg.MaxDiskMiB, cfg.TmpInodes = 64, 128, 16, 32, 256
	p := newProviderWith(t, cfg)
	for _, res := range []sandbox.Resources{{MemoryMiB: 129}, {DiskMiB: 33}} {
		spec := sandbox.Spec{ClientRequestID: "t", Resources: &res}
		if err := p.ValidateSpec(spec); err == nil {
			t.Errorf("%+v above the maxima passed", res)
		}
	}
	ref := ready(t, p, nil)
	res := sh(t, p, ref, `
ulimit -n
df -m /workspace | tail -1 | awk '{print $2}'
head -c 33554432 /dev/zero > /workspace/big 2>/dev/null && echo "wrote 32 MiB"
rm -f /workspace/big
i=0; while [ $i -lt 400 ]; do : > /tmp/f$i 2>/dev/null || break; i=$((i+1)); done; echo "files $i"
true`)
	lines := strings.Split(res.Stdout, "\n")
	if len(lines) < 3 || lines[0] != "4096" {
		t.Fatalf("%+v", res)
	}
	if mib, _ := strconv.Atoi(lines[1]); mib < 8 || mib > 16 {
		t.Errorf("/workspace is %s MiB, want 16: %+v", lines[1], res)
	}
	// On gVisor a tmpfs file is an object of the sandbox's kernel, in memory charged to the sandbox,
	// not a host inode: the memory limit bounds them (and runsc passes a tmpfs no nr_inodes).
	files := !onGVisor(t, p) && strings.Contains(res.Stdout, "files 400")
	if strings.Contains(res.Stdout, "wrote 32 MiB") || files {
		t.Errorf("a default did not hold: %+v", res)
	}
	const alloc = `python3 -c 'b = bytearray(128 << 20); b[::4096] = b"x" * len(b[::4096]); print("allocated")'`
	if onGVisor(t, p) {
		endsGVisor(t, p, ref, alloc)
	} else if res := sh(t, p, ref, alloc); strings.Contains(res.Stdout, "allocated") {
		t.Errorf("the default memory limit did not hold: %+v", res)
	}
}

// agentPid is the host pid of ref's agent (its container's init).
func agentPid(t *testing.T, p *oci.Provider, ref sandbox.Ref) int {
	t.Helper()
	pid, err := oci.InitPid(p, ref)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestAttackMountinfoNamesNoHostPath: a sandbox's view of its mounts names no path of the daemon's:
// not its state directory (where the root, disks and sockets live) nor the agent binary's. (On the
// code before, the root and the agent were binds of host paths, shown in mountinfo's root field.)
// What it shows of the host is what is bound in on purpose: /usr and /etc's shared parts, by their
// own names.
func TestAttackMountinfoNamesNoHostPath(t *testing.T) {
	dir := testenv.StateDir(t)
	p := newProviderAt(t, dir)
	ref := ready(t, p, nil)
	res := sh(t, p, ref, "cat /proc/self/mountinfo; cat /proc/self/mounts; cat /proc/1/mountinfo 2>/dev/null")
	if res.ExitCode == nil || *res.ExitCode != 0 || !strings.Contains(res.Stdout, " / ") {
		t.Fatalf("reading the mounts: %+v", res)
	}
	for _, host := range []string{dir, filepath.Dir(testenv.BuildAgent(t))} {
		if strings.Contains(res.Stdout, host) {
			t.Errorf("the sandbox's mounts name %s:\n%s", host, res.Stdout)
		}
	}
}
