package oci_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
	"github.com/sandboxd/sandbox/provider/providertest"
)

// testRuntime is the runtime binary the package's tests run their sandboxes on: $SANDBOXD_OCI_RUNTIME
// (SANDBOXD_OCI_RUNTIME=runsc runs every test on gVisor), or runc. TestGVisor runs on gVisor
// whenever runsc is installed.
var testRuntime = cmp.Or(os.Getenv("SANDBOXD_OCI_RUNTIME"), "runc")

func TestMain(m *testing.M) {
	if ok, why := oci.Available(); !ok {
		fmt.Fprintln(os.Stderr, "the oci provider cannot run here:", why)
		os.Exit(1)
	}
	if _, err := exec.LookPath(testRuntime); err != nil {
		fmt.Fprintln(os.Stderr, "the tests' runtime:", err)
		os.Exit(1)
	}
	testenv.Main(m)
}

// newProvider makes a provider on a fresh state directory and releases everything it holds when the
// test ends, passed or not.
func newProvider(t testing.TB) *oci.Provider {
	t.Helper()
	return newProviderAt(t, testenv.StateDir(t))
}

func newProviderAt(t testing.TB, dir string) *oci.Provider {
	t.Helper()
	return newProviderWith(t, testConfig(t, dir))
}

// testConfig is the configuration of the tests' providers on dir, on testRuntime.
func testConfig(t testing.TB, dir string) oci.Config {
	return oci.Config{StateDir: dir, AgentPath: testenv.BuildAgent(t), Runtime: testRuntime, StopGrace: time.Second}
}

// newProviderWith makes a provider of cfg and releases everything it holds when the test ends.
func newProviderWith(t testing.TB, cfg oci.Config) *oci.Provider {
	t.Helper()
	p, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		releaseAll(t, p)
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return p
}

// onGVisor reports whether p runs its sandboxes on gVisor, where a few promises are kept differently
// (provider/oci/runtime.go); each test that asks says how.
func onGVisor(t testing.TB, p *oci.Provider) bool {
	t.Helper()
	m, err := p.Manifest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return m.RuntimeClass == "gvisor"
}

func releaseAll(t testing.TB, p *oci.Provider) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	refs, err := p.Resources(ctx)
	if err != nil {
		t.Errorf("resources: %v", err)
		return
	}
	for _, ref := range refs {
		if err := p.Release(ctx, ref); err != nil {
			t.Errorf("release %s: %v", ref, err)
		}
	}
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// ready allocates a sandbox with res and fails unless it is ready.
func ready(t testing.TB, p *oci.Provider, res *sandbox.Resources) sandbox.Ref {
	t.Helper()
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	obs, err := p.Allocate(ctxFor(t), ref, sandbox.Spec{ClientRequestID: "t", Resources: res})
	if err != nil {
		t.Fatalf("allocate: %v", err)
	}
	if obs.State != sandbox.ObservedReady {
		t.Fatalf("allocate: %+v", obs)
	}
	return ref
}

// sh runs a shell script in the sandbox and returns its result.
func sh(t testing.TB, p *oci.Provider, ref sandbox.Ref, script string) sandbox.CommandResult {
	t.Helper()
	res, err := p.Exec(ctxFor(t), ref, sandbox.Command{Argv: []string{"sh", "-c", script}, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return res
}

func code(res sandbox.CommandResult) int {
	if res.ExitCode == nil {
		return -1
	}
	return *res.ExitCode
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) sandbox.Provider { return newProvider(t) })
}

func TestManifest(t *testing.T) {
	m, err := newProvider(t).Manifest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	class, err := oci.DetectClass(testRuntime)
	if err != nil {
		t.Fatal(err)
	}
	want := sandbox.Capabilities{CommandExecution: true, FileAccess: true, PauseResume: true, ResourceLimits: true,
		PersistentVolume:    class == "runc", // TestVolumes
		InteractiveTerminal: true}            // TestTerminals, on runc and on gVisor
	want.NetworkPolicy = class == "runc" // gVisor's sandboxes run with --network=none
	// Images run on runc's sandboxes only (image.go).
	want.ImageReference = class == "runc"
	want.PortForwarding = class == "runc" // TestPorts; gVisor untested here
	// Snapshots are images of the store, templates names of them (snapshots.go): where images run.
	want.FilesystemSnapshot, want.TemplateReference = class == "runc", class == "runc"
	want.MemorySnapshot = class == "gvisor" // TestCheckpoint; runc would need CRIU
	if m.Name != "oci" || m.RuntimeClass != class || m.Capabilities != want {
		t.Fatalf("manifest %+v", m)
	}
	if filepath.Base(testRuntime) == "runc" && class != "runc" {
		t.Fatalf("runc is of class %q", class)
	}
}

func TestSmoke(t *testing.T) {
	p := newProvider(t)
	ref := ready(t, p, nil)
	res := sh(t, p, ref, "echo hi; id -u; pwd")
	if code(res) != 0 || res.Stdout != "hi\n0\n/workspace\n" {
		t.Fatalf("%+v", res)
	}
	if !strings.Contains(res.Stdout, "hi") {
		t.Fatal(res.Stdout)
	}
}

// TestNewWaitsForEarlierRuntime: a runtime process an earlier provider left running on the state
// directory (one killed during `runc run`) has finished when New returns, so nothing it makes appears
// after the new provider has looked at what is there.
func TestNewWaitsForEarlierRuntime(t *testing.T) {
	dir := testenv.StateDir(t)
	made := filepath.Join(dir, "made")
	// Stands for that runc: its arguments name the state directory's runtime root. The script ends in
	// a builtin, so the shell waits for touch instead of becoming it.
	left := exec.Command("sh", "-c", `sleep 0.5; touch "$0"; exit 0`, made, "--root", filepath.Join(dir, "runc"), "run", "x")
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	defer left.Wait()
	newProviderAt(t, dir)
	if _, err := os.Stat(made); err != nil {
		t.Fatalf("New returned before the earlier runtime process ended: %v", err)
	}
}
