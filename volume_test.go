package sandbox_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox"
)

// TestCheckVolumeName: the check agrees with the pattern api/extensions.yaml gives a volume's name.
func TestCheckVolumeName(t *testing.T) {
	pattern := regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	for _, name := range []string{"a", "cache", "0x", "a.b-c_d", strings.Repeat("a", 63), strings.Repeat("a", 64),
		"", "-a", ".a", "_a", "A", "a/b", "a b", "é", "a\x00", "..", "a..b"} {
		if got, want := sandbox.CheckVolumeName(name) == nil, pattern.MatchString(name); got != want {
			t.Errorf("%q: accepted %v, the pattern says %v", name, got, want)
		}
	}
}
