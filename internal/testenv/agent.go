package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// agent is the daemon binary BuildAgent builds, once per test process, and Main removes.
var agent struct {
	main bool // Main runs the tests, so the binary goes when they end
	once sync.Once
	dir  string
	path string
	err  error
}

// Main runs the package's tests and then removes what BuildAgent built. The TestMain of a package whose
// tests call BuildAgent calls it, last.
func Main(m *testing.M) {
	agent.main = true
	code := m.Run()
	if agent.dir != "" {
		os.RemoveAll(agent.dir)
	}
	os.Exit(code)
}

// BuildAgent returns the path of a static (CGO_ENABLED=0) build of cmd/sandboxd, the daemon that is also
// every sandbox's agent, built on the first call of the test process. Its directory is searchable by
// every uid (0o711): the oci provider's sandboxes, and gVisor's gofer, run as unprivileged host uids
// and open it. The package's TestMain must call Main, which removes it.
func BuildAgent(t testing.TB) string {
	t.Helper()
	if !agent.main {
		t.Fatal("testenv.BuildAgent: the package's TestMain must call testenv.Main, which removes the binary")
	}
	agent.once.Do(func() { agent.dir, agent.path, agent.err = buildAgent() })
	if agent.err != nil {
		t.Fatal(agent.err)
	}
	return agent.path
}

func buildAgent() (dir, path string, err error) {
	dir, err = os.MkdirTemp("", "sandboxd-agent")
	if err != nil {
		return "", "", err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return dir, "", err
	}
	path = filepath.Join(dir, "sandboxd")
	build := exec.Command("go", "build", "-o", path, "github.com/sandboxd/sandbox/cmd/sandboxd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return dir, "", fmt.Errorf("building the agent: %v\n%s", err, out)
	}
	return dir, path, nil
}
