package agent_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent"
	"github.com/sandboxd/sandbox/fsroot"
)

// A digest trailer is checked as a header digest is, once the body has ended and before the rename:
// one that does not match the bytes, disagrees with the header or failed to read leaves the old file
// and no temporary; one that matches (alone, or with a header it agrees with) replaces it.
func TestRawFileTrailerDigest(t *testing.T) {
	dir := t.TempDir()
	root, err := fsroot.Open(dir, "/")
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "f")
	if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	var files agent.Files
	data := []byte("new bytes")
	sum, other := sha256.Sum256(data), sha256.Sum256([]byte("other"))
	trailer := func(d []byte, err error) func() ([]byte, error) { return func() ([]byte, error) { return d, err } }
	bad := errors.New("a malformed trailer")
	for _, tc := range []struct {
		name string
		put  sandbox.FilePut
		ok   bool
	}{
		{"mismatch", sandbox.FilePut{TrailerDigest: trailer(other[:], nil)}, false},
		{"disagrees with the header", sandbox.FilePut{Digest: sum[:], TrailerDigest: trailer(other[:], nil)}, false},
		{"the header disagrees", sandbox.FilePut{Digest: other[:], TrailerDigest: trailer(sum[:], nil)}, false},
		{"not a SHA-256", sandbox.FilePut{TrailerDigest: trailer(sum[:5], nil)}, false},
		{"failed", sandbox.FilePut{TrailerDigest: trailer(nil, bad)}, false},
		{"failed in an upload", sandbox.FilePut{Upload: "upload-trailer-1", TrailerDigest: trailer(nil, bad)}, false},
		{"none came: the header's", sandbox.FilePut{Digest: other[:], TrailerDigest: trailer(nil, nil)}, false},
		{"matches", sandbox.FilePut{TrailerDigest: trailer(sum[:], nil)}, true},
		{"matches and agrees", sandbox.FilePut{Digest: sum[:], TrailerDigest: trailer(sum[:], nil)}, true},
	} {
		os.WriteFile(target, []byte("old"), 0o644)
		tc.put.Path, tc.put.Length = "f", int64(len(data))
		fw, err := files.PutFile(root, tc.put, bytes.NewReader(data))
		got, _ := os.ReadFile(target)
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, sandbox.ErrInvalidRequest)) {
			t.Fatalf("%s: %+v %v", tc.name, fw, err)
		}
		if want := map[bool]string{true: string(data), false: "old"}[tc.ok]; string(got) != want {
			t.Fatalf("%s: the file holds %q, want %q", tc.name, got, want)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Fatalf("%s: a temporary is left: %v", tc.name, ents)
		}
	}
}
