package oci_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestDebianImageSandbox: a sandbox of a whole distribution (Debian bookworm's minbase, built by
// mmdebstrap and cached on the machine) pulled from the loopback registry runs its own dpkg and apt with
// the image's Env and working directory, and the files API reaches its files, through its merged-/usr
// symlinks, inside its root only.
func TestDebianImageSandbox(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, _ := reg.Push(t, "debian/minbase:bookworm", imagetest.DebianImage(t))
	p := imageProvider(t, testenv.StateDir(t), reg)
	ref, obs := fromImage(t, p, tagged)
	if obs.State != sandbox.ObservedReady {
		t.Fatalf("%+v", obs)
	}

	res := sh(t, p, ref, `cat /etc/debian_version; echo "$SANDBOXD_TEST_IMAGE"; echo "$PATH"; pwd; id -u; dpkg-query -W -f='${Status}\n' base-files; apt --version`)
	lines := strings.Split(res.Stdout, "\n")
	if code(res) != 0 || len(lines) < 7 || !strings.HasPrefix(lines[0], "12.") {
		t.Fatalf("%+v", res)
	}
	want := []string{"debian-bookworm-minbase", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "/root", "0", "install ok installed"}
	if !slices.Equal(lines[1:6], want) || !strings.HasPrefix(lines[6], "apt 2.6") {
		t.Fatalf("the image's Env, working directory or packages: %q", res.Stdout)
	}

	// The files API: a relative path is in the image's working directory; its symlinks (/etc/os-release
	// to ../usr/lib/os-release, /bin to usr/bin) resolve inside the sandbox's root, never the host's.
	if err := p.WriteFile(ctxFor(t), ref, "notes.txt", []byte("from the API\n")); err != nil {
		t.Fatal(err)
	}
	if res := sh(t, p, ref, "cat /root/notes.txt"); res.Stdout != "from the API\n" {
		t.Fatalf("%+v", res)
	}
	osr, err := p.ReadFile(ctxFor(t), ref, "/etc/os-release")
	if err != nil || !strings.Contains(string(osr), "VERSION_CODENAME=bookworm") {
		t.Fatalf("/etc/os-release: %q, %v", osr, err)
	}
	made := "sandboxd-debian-image-" + string(ref.ID)
	if err := p.WriteFile(ctxFor(t), ref, "/bin/"+made, []byte("#!/bin/sh\necho ran\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat("/usr/bin/" + made); !os.IsNotExist(err) {
		os.Remove("/usr/bin/" + made)
		t.Fatalf("a write through the image's /bin reached the host's /usr/bin: %v", err)
	}
	if res := sh(t, p, ref, "chmod +x /usr/bin/"+made+" && "+made); res.Stdout != "ran\n" {
		t.Fatalf("%+v", res)
	}
	entries, err := p.ListFiles(ctxFor(t), ref, "/etc/apt")
	if err != nil || !slices.ContainsFunc(entries, func(e sandbox.FileEntry) bool { return e.Path == "/etc/apt/sources.list.d" }) {
		t.Fatalf("list /etc/apt: %+v, %v", entries, err)
	}
}
