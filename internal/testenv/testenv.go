// Package testenv holds what the module's tests share about the machine they run on.
package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// StateDir returns a fresh directory for a test, removed when the test ends, that the host uids of
// user-namespaced sandboxes can search (o+x on it and its parents): what the oci provider needs of its
// state directory. t.TempDir's own parent is private to the test's user.
func StateDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
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
