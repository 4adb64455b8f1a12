package oci

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Every sandbox runs in a user namespace of its own: its root is uid 0 inside and an unprivileged host
// uid outside, from a range of IDRangeSize host uids (and the same gids) that no other sandbox of the
// provider holds. Keyrings, per-uid kernel quotas (inotify instances, pending signals), signals and
// /proc access are then the sandbox's own, apart from the host's root and from every other sandbox.
//
// A range is taken when a generation's directory is laid out (a pool entry's too), recorded in its
// metadata, kept by the sandbox that takes a pool entry, and given back when the directory is removed.
// A restarted provider learns the ranges in use from the metadata of the directories it finds.
const (
	// IDRangeSize is how many host uids (and gids) one sandbox maps: 0..65535 inside.
	IDRangeSize = 65536
	// defaultIDBase is the first host uid of the first range. It is far above the ranges distributions
	// hand to users (/etc/subuid starts at 100000) and below 2^31, which some tools take as negative.
	defaultIDBase = 1 << 30
	// defaultIDRanges is how many ranges a provider hands out: up to 2^31.
	defaultIDRanges = (1<<31 - defaultIDBase) / IDRangeSize
)

// idRanges hands out the host uid ranges of a provider's sandboxes. A range is named by its first uid.
type idRanges struct {
	base  uint32
	count uint32

	mu   sync.Mutex
	used map[uint32]int // holders of each range: a sandbox and its forks share one (checkpoint.go)
	next uint32         // where the search for a free range starts: ranges are not reused at once
}

func newIDRanges(base, count uint32) *idRanges {
	return &idRanges{base: base, count: count, used: map[uint32]int{}}
}

// take returns a free range. Error: none is free.
func (r *idRanges) take() (uint32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := uint32(0); i < r.count; i++ {
		slot := (r.next + i) % r.count
		first := r.base + slot*IDRangeSize
		if r.used[first] == 0 {
			r.used[first] = 1
			r.next = slot + 1
			return first, nil
		}
	}
	return 0, fmt.Errorf("all %d uid ranges are in use", r.count)
}

// hold marks first as in use: a range a directory found at start-up records.
func (r *idRanges) hold(first uint32) {
	if first == 0 {
		return
	}
	r.mu.Lock()
	r.used[first]++
	r.mu.Unlock()
}

// give returns first to the free ranges.
func (r *idRanges) give(first uint32) {
	r.mu.Lock()
	if r.used[first]--; r.used[first] <= 0 {
		delete(r.used, first)
	}
	r.mu.Unlock()
}

// holders is how many hold first.
func (r *idRanges) holders(first uint32) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used[first]
}

// inUse is how many ranges are held.
func (r *idRanges) inUse() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.used)
}

// idMapping maps 0..IDRangeSize-1 inside to the range that starts at first.
func idMapping(first uint32) []specs.LinuxIDMapping {
	return []specs.LinuxIDMapping{{ContainerID: 0, HostID: first, Size: IDRangeSize}}
}

// searchable reports why the runtime, running a sandbox's init as an unprivileged host uid, could not
// reach dir: every directory from / down to it must be searchable by others (o+x), as the init mounts
// the root from inside the sandbox's user namespace. Nil when it can.
func searchable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s (mode %v) is not searchable by other users: sandboxes run as unprivileged "+
				"host uids and their runtime must reach it; give it and every parent o+x "+
				"(chmod o+x %s)", d, st.Mode().Perm(), d)
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}

// nsHolder is a process that holds a new user namespace until the runtime has joined it.
type nsHolder struct {
	cmd   *exec.Cmd
	stdin io.Closer
}

// path is the user namespace's path, for the runtime spec.
func (h *nsHolder) path() string { return fmt.Sprintf("/proc/%d/ns/user", h.cmd.Process.Pid) }

// release ends the holder: the namespace lives on as long as a process in it does.
func (h *nsHolder) release() {
	h.stdin.Close()
	h.cmd.Wait()
}

// holdUserNS makes a user namespace owned by host uid and gid first, mapping 0..IDRangeSize-1 in it to
// the range that starts there, and returns the process that holds it. A user namespace is owned by the
// effective ids of the process that makes it, and the kernel charges the per-user counts of everything
// inside it (inotify instances and watches, user namespaces, and more) to its owner as well: one the
// runtime made would charge them to the host's root, whose limits a sandbox could then exhaust. So
// the holder is forked by a thread of ours that takes the range's first ids for the instant of the
// fork, and it runs the agent binary's "hold" mode (reached through a descriptor, as the uid may not
// search the binary's directory), which waits for its standard input to close.
func (p *Provider) holdUserNS(first uint32) (*nsHolder, error) {
	bin, err := os.Open(p.cfg.AgentPath)
	if err != nil {
		return nil, err
	}
	defer bin.Close()
	cmd := exec.Command("/proc/self/fd/3", append(slices.Clone(p.cfg.AgentArgs), "hold")...)
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{bin}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	started := make(chan error, 1)
	go func() {
		// The ids are this thread's alone (raw system calls, not the process-wide setuid), and the
		// thread runs nothing else while it holds them. Should it fail to become root again, it stays
		// locked and ends with this goroutine.
		runtime.LockOSThread()
		if err := threadIDs(first); err != nil {
			started <- err
			if threadIDs(0) == nil {
				runtime.UnlockOSThread()
			}
			return
		}
		err := cmd.Start()
		if rerr := threadIDs(0); rerr != nil {
			started <- errors.Join(err, rerr)
			return
		}
		runtime.UnlockOSThread()
		started <- err
	}()
	if err := <-started; err != nil {
		stdin.Close()
		if cmd.Process != nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		return nil, fmt.Errorf("start the holder: %w", err)
	}
	h := &nsHolder{cmd: cmd, stdin: stdin}
	m := fmt.Sprintf("0 %d %d\n", first, IDRangeSize)
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", cmd.Process.Pid, f), []byte(m), 0); err != nil {
			cmd.Process.Kill()
			h.release()
			return nil, fmt.Errorf("write %s: %w", f, err)
		}
	}
	return h, nil
}

// pendingNS is a holder being made (holdUserNS) while the rest of a sandbox is laid out.
type pendingNS struct {
	done chan struct{}
	h    *nsHolder
	err  error
}

// holdUserNSAsync starts making the holder of the range at first.
func (p *Provider) holdUserNSAsync(first uint32) *pendingNS {
	ns := &pendingNS{done: make(chan struct{})}
	go func() {
		defer close(ns.done)
		ns.h, ns.err = p.holdUserNS(first)
	}()
	return ns
}

// wait returns the holder once it is made.
func (ns *pendingNS) wait() (*nsHolder, error) {
	<-ns.done
	return ns.h, ns.err
}

// release ends the holder, made or failed, once it is done.
func (ns *pendingNS) release() {
	if h, err := ns.wait(); err == nil {
		h.release()
	}
}

// threadIDs sets the effective uid and gid of the calling thread alone to id (the real and saved ones
// stay root's, so that it can go back to 0). The gid changes first on the way out and last on the way
// back, while the thread is still root.
func threadIDs(id uint32) error {
	keep := ^uintptr(0) // -1: unchanged
	if id != 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(id), keep); e != 0 {
			return fmt.Errorf("setresgid: %w", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(id), keep); e != 0 {
			return fmt.Errorf("setresuid: %w", e)
		}
		return nil
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, 0, keep); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, 0, keep); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	return nil
}
