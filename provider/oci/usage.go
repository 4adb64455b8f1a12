package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

// Usage reads what a sandbox uses (sandbox.UsageReader) from its cgroups, by the hierarchy's own
// counters (cgroup v1 here, v2 where the machine has one unified hierarchy), and from its disk's file
// system when it has one. What is read is the host's account of the sandbox: nothing inside it is
// asked or believed.
func (p *Provider) Usage(ctx context.Context, ref sandbox.Ref) (sandbox.Usage, error) {
	b := p.box(ref)
	m, err := readMetaFile(b.l)
	if errors.Is(err, os.ErrNotExist) {
		return sandbox.Usage{}, fmt.Errorf("sandbox %s: %w", ref, sandbox.ErrNotFound)
	}
	if err != nil {
		return sandbox.Usage{}, fmt.Errorf("sandbox %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	path := m.CgroupPath
	if path == "" {
		path = p.cgroupPath(b.container())
	}
	var u sandbox.Usage
	if fileExists(filepath.Join(cgroupRoot, "cgroup.controllers")) {
		dir := filepath.Join(cgroupRoot, path)
		if st, ok := readKeyed(filepath.Join(dir, "cpu.stat"))["usage_usec"]; ok {
			u.CPUSeconds = pointerTo(float64(st) / 1e6)
		}
		u.MemoryBytes = readInt(filepath.Join(dir, "memory.current"))
		u.MemoryPeakBytes = readInt(filepath.Join(dir, "memory.peak"))
		u.MemoryLimitBytes = readInt(filepath.Join(dir, "memory.max"))
		u.Pids = readInt(filepath.Join(dir, "pids.current"))
		u.PidsLimit = readInt(filepath.Join(dir, "pids.max"))
	} else {
		if ns := readInt(filepath.Join(cgroupRoot, "cpuacct", path, "cpuacct.usage")); ns != nil {
			u.CPUSeconds = pointerTo(float64(*ns) / 1e9)
		}
		mem := filepath.Join(cgroupRoot, "memory", path)
		u.MemoryBytes = readInt(filepath.Join(mem, "memory.usage_in_bytes"))
		u.MemoryPeakBytes = readInt(filepath.Join(mem, "memory.max_usage_in_bytes"))
		if m.Resources.MemoryMiB > 0 {
			u.MemoryLimitBytes = readInt(filepath.Join(mem, "memory.limit_in_bytes"))
		}
		u.Pids = readInt(filepath.Join(cgroupRoot, "pids", path, "pids.current"))
		u.PidsLimit = readInt(filepath.Join(cgroupRoot, "pids", path, "pids.max"))
	}
	if u.CPUSeconds == nil && u.MemoryBytes == nil && u.Pids == nil {
		if isSuspended(b.l) {
			return u, nil // stopped at a checkpoint: nothing runs, nothing is used
		}
		if _, err := os.Stat(b.l.dir); errors.Is(err, os.ErrNotExist) {
			return sandbox.Usage{}, fmt.Errorf("sandbox %s: %w", ref, sandbox.ErrNotFound)
		}
		return sandbox.Usage{}, fmt.Errorf("sandbox %s: its cgroups %s cannot be read: %w", ref, path, sandbox.ErrProviderUnavailable)
	}
	if m.Disk && p.runc.class != classGVisor {
		u.DiskBytes, u.DiskLimitBytes = p.diskUsage(ctx, b)
	}
	u.NetworkRxBytes, u.NetworkTxBytes = p.networkUsage(b.l)
	return u, nil
}

// networkUsage reads the counters of the host's end of the sandbox's link, when it has one: what the
// host end receives the sandbox sent, and the other way round. nil, nil without a network.
func (p *Provider) networkUsage(l layout) (rx, tx *int64) {
	if p.net == nil {
		return nil, nil
	}
	st, err := readNetState(l)
	// The name is the provider's own (net.json is the daemon's); checked all the same before it
	// becomes a path.
	if err != nil || !strings.HasPrefix(st.Iface, p.net.ifPrefix) || strings.ContainsAny(st.Iface, "/.") {
		return nil, nil
	}
	dir := filepath.Join("/sys/class/net", st.Iface, "statistics")
	sent, got := readInt(filepath.Join(dir, "rx_bytes")), readInt(filepath.Join(dir, "tx_bytes"))
	if sent == nil || got == nil {
		return nil, nil
	}
	return got, sent
}

// diskUsage reads the file system of the sandbox's disk, mounted at its /workspace in the container's
// mount namespace only (the host's mount is detached once the container runs). The path is resolved
// inside the container's root (RESOLVE_IN_ROOT, no magic links): whatever the sandbox made of
// /workspace, nothing outside its root is looked at. nil, nil when it cannot be read.
func (p *Provider) diskUsage(ctx context.Context, b *box) (used, size *int64) {
	st, err := p.runc.state(ctx, b.container())
	if err != nil || st.Pid <= 0 {
		return nil, nil
	}
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", st.Pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, strings.TrimPrefix(guestWorkdir, "/"), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, nil
	}
	defer unix.Close(fd)
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return nil, nil
	}
	bs := int64(fs.Bsize)
	return pointerTo((int64(fs.Blocks) - int64(fs.Bfree)) * bs), pointerTo(int64(fs.Blocks) * bs)
}

func pointerTo[T any](v T) *T { return &v }

// readInt reads a cgroup file holding one number; nil when it cannot be read or says "max".
func readInt(path string) *int64 {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil || n < 0 {
		return nil
	}
	return &n
}

// readKeyed reads a cgroup file of "key value" lines.
func readKeyed(path string) map[string]int64 {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}
