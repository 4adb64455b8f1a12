package imagetest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// DebianEnv is the Env of DebianImage's config.
var DebianEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LANG=C.UTF-8",
	"SANDBOXD_TEST_IMAGE=debian-bookworm-minbase",
}

// debianSuite and debianVariant are what mmdebstrap builds; a change to them, to debianBuild's options or
// to the machine's sources makes a new cache file.
const (
	debianSuite   = "bookworm"
	debianVariant = "minbase"
)

// DebianCacheDir is where DebianImage keeps its root filesystems: $SANDBOXD_TEST_IMAGE_CACHE, else
// /var/cache/sandboxd-test-images for root, else the user's cache directory. It is outside the clone, so
// a machine builds each one once.
func DebianCacheDir() string {
	if d := os.Getenv("SANDBOXD_TEST_IMAGE_CACHE"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/sandboxd-test-images"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "sandboxd-test-images")
	}
	return filepath.Join(os.TempDir(), "sandboxd-test-images")
}

// DebianImage is a one-layer Debian bookworm image: mmdebstrap's minbase variant from the machine's
// configured Debian sources, as a gzipped tar cached in DebianCacheDir (built the first time, which
// needs Debian's package mirror: 88 packages, 49 MB gzipped, 116 MB unpacked; 4-6 minutes cold on 2
// busy cores), with DebianEnv. The same cache file gives the same digest; two builds differ in their
// timestamps.
func DebianImage(t testing.TB) v1.Image {
	t.Helper()
	img, err := DebianImageOf(DebianRootfs(t))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// DebianImageOf is DebianImage of the minbase tar at path (DebianRootfs's or BuildDebianRootfs's).
func DebianImageOf(path string) (v1.Image, error) {
	layer, err := tarball.LayerFromFile(path)
	if err != nil {
		return nil, err
	}
	return NewImage(v1.Config{Env: DebianEnv, WorkingDir: "/root", Cmd: []string{"bash"}}, layer)
}

// ErrNotCached is BuildDebianRootfs's error when asked not to build a minbase tar the cache lacks.
var ErrNotCached = errors.New("the Debian minbase image is not in the cache")

// DebianRootfs is the path of the cached minbase tar (gzipped) DebianImage is made of, built when the
// cache lacks it. Concurrent callers, in this process or another, build it once: the build is under a
// lock file and into a temporary file renamed into place, so a killed build leaves nothing a later
// call would use.
func DebianRootfs(t testing.TB) string {
	t.Helper()
	path, err := BuildDebianRootfs(true, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// BuildDebianRootfs is DebianRootfs outside a test: its errors are returned and its one log line
// (the build's time) goes to logf. Without build, a tar the cache lacks is ErrNotCached (with its
// path), and nothing is built.
func BuildDebianRootfs(build bool, logf func(format string, args ...any)) (string, error) {
	bin, err := exec.LookPath("mmdebstrap")
	if err != nil && build {
		return "", fmt.Errorf("mmdebstrap is needed (Debian's mmdebstrap package): %w", err)
	}
	sources := debianSources()
	// Merged /usr by symlinks, as Debian's own images have it: without the hook, apt meets bookworm's
	// init-system-helpers' dependency with usrmerge, which brings perl.
	args := []string{"--variant=" + debianVariant, "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr", "--skip=output/dev", "--quiet"}
	dir := DebianCacheDir()
	kind := fmt.Sprintf("debian-%s-%s-%s", debianSuite, debianVariant, hostArch())
	key, err := debianKey(args, sources)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, kind+"-"+key+".tar.gz")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	} else if !build {
		return "", fmt.Errorf("%s: %w", path, ErrNotCached)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if _, err := os.Stat(path); err == nil {
		return path, nil // built by another caller meanwhile
	}
	// What a killed build left (no build runs but under the lock), and the builds of other keys.
	stale, _ := filepath.Glob(filepath.Join(dir, "."+kind+"-*.tar.gz"))
	old, _ := filepath.Glob(filepath.Join(dir, kind+"-*.tar.gz"))
	for _, p := range append(stale, old...) {
		os.Remove(p)
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s-%s.%d.tar.gz", kind, key, os.Getpid()))
	defer os.Remove(tmp)
	cmd := exec.Command(bin, append(append(args, debianSuite, tmp), sources...)...)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("mmdebstrap %s: %w\n%s", strings.Join(cmd.Args[1:], " "), err, out)
	}
	logf("mmdebstrap built %s in %s", filepath.Base(path), time.Since(start).Round(time.Second))
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	return path, nil
}

// debianSources are the machine's configured Debian sources, as files mmdebstrap pastes into the
// image's apt sources: Debian's deb822 file when there is one, else /etc/apt/sources.list; none (so
// mmdebstrap's default mirror) when neither is there. Third-party sources the machine has are left out.
func debianSources() []string {
	for _, p := range []string{"/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"} {
		if fi, err := os.Stat(p); err == nil && fi.Size() > 0 {
			return []string{p}
		}
	}
	return nil
}

// debianKey names a build: the suite, variant, architecture, mmdebstrap's options and the sources' text.
func debianKey(args, sources []string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n", debianSuite, debianVariant, hostArch(), strings.Join(args, " "))
	for _, p := range sources {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\n%d\n", p, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}
