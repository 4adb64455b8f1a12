// Package testenv holds what the module's tests share about the machine they run on.
package testenv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// StateDir returns a fresh directory for a test, removed when the test ends, that the host uids of
// user-namespaced sandboxes can search (o+x on it and its parents): what the oci provider needs of its
// state directory. t.TempDir's own parent is private to the test's user. Before it is removed, what is
// still mounted below it is unmounted: the oci provider's shared root stays mounted after a daemon a
// test killed, as it would on a machine until the next start. (Tests that check for leaks measure
// mounts themselves, before.)
func StateDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() { unmountBelow(dir) })
	for d := dir; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, st.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// unmountBelow detaches every mount at or below dir, deepest first.
func unmountBelow(dir string) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// WaitFor polls ok every 10 ms until it holds, and fails t (saying what it waited for) when it does
// not within 20 s.
func WaitFor(t testing.TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not in 20 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
