// Package providertest is the conformance suite every sandbox.Provider must pass.
//
// Run checks what the provider's manifest claims, and only that: a capability the manifest does not
// claim is not tested, and every capability it does claim must be implemented and behave as the
// contract says. Tests that need a command to prepare the sandbox (planting a symlink, say) run only
// when the provider also claims commandExecution, since the file API itself cannot make symlinks.
//
// The suite makes a handful of sandboxes, waits for readiness by polling Observe (providers may start
// asynchronously) and releases every sandbox it made. Subtests on separate sandboxes run in parallel.
package providertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
)

// ReadyTimeout bounds how long the suite waits for a sandbox to be observed in a wanted state.
var ReadyTimeout = 2 * time.Minute

// Run runs the conformance suite against the provider newProvider returns.
func Run(t *testing.T, newProvider func(t *testing.T) sandbox.Provider) {
	p := newProvider(t)
	m, err := p.Manifest(context.Background())
	if err != nil {
		t.Fatalf("manifest: %v", err)
	}
	t.Run("Manifest", func(t *testing.T) { testManifest(t, p, m) })
	t.Run("Lifecycle", func(t *testing.T) { t.Parallel(); testLifecycle(t, p, m) })
	if m.Capabilities.CommandExecution {
		t.Run("Exec", func(t *testing.T) { t.Parallel(); testExec(t, p) })
	}
	if m.Capabilities.FileAccess {
		t.Run("Files", func(t *testing.T) { t.Parallel(); testFiles(t, p, m) })
	}
	if m.Capabilities.PauseResume {
		t.Run("PauseResume", func(t *testing.T) { t.Parallel(); testPauseResume(t, p, m) })
	}
}

func testManifest(t *testing.T, p sandbox.Provider, m sandbox.Manifest) {
	if err := m.Validate(); err != nil {
		t.Fatalf("manifest %+v: %v", m, err)
	}
	again, err := p.Manifest(context.Background())
	if err != nil || again != m {
		t.Fatalf("manifest changed between calls: %+v then %+v, %v", m, again, err)
	}
	// A claimed capability must be backed by the interface that serves it.
	claims := []struct {
		cap  sandbox.Capability
		impl bool
	}{
		{sandbox.CapCommandExecution, implements[sandbox.Executor](p)},
		{sandbox.CapFileAccess, implements[sandbox.FileSystem](p)},
		{sandbox.CapPauseResume, implements[sandbox.PauseResumer](p)},
		{sandbox.CapFilesystemSnapshot, implements[sandbox.Snapshotter](p)},
		{sandbox.CapTemplateReference, implements[sandbox.Snapshotter](p)},
	}
	for _, c := range claims {
		if m.Capabilities.Has(c.cap) && !c.impl {
			t.Errorf("manifest claims %s but the provider does not implement it", c.cap)
		}
	}
}

func implements[I any](p sandbox.Provider) bool {
	_, ok := p.(I)
	return ok
}

// allocate makes a fresh generation, waits until it is ready, and releases it when the test ends.
func allocate(t *testing.T, p sandbox.Provider, ref sandbox.Ref) sandbox.Observation {
	t.Helper()
	obs, err := p.Allocate(context.Background(), ref, sandbox.Spec{ClientRequestID: "conformance-" + ref.Name()})
	if err != nil {
		t.Fatalf("allocate %s: %v", ref, err)
	}
	if err := obs.Validate(ref); err != nil {
		t.Fatalf("allocate %s: %v", ref, err)
	}
	t.Cleanup(func() {
		if err := p.Release(context.Background(), ref); err != nil {
			t.Errorf("release %s: %v", ref, err)
		}
	})
	return waitState(t, p, ref, sandbox.ObservedReady)
}

func newSandbox(t *testing.T, p sandbox.Provider) sandbox.Ref {
	t.Helper()
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	allocate(t, p, ref)
	return ref
}

// waitState polls Observe until ref is observed in want, failing on a failed observation or after
// ReadyTimeout.
func waitState(t *testing.T, p sandbox.Provider, ref sandbox.Ref, want sandbox.ObservedState) sandbox.Observation {
	t.Helper()
	deadline := time.Now().Add(ReadyTimeout)
	for {
		obs, err := p.Observe(context.Background(), ref)
		if err != nil {
			t.Fatalf("observe %s: %v", ref, err)
		}
		if err := obs.Validate(ref); err != nil {
			t.Fatalf("observe %s: %v", ref, err)
		}
		if obs.State == want {
			return obs
		}
		if obs.State == sandbox.ObservedFailed || time.Now().After(deadline) {
			t.Fatalf("observe %s: %s (%s %s), want %s", ref, obs.State, obs.Reason, obs.Message, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testLifecycle(t *testing.T, p sandbox.Provider, m sandbox.Manifest) {
	ctx := context.Background()
	id := sandbox.NewID()
	g1, g2 := sandbox.Ref{ID: id, Generation: 1}, sandbox.Ref{ID: id, Generation: 2}

	if obs, err := p.Observe(ctx, g1); err != nil || obs.State != sandbox.ObservedAbsent {
		t.Fatalf("observe before allocation: %+v, %v; want absent", obs, err)
	}
	allocate(t, p, g1)
	// Allocate again: the same resource, not a second one.
	again, err := p.Allocate(ctx, g1, sandbox.Spec{ClientRequestID: "conformance-" + g1.Name()})
	if err != nil {
		t.Fatalf("second allocate: %v", err)
	}
	if err := again.Validate(g1); err != nil || again.State == sandbox.ObservedAbsent {
		t.Fatalf("second allocate of %s: %+v, %v", g1, again, err)
	}
	waitState(t, p, g1, sandbox.ObservedReady)

	allocate(t, p, g2)
	refs, err := p.Resources(ctx)
	if err != nil {
		t.Fatalf("resources: %v", err)
	}
	if !slices.Contains(refs, g1) || !slices.Contains(refs, g2) {
		t.Fatalf("resources %v lack %s or %s", refs, g1, g2)
	}
	if i := slices.Index(refs, g1); slices.Contains(refs[i+1:], g1) {
		t.Fatalf("resources %v list %s twice: the second allocate made another resource", refs, g1)
	}
	fs, files := p.(sandbox.FileSystem)
	files = files && m.Capabilities.FileAccess
	if files {
		for _, ref := range []sandbox.Ref{g1, g2} {
			if err := fs.WriteFile(ctx, ref, "generation.txt", []byte(ref.Name())); err != nil {
				t.Fatalf("write in %s: %v", ref, err)
			}
		}
		for _, ref := range []sandbox.Ref{g1, g2} {
			if got, err := fs.ReadFile(ctx, ref, "generation.txt"); err != nil || string(got) != ref.Name() {
				t.Fatalf("generations share files: %s reads %q, %v", ref, got, err)
			}
		}
		// Allocating once more finds the resource that holds the file, not a new one.
		if _, err := p.Allocate(ctx, g1, sandbox.Spec{ClientRequestID: "conformance-" + g1.Name()}); err != nil {
			t.Fatalf("third allocate: %v", err)
		}
		waitState(t, p, g1, sandbox.ObservedReady)
		if got, err := fs.ReadFile(ctx, g1, "generation.txt"); err != nil || string(got) != g1.Name() {
			t.Fatalf("allocating %s again made another resource: it reads %q, %v", g1, got, err)
		}
	}

	// Release g1: it is gone, twice over, and g2 is untouched.
	for i := 0; i < 2; i++ {
		if err := p.Release(ctx, g1); err != nil {
			t.Fatalf("release %s (%d): %v", g1, i+1, err)
		}
	}
	waitState(t, p, g1, sandbox.ObservedAbsent)
	refs, err = p.Resources(ctx)
	if err != nil {
		t.Fatalf("resources: %v", err)
	}
	if slices.Contains(refs, g1) || !slices.Contains(refs, g2) {
		t.Fatalf("resources after releasing %s: %v", g1, refs)
	}
	waitState(t, p, g2, sandbox.ObservedReady)
	if files {
		if got, err := fs.ReadFile(ctx, g2, "generation.txt"); err != nil || string(got) != g2.Name() {
			t.Fatalf("%s lost its file when %s was released: %q, %v", g2, g1, got, err)
		}
	}
	// Releasing a generation never allocated is fine too.
	if err := p.Release(ctx, sandbox.Ref{ID: sandbox.NewID(), Generation: 1}); err != nil {
		t.Fatalf("release of an absent generation: %v", err)
	}
}

// exec runs cmd and checks the result is well formed.
func exec(t *testing.T, e sandbox.Executor, ref sandbox.Ref, cmd sandbox.Command) sandbox.CommandResult {
	t.Helper()
	res, err := e.Exec(context.Background(), ref, cmd)
	if err != nil {
		t.Fatalf("exec %q: %v", cmd.Argv, err)
	}
	if cmd.MaxOutputBytes == 0 {
		cmd.MaxOutputBytes = sandbox.DefaultMaxOutputBytes
	}
	if err := res.Validate(cmd); err != nil {
		t.Fatalf("exec %q: %v", cmd.Argv, err)
	}
	return res
}

func sh(script string) sandbox.Command { return sandbox.Command{Argv: []string{"sh", "-c", script}} }

func wantExit(t *testing.T, res sandbox.CommandResult, code int) {
	t.Helper()
	if res.ExitCode == nil || *res.ExitCode != code {
		t.Fatalf("exit code %v, want %d (stdout %q, stderr %q)", res.ExitCode, code, res.Stdout, res.Stderr)
	}
}

// waitDead runs a command in the sandbox that waits, for a bounded time, until the pid written in
// pidFile is gone or a zombie.
func waitDead(t *testing.T, e sandbox.Executor, ref sandbox.Ref, pidFile string) {
	t.Helper()
	script := fmt.Sprintf(`p=$(cat %s) || exit 2
i=0
while [ $i -lt 600 ]; do
  [ -e /proc/$p ] || exit 0
  case "$(cat /proc/$p/stat 2>/dev/null)" in *") Z "*|*") X "*|"") exit 0;; esac
  sleep 0.1; i=$((i+1))
done
exit 1`, pidFile)
	wantExit(t, exec(t, e, ref, sh(script)), 0)
}

func testExec(t *testing.T, p sandbox.Provider) {
	e := p.(sandbox.Executor)
	ref := newSandbox(t, p)
	t.Run("Output", func(t *testing.T) {
		t.Parallel()
		res := exec(t, e, ref, sh("echo out; echo err >&2"))
		wantExit(t, res, 0)
		if res.Stdout != "out\n" || res.Stderr != "err\n" || res.Truncated || res.TimedOut || res.Cancelled {
			t.Fatalf("result %+v", res)
		}
		res = exec(t, e, ref, sandbox.Command{Argv: []string{"echo", "$HOME", "a;b"}})
		if res.Stdout != "$HOME a;b\n" {
			t.Fatalf("argv went through a shell: %q", res.Stdout)
		}
	})
	t.Run("ExitCodes", func(t *testing.T) {
		t.Parallel()
		wantExit(t, exec(t, e, ref, sh("exit 7")), 7)
		wantExit(t, exec(t, e, ref, sh("kill -KILL $$")), 128+9)
		res := exec(t, e, ref, sandbox.Command{Argv: []string{"no-such-program-in-any-sandbox"}})
		wantExit(t, res, 127)
		if res.Stderr == "" {
			t.Fatal("a program that cannot start gives no reason on stderr")
		}
	})
	t.Run("EnvAndCwd", func(t *testing.T) {
		t.Parallel()
		res := exec(t, e, ref, sandbox.Command{
			Argv: []string{"sh", "-c", `echo "$SBX_A-$SBX_B"`},
			Env:  map[string]string{"SBX_A": "one", "SBX_B": "two words"},
		})
		if res.Stdout != "one-two words\n" {
			t.Fatalf("env: %q", res.Stdout)
		}
		wantExit(t, exec(t, e, ref, sh("mkdir -p cwd/sub && echo here > cwd/sub/marker")), 0)
		cmd := sh("cat marker; pwd")
		cmd.Cwd = "cwd/sub"
		res = exec(t, e, ref, cmd)
		wantExit(t, res, 0)
		if len(res.Stdout) < 5 || res.Stdout[:5] != "here\n" || !endsWith(res.Stdout, "/cwd/sub\n") {
			t.Fatalf("cwd: %q", res.Stdout)
		}
	})
	t.Run("TimeoutKillsGroup", func(t *testing.T) {
		t.Parallel()
		cmd := sh("sleep 600 & echo $! > timeout.pid; echo started; sleep 600")
		var res sandbox.CommandResult
		// On a slow machine the timeout may strike before the grandchild exists: try again with more time.
		for cmd.Timeout = time.Second; ; cmd.Timeout *= 2 {
			if res = exec(t, e, ref, cmd); res.Stdout != "" || cmd.Timeout > time.Minute {
				break
			}
		}
		if !res.TimedOut || res.ExitCode != nil || res.Stdout != "started\n" {
			t.Fatalf("result %+v, want timed out with the output so far", res)
		}
		waitDead(t, e, ref, "timeout.pid")
	})
	t.Run("Truncation", func(t *testing.T) {
		t.Parallel()
		cmd := sh("head -c 100000 /dev/zero | tr '\\0' a; echo small >&2")
		cmd.MaxOutputBytes = 1000
		res := exec(t, e, ref, cmd)
		wantExit(t, res, 0)
		if len(res.Stdout) != 1000 || res.Stderr != "small\n" || !res.Truncated {
			t.Fatalf("stdout %d bytes, stderr %q, truncated %v", len(res.Stdout), res.Stderr, res.Truncated)
		}
		cmd = sh("echo small; head -c 100000 /dev/zero | tr '\\0' b >&2")
		cmd.MaxOutputBytes = 1000
		res = exec(t, e, ref, cmd)
		if res.Stdout != "small\n" || len(res.Stderr) != 1000 || !res.Truncated {
			t.Fatalf("stdout %q, stderr %d bytes, truncated %v", res.Stdout, len(res.Stderr), res.Truncated)
		}
	})
	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan struct{})
		var res sandbox.CommandResult
		var err error
		go func() {
			defer close(done)
			res, err = e.Exec(ctx, ref, sh("echo $$ > cancel.pid; exec sleep 600"))
		}()
		// Cancel once the command is known to run.
		wantExit(t, exec(t, e, ref, sh("i=0; while [ ! -s cancel.pid ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; [ -s cancel.pid ]")), 0)
		cancel()
		<-done
		// A provider behind a transport may only be able to report the cancellation as an error.
		switch {
		case err != nil && !errors.Is(err, context.Canceled):
			t.Fatalf("cancelled exec: %v", err)
		case err == nil && (!res.Cancelled || res.ExitCode != nil):
			t.Fatalf("cancelled exec: %+v", res)
		}
		waitDead(t, e, ref, "cancel.pid")
	})
}

func endsWith(s, suffix string) bool {
	return len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix
}

func testPauseResume(t *testing.T, p sandbox.Provider, m sandbox.Manifest) {
	ctx := context.Background()
	pr := p.(sandbox.PauseResumer)
	ref := newSandbox(t, p)
	e, execs := p.(sandbox.Executor)
	execs = execs && m.Capabilities.CommandExecution

	var res sandbox.CommandResult
	var err error
	done := make(chan struct{})
	if execs {
		go func() {
			defer close(done)
			res, err = e.Exec(ctx, ref, sh("touch started; while [ ! -e go ]; do sleep 0.05; done; echo resumed"))
		}()
		wantExit(t, exec(t, e, ref, sh("i=0; while [ ! -e started ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; [ -e started ]")), 0)
	}
	if err := pr.Pause(ctx, ref); err != nil {
		t.Fatalf("pause: %v", err)
	}
	waitState(t, p, ref, sandbox.ObservedPaused)
	if execs {
		if _, err := e.Exec(ctx, ref, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrInvalidState) {
			t.Fatalf("exec while paused: %v, want invalid state", err)
		}
	}
	if err := pr.Resume(ctx, ref); err != nil {
		t.Fatalf("resume: %v", err)
	}
	waitState(t, p, ref, sandbox.ObservedReady)
	if execs {
		wantExit(t, exec(t, e, ref, sh("touch go")), 0)
		<-done
		if err != nil {
			t.Fatalf("command running across pause: %v", err)
		}
		wantExit(t, res, 0)
		if res.Stdout != "resumed\n" {
			t.Fatalf("command running across pause: %+v", res)
		}
	}
}
