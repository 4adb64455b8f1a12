package deptest

import (
	"fmt"
	"strings"
	"testing"
)

func TestForbidden(t *testing.T) {
	bad := map[string]string{"k8s.io/...": "", "net/http": "", "modernc.org/sqlite/...": ""}
	for dep, want := range map[string]string{
		"k8s.io/api/core/v1":      "k8s.io/...",
		"k8s.io":                  "k8s.io/...",
		"net/http":                "net/http",
		"net/http/httptrace":      "",
		"modernc.org/sqlite":      "modernc.org/sqlite/...",
		"modernc.org/sqlite/lib":  "modernc.org/sqlite/...",
		"modernc.org/sqlitex":     "",
		"modernc.org/libc":        "",
		"github.com/x/k8s.io/api": "",
	} {
		got, ok := forbidden(bad, dep)
		if got != want || ok != (want != "") {
			t.Errorf("forbidden(%q) = %q, %v; want %q", dep, got, ok, want)
		}
	}
}

// recorder keeps what Check reports instead of failing the test; anything fatal still fails it.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// TestCheckReportsABadDependency runs a real `go list` on this package, which imports os/exec.
func TestCheckReportsABadDependency(t *testing.T) {
	r := &recorder{TB: t}
	DepChecker{Package: ".", GOOS: "linux", GOARCH: "amd64", BadDeps: map[string]string{
		"os/exec":      "no child processes here",
		"net/http/...": "not imported at all",
		"github.com/sandboxd/sandbox/internal/deptest": "the checked package itself never counts",
	}}.Check(r)
	if len(r.errors) != 1 {
		t.Fatalf("%d reports, want 1 (os/exec): %q", len(r.errors), r.errors)
	}
	for _, want := range []string{
		"github.com/sandboxd/sandbox/internal/deptest (linux/amd64) depends on os/exec: no child processes here",
		"imported through github.com/sandboxd/sandbox/internal/deptest -> os/exec",
	} {
		if !strings.Contains(r.errors[0], want) {
			t.Errorf("report %q lacks %q", r.errors[0], want)
		}
	}
}
