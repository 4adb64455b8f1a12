package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// builds are the daemon binaries Build makes, one per set of build tags and test process, which Main
// removes.
var builds struct {
	main bool // Main runs the tests, so the binaries go when they end
	mu   sync.Mutex
	by   map[string]*build // by the tags, sorted and joined
}

type build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Main runs the package's tests and then removes what BuildAgent and Build built. The TestMain of a
// package whose tests call them calls it, last.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main for a TestMain that exits by itself (testscript's): it runs m, removes the builds and
// returns m's status.
func Run(m interface{ Run() int }) int {
	builds.main = true
	code := m.Run()
	builds.mu.Lock()
	for _, b := range builds.by {
		if b.dir != "" {
			os.RemoveAll(b.dir)
		}
	}
	builds.mu.Unlock()
	return code
}

// BuildAgent returns the path of a static (CGO_ENABLED=0) build of cmd/sandboxd, the daemon that is also
// every sandbox's agent, built on the first call of the test process. Its directory is searchable by
// every uid (0o711): the oci provider's sandboxes, and gVisor's gofer, run as unprivileged host uids
// and open it. The package's TestMain must call Main, which removes it.
func BuildAgent(t testing.TB) string {
	t.Helper()
	return BuildDaemon(t)
}

// BuildDaemon is BuildAgent built with the given build tags (kubernetes, say), once per set of tags.
func BuildDaemon(t testing.TB, tags ...string) string {
	t.Helper()
	path, err := Build(tags...)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Build is BuildDaemon for a caller without a test at hand (a cluster's set-up, once for all its
// tests): the path, or why it could not be built.
func Build(tags ...string) (string, error) {
	if !builds.main {
		return "", errors.New("testenv: the package's TestMain must call testenv.Main, which removes the binary")
	}
	tags = slices.Sorted(slices.Values(tags))
	key := strings.Join(tags, ",")
	builds.mu.Lock()
	if builds.by == nil {
		builds.by = map[string]*build{}
	}
	b := builds.by[key]
	if b == nil {
		b = &build{}
		builds.by[key] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() { b.dir, b.path, b.err = buildDaemon(key) })
	return b.path, b.err
}

func buildDaemon(tags string) (dir, path string, err error) {
	dir, err = os.MkdirTemp("", "sandboxd-agent")
	if err != nil {
		return "", "", err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return dir, "", err
	}
	path = filepath.Join(dir, "sandboxd")
	args := []string{"build", "-o", path}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	build := exec.Command("go", append(args, "github.com/sandboxd/sandbox/cmd/sandboxd")...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return dir, "", fmt.Errorf("building the daemon (tags %q): %v\n%s", tags, err, out)
	}
	return dir, path, nil
}
