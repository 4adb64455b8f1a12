package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

const cgroupRoot = "/sys/fs/cgroup"

// runtimesOn lists the processes, other than this one, running the OCI runtime on the state root root:
// those whose arguments hold "--root" followed by root.
func runtimesOn(root string) []int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue // gone already
		}
		args := strings.Split(string(raw), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "--root" && args[i+1] == root {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// WaitRuntimes waits, for at most within, until no process runs the OCI runtime on root (a runtime's
// --root, such as <StateDir>/runc), and returns those still running then. A provider killed while
// `runc run` was under way leaves that runc running on: left alone, it could create its container
// after the next provider has judged the allocation dead half-way and removed its directory, and that
// container would be nobody's. New waits so; so should anything else that judges what a killed
// provider left, before it lists the containers.
func WaitRuntimes(ctx context.Context, root string, within time.Duration) []int {
	deadline := time.Now().Add(within)
	for {
		pids := runtimesOn(root)
		if len(pids) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return pids
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// removeCgroups removes the sandbox's cgroup directory in every hierarchy: runc delete leaves some
// behind (the named and unified hierarchies of a hybrid layout).
func removeCgroups(path string) error {
	if path == "" || !filepath.IsAbs(path) || strings.Contains(path, "..") {
		return fmt.Errorf("refusing to remove cgroup %q", path)
	}
	hier, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hier {
		dir := filepath.Join(cgroupRoot, h.Name(), path)
		for i := 0; ; i++ {
			err := unix.Rmdir(dir)
			if err == nil || err == unix.ENOENT || err == unix.ENOTDIR {
				break
			}
			if err == unix.EBUSY && i < 200 {
				time.Sleep(5 * time.Millisecond) // the last task is still leaving
				continue
			}
			errs = append(errs, fmt.Errorf("rmdir %s: %w", dir, err))
			break
		}
	}
	return errors.Join(errs...)
}

// setLimits gives the running container whose cgroups are at path the memory and CPU limits of res,
// the values containerSpec would have given runc at its start. It is how a warm pool entry, started
// without limits, becomes a sandbox that has them; runc's own record of the container's resources is
// left as it was, and nothing reads it. An entry's limits are none, so every value lowers one: memory
// is written before memory+swap, which may not be below it.
func setLimits(path string, res sandbox.Resources) error {
	// swap marks the memory+swap limit, absent on a host without swap accounting: runc leaves it out
	// there as well.
	type setting struct {
		file, value string
		swap        bool
	}
	var settings []setting
	v2 := fileExists(filepath.Join(cgroupRoot, "cgroup.controllers")) // one unified hierarchy
	if res.MemoryMiB > 0 {
		limit := strconv.FormatInt(memoryLimit(res), 10)
		if v2 {
			dir := filepath.Join(cgroupRoot, path)
			settings = append(settings, setting{filepath.Join(dir, "memory.max"), limit, false},
				setting{filepath.Join(dir, "memory.swap.max"), "0", true})
		} else {
			dir := filepath.Join(cgroupRoot, "memory", path)
			settings = append(settings, setting{filepath.Join(dir, "memory.limit_in_bytes"), limit, false},
				setting{filepath.Join(dir, "memory.memsw.limit_in_bytes"), limit, true})
		}
	}
	if res.CPUMillis > 0 {
		quota, period := cpuQuota(res)
		q, per := strconv.FormatInt(quota, 10), strconv.FormatUint(period, 10)
		if v2 {
			settings = append(settings, setting{filepath.Join(cgroupRoot, path, "cpu.max"), q + " " + per, false})
		} else {
			dir := filepath.Join(cgroupRoot, "cpu", path)
			settings = append(settings, setting{filepath.Join(dir, "cpu.cfs_period_us"), per, false},
				setting{filepath.Join(dir, "cpu.cfs_quota_us"), q, false})
		}
	}
	for _, s := range settings {
		f, err := os.OpenFile(s.file, os.O_WRONLY, 0)
		if s.swap && errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		_, err = f.WriteString(s.value)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %q to %s: %w", s.value, s.file, err)
		}
	}
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// removeDisk unmounts the disk and detaches any loop device still bound to its image.
func removeDisk(ctx context.Context, img, dir string) error {
	if mounted(dir) {
		if err := unix.Unmount(dir, 0); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				return fmt.Errorf("unmount %s: %w", dir, err)
			}
		}
	}
	if _, err := os.Stat(img); err != nil {
		return nil
	}
	out, err := exec.CommandContext(ctx, "losetup", "-j", img).Output()
	if err != nil {
		return fmt.Errorf("losetup -j %s: %w", img, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		dev, _, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(dev, "/dev/loop") {
			continue
		}
		if out, err := exec.CommandContext(ctx, "losetup", "-d", dev).CombinedOutput(); err != nil {
			// The unmount above frees an autoclear device on its own, perhaps between the listing and
			// this: a device no longer bound to the image is what was wanted.
			if still, lerr := exec.CommandContext(ctx, "losetup", "-j", img).Output(); lerr == nil &&
				!strings.Contains(string(still), dev+":") {
				continue
			}
			return fmt.Errorf("losetup -d %s: %v: %s", dev, err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// mounted reports whether dir is a mount point in our mount namespace.
func mounted(dir string) bool {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMountPath(f[4]) == dir {
			return true
		}
	}
	return false
}

func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// waitExit waits until pid is gone, reaping it when it is our child (the provider is a child subreaper,
// so container inits become its children once runc exits).
func waitExit(ctx context.Context, pid int) error {
	for delay := 200 * time.Microsecond; ; delay = min(delay*2, 10*time.Millisecond) {
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		switch {
		case got == pid:
			return nil
		case err == unix.ECHILD:
			if !alive(pid) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for pid %d: %w", pid, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(raw, ')')
	return i >= 0 && i+2 < len(raw) && raw[i+2] != 'Z'
}

// machineMemoryMiB is the machine's memory (MemTotal), or 0 when it cannot be read.
func machineMemoryMiB() int64 {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kib >> 10
		}
	}
	return 0
}
