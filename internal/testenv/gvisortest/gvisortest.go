// Package gvisortest finds the runsc that tests run gVisor sandboxes on. Only tests import it.
package gvisortest

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

// Runtime returns the first of candidates (a path, or a name looked up in PATH; an empty one is passed
// over) on which the oci provider runs gVisor sandboxes. A candidate of another runtime class (runc)
// is passed over too. Without one the test skips, unless CI is set, where it fails: so it does when a
// runsc is found that the provider refuses (Debian 12's is too old to run the agent: no openat2).
func Runtime(t testing.TB, candidates ...string) string {
	t.Helper()
	for _, rt := range candidates {
		if rt == "" {
			continue
		}
		path, err := exec.LookPath(rt)
		if err != nil {
			continue
		}
		p, err := oci.New(oci.Config{StateDir: testenv.StateDir(t), AgentPath: testenv.BuildAgent(t), Runtime: path})
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s: %v", path, err)
			}
			t.Skipf("%s cannot run sandboxes: %v", path, err)
		}
		m, err := p.Manifest(context.Background())
		p.Close()
		if err == nil && m.RuntimeClass == "gvisor" {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no runsc: install gVisor (scripts/test does) or set SANDBOXD_RUNSC")
	}
	t.Skip("no runsc installed")
	return ""
}
