package oci_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

func TestIsolation(t *testing.T) {
	p := newProvider(t)
	ref := ready(t, p, nil)
	host, _ := os.Hostname()

	t.Run("Hostname", func(t *testing.T) {
		res := sh(t, p, ref, "cat /proc/sys/kernel/hostname")
		if code(res) != 0 || strings.TrimSpace(res.Stdout) == host || res.Stdout == "" {
			t.Fatalf("hostname %q (host %q): %+v", res.Stdout, host, res)
		}
	})
	t.Run("PIDSpace", func(t *testing.T) {
		// PID 1 is the agent, and only the sandbox's few processes are visible.
		res := sh(t, p, ref, "cat /proc/1/cmdline | tr '\\0' ' '; echo; ls /proc | grep -c '^[0-9]'")
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if code(res) != 0 || len(lines) != 2 || !strings.Contains(lines[0], "agent") {
			t.Fatalf("%+v", res)
		}
		if n, err := strconv.Atoi(lines[1]); err != nil || n > 10 {
			t.Fatalf("%s processes visible", lines[1])
		}
	})
	t.Run("Environment", func(t *testing.T) {
		// The agent starts on one P; its commands do not inherit that. Its own environment is out of
		// their reach (the agent is not dumpable).
		res := sh(t, p, ref, "echo ${GOMAXPROCS-unset}; cat /proc/1/environ")
		if res.Stdout != "unset\n" || !strings.Contains(res.Stderr, "Permission denied") {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("HostFiles", func(t *testing.T) {
		canary := filepath.Join(t.TempDir(), "canary")
		if err := os.WriteFile(canary, []byte("host canary"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{canary, "/etc/shadow", "/etc/gshadow", "/root", "/home", "/etc/ssh"} {
			if res := sh(t, p, ref, "ls -d "+path); code(res) == 0 {
				t.Errorf("%s is visible in the sandbox: %+v", path, res)
			}
		}
		if res := sh(t, p, ref, "ls /etc/ssl/private | wc -l"); strings.TrimSpace(res.Stdout) != "0" {
			t.Errorf("/etc/ssl/private is not masked: %+v", res)
		}
		for _, path := range []string{"/usr/sandbox-test", "/etc/sandbox-test", "/sandbox-test"} {
			if res := sh(t, p, ref, "touch "+path); code(res) == 0 {
				t.Errorf("%s is writable", path)
			}
		}
		if _, err := p.ReadFile(ctxFor(t), ref, canary); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("canary through the file API: %v", err)
		}
		// The sandbox's own tools work on the read-only root.
		if res := sh(t, p, ref, "echo a b | awk '{print $2}' && python3 -c 'import ssl; print(1)'"); res.Stdout != "b\n1\n" {
			t.Errorf("tools: %+v", res)
		}
	})
	t.Run("Network", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan struct{}, 1)
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Close()
				accepted <- struct{}{}
			}
		}()
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		res := sh(t, p, ref, "timeout 3 bash -c 'echo x > /dev/tcp/127.0.0.1/"+port+"'")
		if code(res) == 0 {
			t.Fatalf("connected to the host's 127.0.0.1:%s: %+v", port, res)
		}
		select {
		case <-accepted:
			t.Fatal("the host listener accepted a connection from the sandbox")
		default:
		}
		list := "ls /sys/class/net"
		if onGVisor(t, p) {
			// gVisor's sysfs has no /sys/class/net: ask its network stack.
			list = `python3 -c 'import socket; print(*(n for _, n in socket.if_nameindex()))'`
		}
		if res := sh(t, p, ref, list); strings.TrimSpace(res.Stdout) != "lo" {
			t.Fatalf("interfaces: %+v", res)
		}
	})
}

// limited runs check on a sandbox with res made both ways: a container started with the limits, and a
// warm pool entry that took them. cg is the sandbox's cgroup directory in hierarchy, without the
// hierarchy's root.
func limited(t *testing.T, res sandbox.Resources, check func(t *testing.T, p *oci.Provider, ref sandbox.Ref, cg func(hierarchy string) string)) {
	for _, pooled := range []bool{false, true} {
		name := "own container"
		if pooled {
			name = "warm pool entry"
		}
		t.Run(name, func(t *testing.T) {
			var p *oci.Provider
			if pooled {
				p = newPooledProviderAt(t, testenv.StateDir(t), 1)
				waitIdle(t, p, 1)
			} else {
				p = newProvider(t)
			}
			ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
			obs, err := p.Allocate(ctxFor(t), ref, sandbox.Spec{ClientRequestID: "t", Resources: &res})
			if err != nil || obs.State != sandbox.ObservedReady {
				t.Fatalf("allocate: %+v %v", obs, err)
			}
			container := oci.Container(p, ref)
			if took := strings.HasPrefix(container, "pool-"); took != pooled {
				t.Fatalf("allocate with %+v: container %q, pooled %v", res, container, pooled)
			}
			check(t, p, ref, func(hierarchy string) string {
				dirs, err := filepath.Glob("/sys/fs/cgroup/" + hierarchy + "/sandboxd-*-" + container)
				if err != nil || len(dirs) != 1 {
					t.Fatalf("%s cgroup of %s: %v %v", hierarchy, container, dirs, err)
				}
				return dirs[0]
			})
		})
	}
}

// cgroupValue reads one value of a cgroup file.
func cgroupValue(t *testing.T, file string) string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(raw))
}

func TestMemoryLimit(t *testing.T) {
	limited(t, sandbox.Resources{MemoryMiB: 64}, func(t *testing.T, p *oci.Provider, ref sandbox.Ref, cg func(string) string) {
		for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} {
			if got := cgroupValue(t, filepath.Join(cg("memory"), f)); got != strconv.Itoa(64<<20) {
				t.Fatalf("%s: %s", f, got)
			}
		}
		// The shell holds 256 MiB in one variable: the cgroup's OOM killer ends it.
		const big = "x=$(head -c 268435456 /dev/zero | tr '\\0' a); echo survived ${#x}"
		if onGVisor(t, p) {
			endsGVisor(t, p, ref, big)
			return
		}
		res := sh(t, p, ref, big)
		if code(res) != 137 {
			t.Fatalf("want an OOM kill (137): %+v", res)
		}
		if res := sh(t, p, ref, "echo still here"); code(res) != 0 || res.Stdout != "still here\n" {
			t.Fatalf("sandbox unusable after an OOM kill: %+v", res)
		}
	})
}

func TestPidsLimit(t *testing.T) {
	p := newProvider(t)
	ref := ready(t, p, nil)
	res, err := p.Exec(ctxFor(t), ref, sandbox.Command{
		Argv:    []string{"sh", "-c", "b() { b | b & }; b; sleep 30"},
		Timeout: 3 * time.Second,
	})
	if err != nil {
		t.Fatalf("fork bomb: %v", err)
	}
	// The leader either times out or fails to fork its own sleep: both end the bomb.
	if !res.TimedOut && code(res) == 0 {
		t.Fatalf("fork bomb: %+v", res.ExitCode)
	}
	if res := sh(t, p, ref, "echo alive; ls /proc | grep -c '^[0-9]'"); code(res) != 0 || !strings.HasPrefix(res.Stdout, "alive\n") {
		t.Fatalf("sandbox unusable after a fork bomb: %+v", res)
	}
	max, err := filepath.Glob("/sys/fs/cgroup/pids/sandboxd-*-" + ref.Name() + "/pids.max")
	if err != nil || len(max) != 1 {
		t.Fatalf("pids cgroup: %v %v", max, err)
	}
	if raw, _ := os.ReadFile(max[0]); strings.TrimSpace(string(raw)) != strconv.FormatInt(hostPids(t, p, 512), 10) {
		t.Fatalf("pids.max %q", raw)
	}
	if onGVisor(t, p) {
		// gVisor's kernel counts the sandbox's tasks itself (oci.GVisorHostPids).
		if res := sh(t, p, ref, "bash -c 'ulimit -u -H'"); res.Stdout != "512\n" {
			t.Fatalf("the sandbox's kernel's task limit: %+v", res)
		}
	}
}

// hostPids is the host pids limit of a sandbox of p whose processes and threads are limited to tasks.
func hostPids(t testing.TB, p *oci.Provider, tasks int64) int64 {
	if onGVisor(t, p) {
		return oci.GVisorHostPids(tasks)
	}
	return tasks
}

// endsGVisor runs script, which takes more memory than the gVisor sandbox ref may have: the host's OOM
// killer ends the sandbox's kernel, the process the sandbox's memory is charged to, and with it the
// sandbox (gVisor keeps no memory limit of its own that would end the command alone). Nothing of the
// command outlives it, and the sandbox is observed failed.
func endsGVisor(t *testing.T, p *oci.Provider, ref sandbox.Ref, script string) {
	t.Helper()
	res, err := p.Exec(ctxFor(t), ref, sandbox.Command{Argv: []string{"sh", "-c", script}, Timeout: time.Minute})
	if err == nil && code(res) == 0 {
		t.Fatalf("a command past the memory limit succeeded: %+v", res)
	}
	waitFor(t, func() bool {
		obs, err := p.Observe(ctxFor(t), ref)
		return err == nil && obs.State == sandbox.ObservedFailed
	})
}

func TestCPUQuota(t *testing.T) {
	limited(t, sandbox.Resources{CPUMillis: 200}, func(t *testing.T, p *oci.Provider, ref sandbox.Ref, cg func(string) string) {
		if q, per := cgroupValue(t, filepath.Join(cg("cpu"), "cpu.cfs_quota_us")), cgroupValue(t, filepath.Join(cg("cpu"), "cpu.cfs_period_us")); q != "20000" || per != "100000" {
			t.Fatalf("quota %s per period %s", q, per)
		}
		usage := filepath.Join(cg("cpuacct"), "cpuacct.usage")
		read := func() time.Duration {
			n, err := strconv.ParseInt(cgroupValue(t, usage), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return time.Duration(n)
		}
		before, start := read(), time.Now()
		res := sh(t, p, ref, "timeout 2 sh -c 'while :; do :; done'; echo done")
		wall, cpu := time.Since(start), read()-before
		if res.Stdout != "done\n" {
			t.Fatalf("%+v", res)
		}
		// 200 millicores: a fifth of a CPU, with room for the agent and the period's granularity.
		if bound := wall/5 + 300*time.Millisecond; cpu > bound {
			t.Fatalf("busy loop used %v of CPU in %v of wall time, bound %v", cpu, wall, bound)
		}
	})
}

func TestDiskLimit(t *testing.T) {
	p := newProvider(t)
	ref := ready(t, p, &sandbox.Resources{DiskMiB: 16})
	res := sh(t, p, ref, "dd if=/dev/zero of=big bs=1M count=64 2>&1; echo rc=$?")
	if !strings.Contains(res.Stdout, "No space left on device") || strings.Contains(res.Stdout, "rc=0") {
		t.Fatalf("want ENOSPC: %+v", res)
	}
	if err := p.WriteFile(ctxFor(t), ref, "more", make([]byte, 4<<20)); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("a write past a full disk: %v", err)
	}
	if err := p.WriteFile(ctxFor(t), ref, "/usr/x", []byte("x")); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("a write to the read-only /usr: %v", err)
	}
	if res := sh(t, p, ref, "rm big && echo small > f && cat f"); res.Stdout != "small\n" {
		t.Fatalf("after freeing the disk: %+v", res)
	}
}
