package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procKiB reads a "Name:   123 kB" field of a /proc file, 0 when absent.
func procKiB(path, field string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		return n
	}
	return 0
}

// clockTicks is the unit of the times in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTicks = 100

// cpuTime is the CPU pid has used, with that of the children it has waited for (a daemon's runtime
// processes), from /proc/<pid>/stat.
func cpuTime(pid int) (time.Duration, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The fields after the command's closing parenthesis start with the state (field 3); utime,
	// stime, cutime and cstime are fields 14 to 17.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, raw)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:15] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %v", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// idleCPU is the CPU pid uses over the next window.
func idleCPU(ctx context.Context, pid int, window time.Duration) (time.Duration, error) {
	before, err := cpuTime(pid)
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(window):
	}
	after, err := cpuTime(pid)
	return after - before, err
}

// rssKiB is the resident set of pid.
func rssKiB(pid int) int64 { return procKiB("/proc/"+strconv.Itoa(pid)+"/status", "VmRSS") }

// AgentMemory sums what the sandbox agents on this host hold.
type AgentMemory struct {
	Count  int   `json:"count"`
	RSSKiB int64 `json:"rssKiB"` // resident, shared pages counted in each
	PSSKiB int64 `json:"pssKiB"` // proportional: shared pages split between their users
	// Cgroups counts the oci sandboxes' memory cgroups, and CgroupKiB sums what the kernel charges them:
	// the agent's and its commands' pages and the kernel memory they allocated (cgroup v1 counts kernel
	// memory in memory.usage_in_bytes, v2 in memory.current). The shared binary's page cache is charged
	// to whichever cgroup read it first.
	Cgroups   int   `json:"cgroups"`
	CgroupKiB int64 `json:"cgroupKiB"`
}

// agentMemory finds every process whose argv[0] is the in-container agent path of the oci provider.
func agentMemory() AgentMemory {
	var m AgentMemory
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		argv0, _, _ := bytes.Cut(raw, []byte{0})
		if string(argv0) != "/.sandboxd/agent" {
			continue
		}
		m.Count++
		m.RSSKiB += rssKiB(pid)
		m.PSSKiB += procKiB("/proc/"+e.Name()+"/smaps_rollup", "Pss")
	}
	m.Cgroups, m.CgroupKiB = sandboxCgroups("/sys/fs/cgroup")
	return m
}

// sandboxCgroups counts the memory cgroups of oci sandboxes (named "sandboxd-…" at the top of the
// hierarchy) in the cgroup file system mounted at root, and sums the bytes charged to them.
func sandboxCgroups(root string) (n int, kib int64) {
	for _, pattern := range []string{
		"memory/sandboxd-*/memory.usage_in_bytes", // v1
		"sandboxd-*/memory.current",               // v2
	} {
		files, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			b, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
			if err != nil {
				continue
			}
			n++
			kib += b / 1024
		}
	}
	return n, kib
}

// diskKiB is the space allocated to the files under dir (not following mounts or symlinks).
func diskKiB(dir string) int64 {
	var total int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			total += allocated(info)
		}
		return nil
	})
	return total / 1024
}
