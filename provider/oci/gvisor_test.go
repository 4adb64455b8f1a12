package oci_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/gvisortest"
	"github.com/sandboxd/sandbox/provider/oci"
	"github.com/sandboxd/sandbox/provider/providertest"
)

// gvisorRuntime is the runsc the gVisor tests run on: the tests' runtime when it is one, else
// $SANDBOXD_RUNSC, else runsc from PATH. Without one the tests skip, unless CI is set; so they do when
// the runsc found is too old to run the agent (no openat2: Debian 12's), which New refuses with an
// error TestGVisorRefusesOldKernel checks.
func gvisorRuntime(t *testing.T) string {
	t.Helper()
	return gvisortest.Runtime(t, testRuntime, os.Getenv("SANDBOXD_RUNSC"), "runsc")
}

// TestGVisor runs sandboxes on gVisor whenever runsc is installed, whatever the tests' runtime:
// the provider's contract, and what the gvisor class promises of its own.
func TestGVisor(t *testing.T) {
	runsc := gvisorRuntime(t)
	config := func(t *testing.T) oci.Config {
		cfg := testConfig(t, testenv.StateDir(t))
		cfg.Runtime = runsc
		return cfg
	}

	t.Run("Conformance", func(t *testing.T) {
		providertest.Run(t, func(t *testing.T) sandbox.Provider { return newProviderWith(t, config(t)) })
	})

	t.Run("Sandbox", func(t *testing.T) {
		cfg := config(t)
		p := newProviderWith(t, cfg)
		m, err := p.Manifest(ctxFor(t))
		if err != nil || m.RuntimeClass != "gvisor" {
			t.Fatalf("manifest %+v %v", m, err)
		}
		ref := ready(t, p, nil)
		if res := sh(t, p, ref, "echo hi; id -u; pwd"); res.Stdout != "hi\n0\n/workspace\n" {
			t.Fatalf("%+v", res)
		}
		// Its kernel is gVisor's, not the host's.
		var host unix.Utsname
		if err := unix.Uname(&host); err != nil {
			t.Fatal(err)
		}
		if res := sh(t, p, ref, "uname -r"); code(res) != 0 || res.Stdout == unix.ByteSliceToString(host.Release[:])+"\n" {
			t.Fatalf("the sandbox runs on the host's kernel: %+v", res)
		}
		// /tmp holds TmpMiB (64), as a tmpfs of runc's does.
		if res := sh(t, p, ref, "head -c 83886080 /dev/zero > /tmp/big 2>&1; echo rc=$?"); strings.Contains(res.Stdout, "rc=0") {
			t.Fatalf("80 MiB in a 64 MiB /tmp: %+v", res)
		}
		if err := p.WriteFile(ctxFor(t), ref, "note", []byte("kept")); err != nil {
			t.Fatal(err)
		}
		if err := p.Pause(ctxFor(t), ref); err != nil {
			t.Fatal(err)
		}
		if _, err := p.ReadFile(ctxFor(t), ref, "note"); !errors.Is(err, sandbox.ErrInvalidState) {
			t.Fatalf("read while paused: %v", err)
		}
		if err := p.Resume(ctxFor(t), ref); err != nil {
			t.Fatal(err)
		}
		if got, err := p.ReadFile(ctxFor(t), ref, "note"); err != nil || string(got) != "kept" {
			t.Fatalf("read after resume: %q %v", got, err)
		}
	})

	// The agent binds its socket itself, in a directory of the host bound into the sandbox. The
	// provider dials a link of it in the run directory, which the sandbox does not see, and the
	// directory the sandbox sees is taken from it: root inside can neither replace the socket nor
	// connect to its agent.
	t.Run("AgentSocket", func(t *testing.T) {
		cfg := config(t)
		p := newProviderWith(t, cfg)
		ref := ready(t, p, nil)
		box := filepath.Join(cfg.StateDir, "sandboxes", ref.Name())
		seen, err := os.Stat(filepath.Join(box, "sock", "agent.sock"))
		if err != nil {
			t.Fatal(err)
		}
		dialled, err := os.Stat(filepath.Join(box, "run", "agent.sock"))
		if err != nil || !os.SameFile(seen, dialled) || dialled.Mode()&os.ModeSocket == 0 {
			t.Fatalf("the dialled socket %v is not the agent's (%v)", dialled, err)
		}
		for path, mode := range map[string]os.FileMode{filepath.Join(box, "sock"): 0o700, filepath.Join(box, "sock", "agent.sock"): 0o600} {
			st, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if s := st.Sys().(*syscall.Stat_t); s.Uid != 0 || s.Gid != 0 || st.Mode().Perm() != mode {
				t.Fatalf("%s: %v, uid %d gid %d", path, st.Mode(), s.Uid, s.Gid)
			}
		}
		res := sh(t, p, ref, `
ls /.sandboxd/sock 2>/dev/null && echo listed
rm -f /.sandboxd/sock/agent.sock 2>/dev/null && echo removed
ln -s /tmp/x /.sandboxd/sock/other 2>/dev/null && echo linked
python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect("/.sandboxd/sock/agent.sock"); print("connected")' 2>/dev/null
true`)
		if code(res) != 0 || res.Stdout != "" {
			t.Fatalf("the sandbox reached its agent's socket: %+v", res)
		}
		if res := sh(t, p, ref, "echo still"); res.Stdout != "still\n" {
			t.Fatalf("%+v", res)
		}
	})

	// A warm pool entry is taken as on runc, and releasing everything leaves nothing: each sandbox's
	// sentry and gofer are reaped, one whose agent has ended included.
	t.Run("PoolAndRelease", func(t *testing.T) {
		cfg := config(t)
		before := measureWith(t, runsc, cfg.StateDir)
		cfg.WarmPool = 1
		p := newProviderWith(t, cfg)
		waitIdle(t, p, 1)
		ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
		obs, err := p.Allocate(ctxFor(t), ref, sandbox.Spec{ClientRequestID: "t", Resources: &sandbox.Resources{MemoryMiB: 128}})
		if err != nil || obs.State != sandbox.ObservedReady || !strings.HasPrefix(oci.Container(p, ref), "pool-") {
			t.Fatalf("allocate from the pool: %+v %v, container %s", obs, err, oci.Container(p, ref))
		}
		if res := sh(t, p, ref, "sleep 60 & python3 -c 'print(1)'"); res.Stdout != "1\n" {
			t.Fatalf("%+v", res)
		}
		waitIdle(t, p, 1)
		// One whose agent ended: the sentry ends with it, and is reaped at once.
		dead := ready(t, p, &sandbox.Resources{DiskMiB: 8})
		_, _ = p.Exec(ctxFor(t), dead, sandbox.Command{Argv: []string{"kill", "-TERM", "1"}})
		waitFor(t, func() bool {
			obs, err := p.Observe(ctxFor(t), dead)
			return err == nil && obs.State == sandbox.ObservedFailed
		})
		for _, r := range []sandbox.Ref{ref, dead} {
			if err := p.Release(ctxFor(t), r); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if after := measureWith(t, runsc, cfg.StateDir); after != before {
			t.Fatalf("left behind: before %+v, after %+v", before, after)
		}
	})
}

// TestGVisorRefusesOldKernel: a runsc whose kernel has no openat2, which the agent needs for every path
// it resolves (gVisor before 2026-08, Debian 12's among them), is refused by New, before anything is
// made, with an error that says so.
func TestGVisorRefusesOldKernel(t *testing.T) {
	dir := testenv.StateDir(t)
	old := filepath.Join(dir, "runsc")
	script := `#!/bin/sh
case "$*" in
--version) echo "runsc version 0.0~20221219.0"; echo "spec: 1.0.2-dev" ;;
"help syscalls") printf 'linux/amd64:\n\nNUM  NAME  SUPPORT  NOTE\n257  openat  Full Support  Fully Supported.\n' ;;
*) echo "runsc: unexpected $*" >&2; exit 1 ;;
esac
`
	if err := os.WriteFile(old, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	_, err := oci.New(oci.Config{StateDir: state, AgentPath: testenv.BuildAgent(t), Runtime: old})
	if err == nil || !strings.Contains(err.Error(), "openat2") {
		t.Fatalf("New with a kernel without openat2: %v", err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("the refused provider made its state directory: %v", err)
	}
}

// TestRuntimeClass: the class is told from what the binary says, not from its name.
func TestRuntimeClass(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct{ says, class string }{
		"runsc":      {"runc version 1.1.5", "runc"},
		"my-runtime": {"runsc version release-20260901.0", "gvisor"},
		"runc":       {"runc version 1.5.3\ncommit: v1.5.3", "runc"},
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\nprintf '"+strings.ReplaceAll(c.says, "\n", `\n`)+`\n'`+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if got, err := oci.DetectClass(path); err != nil || got != c.class {
			t.Errorf("%s saying %q: class %q %v, want %q", name, c.says, got, err, c.class)
		}
	}
}
