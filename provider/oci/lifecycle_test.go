package oci_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

func TestPauseFreezesAndResumeContinues(t *testing.T) {
	dir := testenv.StateDir(t)
	p := newProviderAt(t, dir)
	ref := ready(t, p, nil)
	// The counter file, seen from the host: on runc through the agent's view of the sandbox (its disk
	// is mounted in the container alone); on gVisor, whose init is its kernel, on the disk the file
	// server keeps mounted on the host.
	counter := filepath.Join(dir, "sandboxes", ref.Name(), "disk", "upper", "counter")
	if !onGVisor(t, p) {
		pid, err := oci.InitPid(p, ref)
		if err != nil {
			t.Fatal(err)
		}
		counter = fmt.Sprintf("/proc/%d/root/workspace/counter", pid)
	}
	read := func() int {
		raw, _ := os.ReadFile(counter)
		n, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
		return n
	}
	type result struct {
		res sandbox.CommandResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := p.Exec(context.Background(), ref, sandbox.Command{
			Argv:    []string{"sh", "-c", "i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo $i > counter.tmp; mv counter.tmp counter; sleep 0.05; done; echo finished"},
			Timeout: time.Minute,
		})
		done <- result{res, err}
	}()
	waitFor(t, func() bool { return read() >= 3 })
	if err := p.Pause(ctxFor(t), ref); err != nil {
		t.Fatal(err)
	}
	frozen := read()
	if obs, err := p.Observe(ctxFor(t), ref); err != nil || obs.State != sandbox.ObservedPaused {
		t.Fatalf("observe while paused: %+v %v", obs, err)
	}
	if _, err := p.Exec(ctxFor(t), ref, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("exec while paused: %v", err)
	}
	if _, err := p.ReadFile(ctxFor(t), ref, "counter"); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("read while paused: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // a running counter would move 6 steps
	if got := read(); got != frozen {
		t.Fatalf("counter moved while paused: %d then %d", frozen, got)
	}
	if err := p.Pause(ctxFor(t), ref); err != nil {
		t.Fatalf("pause of a paused sandbox: %v", err)
	}
	if err := p.Resume(ctxFor(t), ref); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return read() > frozen })
	r := <-done
	if r.err != nil || code(r.res) != 0 || r.res.Stdout != "finished\n" {
		t.Fatalf("the command across the pause: %+v %v", r.res, r.err)
	}
	if obs, err := p.Observe(ctxFor(t), ref); err != nil || obs.State != sandbox.ObservedReady {
		t.Fatalf("observe after resume: %+v %v", obs, err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 3000 {
			t.Fatal("condition never held")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAllocateIsIdempotent(t *testing.T) {
	p := newProvider(t)
	ref := ready(t, p, nil)
	if err := p.WriteFile(ctxFor(t), ref, "keep", []byte("1")); err != nil {
		t.Fatal(err)
	}
	obs, err := p.Allocate(ctxFor(t), ref, sandbox.Spec{ClientRequestID: "t"})
	if err != nil || obs.State != sandbox.ObservedReady {
		t.Fatalf("second allocate: %+v %v", obs, err)
	}
	if got, err := p.ReadFile(ctxFor(t), ref, "keep"); err != nil || string(got) != "1" {
		t.Fatalf("the second allocate made a new sandbox: %q %v", got, err)
	}
	if _, err := p.Allocate(ctxFor(t), sandbox.Ref{ID: sandbox.NewID(), Generation: 1},
		sandbox.Spec{Resources: &sandbox.Resources{MemoryMiB: -1}}); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("negative memory: %v", err)
	}
}

func TestRestartAdopts(t *testing.T) {
	dir := testenv.StateDir(t)
	p1 := newProviderAt(t, dir)
	kept := ready(t, p1, nil)
	orphan := ready(t, p1, &sandbox.Resources{DiskMiB: 8})
	paused := ready(t, p1, nil)
	if err := p1.WriteFile(ctxFor(t), kept, "note", []byte("from the first provider")); err != nil {
		t.Fatal(err)
	}
	if err := p1.Pause(ctxFor(t), paused); err != nil {
		t.Fatal(err)
	}

	p2 := newProviderAt(t, dir)
	refs, err := p2.Resources(ctxFor(t))
	if err != nil || len(refs) != 3 {
		t.Fatalf("resources after restart: %v %v", refs, err)
	}
	for ref, want := range map[sandbox.Ref]sandbox.ObservedState{kept: sandbox.ObservedReady, paused: sandbox.ObservedPaused,
		{ID: sandbox.NewID(), Generation: 1}: sandbox.ObservedAbsent} {
		if obs, err := p2.Observe(ctxFor(t), ref); err != nil || obs.State != want {
			t.Fatalf("observe %s: %+v %v, want %s", ref, obs, err, want)
		}
	}
	if got, err := p2.ReadFile(ctxFor(t), kept, "note"); err != nil || string(got) != "from the first provider" {
		t.Fatalf("adopted file: %q %v", got, err)
	}
	if res := sh(t, p2, kept, "cat note"); res.Stdout != "from the first provider" {
		t.Fatalf("adopted exec: %+v", res)
	}
	if _, err := p2.Exec(ctxFor(t), paused, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("exec in an adopted paused sandbox: %v", err)
	}
	if err := p2.Resume(ctxFor(t), paused); err != nil {
		t.Fatal(err)
	}
	if res := sh(t, p2, paused, "echo back"); res.Stdout != "back\n" {
		t.Fatalf("after resume: %+v", res)
	}
	for _, ref := range []sandbox.Ref{orphan, paused, kept} {
		if err := p2.Release(ctxFor(t), ref); err != nil {
			t.Fatalf("release %s: %v", ref, err)
		}
		if obs, err := p2.Observe(ctxFor(t), ref); err != nil || obs.State != sandbox.ObservedAbsent {
			t.Fatalf("observe %s after release: %+v %v", ref, obs, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "sandboxes")); len(ents) != 0 {
		t.Fatalf("left in the state directory: %v", ents)
	}
}

// TestRestartRemovesUnclaimedContainers removes, behind the provider's back, the directories of two
// running sandboxes (one in a container of its own, one in a taken warm pool entry) and of an idle pool
// entry. A provider started next on the state directory stops and deletes those three containers and
// their cgroups, adopts the sandbox that kept its directory, and can allocate the first sandbox again
// under its name.
func TestRestartRemovesUnclaimedContainers(t *testing.T) {
	dir := testenv.StateDir(t)
	// Processes measure would count that were there before this test began (a zombie an earlier test
	// left unreaped) are not this test's.
	earlier := map[string]bool{}
	for _, p := range countedProcesses(t, dir) {
		earlier[strings.Fields(p)[1]] = true
	}
	cfg := testConfig(t, dir)
	cfg.WarmPool = 1
	p1, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t, p1, 1)
	kept := ready(t, p1, nil) // takes the pool's entry
	waitIdle(t, p1, 1)
	lostPooled := ready(t, p1, nil)
	waitIdle(t, p1, 1)
	oci.Abandon(p1) // the entry now idle stays, and what comes next starts its own container
	lost := ready(t, p1, nil)
	ents, err := os.ReadDir(filepath.Join(dir, "pool"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("pool directory: %v %v", ents, err)
	}
	for _, d := range []string{filepath.Join("sandboxes", lost.Name()), filepath.Join("sandboxes", lostPooled.Name()),
		filepath.Join("pool", ents[0].Name())} {
		// A disk still mounted on the host (gVisor's) goes with its directory; its loop device frees
		// itself once the container's mount is gone too.
		if err := unix.Unmount(filepath.Join(dir, d, "disk"), unix.MNT_DETACH); err != nil && err != unix.EINVAL {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	if f := measure(t, dir); f.containers != 4 {
		t.Fatalf("%d containers before the restart, want 4", f.containers)
	}

	p2 := newProviderAt(t, dir)
	if f := measure(t, dir); f.containers != 1 || f.dirs != 1 {
		t.Fatalf("after the restart: %+v, want the kept sandbox's container and directory alone", f)
	}
	if res := sh(t, p2, kept, "echo kept"); res.Stdout != "kept\n" {
		t.Fatalf("the kept sandbox: %+v", res)
	}
	// The name of the lost sandbox's container is free again.
	if obs, err := p2.Allocate(ctxFor(t), lost, sandbox.Spec{ClientRequestID: "t"}); err != nil || obs.State != sandbox.ObservedReady {
		t.Fatalf("allocate %s again: %+v %v", lost, obs, err)
	}
	for _, ref := range []sandbox.Ref{kept, lost} {
		if err := p2.Release(ctxFor(t), ref); err != nil {
			t.Fatal(err)
		}
	}
	// What is counted includes every child of this test binary and every process running the agent
	// binary, so another test's work that ends later (a provider closing, a runc call of its own) is
	// counted too: give it a bounded while, and name what stays.
	var f footprint
	var left []string
	for i := 0; i < 100; i++ {
		f, left = measure(t, dir), nil
		for _, p := range countedProcesses(t, dir) {
			if !earlier[strings.Fields(p)[1]] {
				left = append(left, p)
			}
		}
		if f.processes = len(left); f == (footprint{}) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("left after releasing everything: %+v; processes counted:\n%s", f, strings.Join(left, "\n"))
}

func TestReleaseAfterAgentDeath(t *testing.T) {
	p := newProvider(t)
	ref := ready(t, p, nil)
	// PID 1 ignores signals it does not handle, but SIGTERM it handles: the agent exits.
	// The exec itself dies with the agent: its error is expected and not the point.
	_, _ = p.Exec(ctxFor(t), ref, sandbox.Command{Argv: []string{"kill", "-TERM", "1"}})
	waitFor(t, func() bool {
		obs, err := p.Observe(ctxFor(t), ref)
		return err == nil && obs.State == sandbox.ObservedFailed && obs.Reason != ""
	})
	if _, err := p.Exec(ctxFor(t), ref, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrProviderUnavailable) {
		t.Fatalf("exec with a dead agent: %v", err)
	}
	if err := p.Release(ctxFor(t), ref); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctxFor(t), ref); err != nil {
		t.Fatalf("second release: %v", err)
	}
}

// countingRuntime writes a wrapper of the tests' runtime into dir that logs each invocation's
// arguments, a line each, and returns its path and a reader of that log.
func countingRuntime(t *testing.T, dir string) (path string, calls func() []string) {
	t.Helper()
	runc, err := exec.LookPath(testRuntime)
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "runtime-calls")
	path = filepath.Join(dir, "runc-counting")
	script := "#!/bin/sh\necho \"$*\" >> '" + log + "'\nexec '" + runc + "' \"$@\"\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, func() []string {
		raw, _ := os.ReadFile(log)
		return strings.Split(strings.TrimSpace(string(raw)), "\n")
	}
}

// TestObserveAsksTheAgentFirst: observing a running sandbox starts no runtime process, since its agent
// answers; a paused sandbox and one whose agent died are still told apart by the runtime.
func TestObserveAsksTheAgentFirst(t *testing.T) {
	dir := testenv.StateDir(t)
	counting, calls := countingRuntime(t, dir)
	cfg := testConfig(t, filepath.Join(dir, "state"))
	cfg.Runtime = counting
	p := newProviderWith(t, cfg)
	runs := func() int { return len(calls()) }
	ref := ready(t, p, nil)
	observe := func() sandbox.ObservedState {
		t.Helper()
		obs, err := p.Observe(ctxFor(t), ref)
		if err != nil {
			t.Fatal(err)
		}
		return obs.State
	}
	before := runs()
	for i := 0; i < 20; i++ {
		if got := observe(); got != sandbox.ObservedReady {
			t.Fatalf("observation %d: %s", i, got)
		}
	}
	if n := runs() - before; n != 0 {
		t.Fatalf("20 observations of a running sandbox ran the runtime %d times", n)
	}
	if err := p.Pause(ctxFor(t), ref); err != nil {
		t.Fatal(err)
	}
	if got := observe(); got != sandbox.ObservedPaused {
		t.Fatalf("paused sandbox observed %s", got)
	}
	if err := p.Resume(ctxFor(t), ref); err != nil {
		t.Fatal(err)
	}
	if got := observe(); got != sandbox.ObservedReady {
		t.Fatalf("resumed sandbox observed %s", got)
	}
	// The agent exits (PID 1 handles SIGTERM); the exec dies with it.
	_, _ = p.Exec(ctxFor(t), ref, sandbox.Command{Argv: []string{"kill", "-TERM", "1"}})
	waitFor(t, func() bool { return observe() == sandbox.ObservedFailed })
}

// TestRestartListsOnce: a restarted provider learns the state of every container from one `runc list`,
// so observing its running sandboxes starts no runtime process; a paused one is still observed paused
// and refuses commands.
func TestRestartListsOnce(t *testing.T) {
	dir := testenv.StateDir(t)
	p1 := newProviderAt(t, dir)
	running, paused := ready(t, p1, nil), ready(t, p1, nil)
	if err := p1.Pause(ctxFor(t), paused); err != nil {
		t.Fatal(err)
	}
	counting, calls := countingRuntime(t, testenv.StateDir(t))
	cfg := testConfig(t, dir)
	cfg.Runtime = counting
	p2, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[sandbox.Ref]sandbox.ObservedState{running: sandbox.ObservedReady, paused: sandbox.ObservedPaused} {
		if obs, err := p2.Observe(ctxFor(t), ref); err != nil || obs.State != want {
			t.Fatalf("observe %s: %+v %v, want %s", ref, obs, err, want)
		}
	}
	if _, err := p2.Exec(ctxFor(t), paused, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("exec in an adopted paused sandbox: %v", err)
	}
	if res := sh(t, p2, running, "echo adopted"); res.Stdout != "adopted\n" {
		t.Fatalf("exec in an adopted running sandbox: %+v", res)
	}
	// What New asks of the binary itself first (its version; gVisor's system calls) is not about containers.
	got := slices.DeleteFunc(calls(), func(c string) bool { return c == "--version" || c == "help syscalls" })
	if len(got) == 0 || !strings.Contains(got[0], " list ") {
		t.Fatalf("the restarted provider's first runtime call: %q, want a list", got)
	}
	for _, c := range got[1:] {
		if strings.Contains(c, running.Name()) || strings.Contains(c, " list ") {
			t.Fatalf("runtime calls after the list: %q (the running sandbox needs none, the list is made once)", got)
		}
	}
}

// footprint counts what a sandbox can leave on the host.
type footprint struct {
	containers, mounts, cgroups, loops, processes, dirs int
}

func measure(t *testing.T, dir string) footprint {
	t.Helper()
	return measureWith(t, testRuntime, dir)
}

// measureWith is measure of a provider on runtime.
func measureWith(t *testing.T, runtime, dir string) footprint {
	t.Helper()
	var f footprint
	out, err := exec.Command(runtime, "--root", filepath.Join(dir, "runc"), "list", "--quiet").Output()
	if err != nil {
		t.Fatal(err)
	}
	f.containers = len(strings.Fields(string(out)))
	// Only what lives under this provider's state directory: the rest of the machine (another test, a
	// kubelet) may mount and unmount meanwhile.
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		// runsc pins one empty network namespace for all its gofers in its root, and the provider
		// mounts the sandboxes' shared root, each until the provider closes: not a sandbox's.
		if strings.Contains(line, dir) && !strings.Contains(line, filepath.Join(dir, "runc", "null-netns")) &&
			!strings.Contains(line, " "+filepath.Join(dir, "root")+" ") {
			f.mounts++
		}
	}
	// Only this provider's cgroups and agents: another package's tests may run containers meanwhile.
	prefix := oci.CgroupPrefix(dir)
	hier, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hier {
		m, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", h.Name(), prefix+"*"))
		f.cgroups += len(m)
	}
	out, _ = exec.Command("losetup", "-a").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, dir) {
			f.loops++
		}
	}
	f.processes = len(countedProcesses(t, dir))
	ents, _ := os.ReadDir(filepath.Join(dir, "sandboxes"))
	f.dirs = len(ents)
	return f
}

// countedProcesses describes, a line each, the processes measure counts as a provider's on dir: the
// test binary's children (zombies too), anything running the agent binary or naming dir, and every
// process in one of the provider's cgroups.
func countedProcesses(t *testing.T, dir string) []string {
	t.Helper()
	prefix := oci.CgroupPrefix(dir)
	procs, _ := os.ReadDir("/proc")
	me := strconv.Itoa(os.Getpid())
	var found []string
	for _, e := range procs {
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		fields := strings.Fields(string(stat[i+1:]))
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		cg, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if (len(fields) > 1 && fields[1] == me) || bytes.Contains(cmd, []byte(testenv.BuildAgent(t))) || bytes.Contains(cmd, []byte(dir)) ||
			bytes.Contains(cg, []byte("/"+prefix)) {
			comm := string(stat[bytes.IndexByte(stat, '(')+1 : i])
			found = append(found, fmt.Sprintf("pid %s (%s) state %s ppid %s: %s", e.Name(), comm, fields[0], fields[1],
				strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")))
		}
	}
	return found
}

func TestNoLeaks(t *testing.T) {
	dir := testenv.StateDir(t)
	p := newProviderAt(t, dir)
	before := measure(t, dir)
	for i := 0; i < 100; i++ {
		var res *sandbox.Resources
		if i%10 == 0 {
			res = &sandbox.Resources{DiskMiB: 8, MemoryMiB: 64, CPUMillis: 500}
		}
		ref := ready(t, p, res)
		if r := sh(t, p, ref, "echo $0 > f; sleep 100 & cat f"); r.Stdout != "sh\n" {
			t.Fatalf("cycle %d: %+v", i, r)
		}
		endCycle(t, p, ref, i, i%7 == 0)
	}
	if after := measure(t, dir); after != before {
		t.Fatalf("100 cycles left something behind: before %+v, after %+v", before, after)
	}
}

// endCycle ends cycle i of a leak test: ref is released, paused first when pause says so.
func endCycle(t *testing.T, p *oci.Provider, ref sandbox.Ref, i int, pause bool) {
	t.Helper()
	if pause {
		if err := p.Pause(ctxFor(t), ref); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Release(ctxFor(t), ref); err != nil {
		t.Fatalf("cycle %d: %v", i, err)
	}
}
