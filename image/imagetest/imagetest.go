// Package imagetest builds OCI images for tests, from the host's static busybox and from a Debian base
// made by mmdebstrap (DebianImage, cached on the machine), and serves them from a real registry (Debian's
// docker-registry) on loopback. Everything it starts ends with the test.
package imagetest

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Busybox is the static busybox binary the images are built from (Debian's busybox-static).
const Busybox = "/bin/busybox"

// Entry is one file of a layer built by Layer.
type Entry struct {
	Name     string
	Type     byte // tar.TypeReg when zero
	Body     string
	Linkname string
	Mode     int64
	Size     int64 // for a header whose size is not len(Body) (a sparse file's)
	UID, GID int
	Devmajor int64
	Xattrs   map[string]string // as PAX SCHILY.xattr records
}

// Layer is an uncompressed layer of entries, as go-containerregistry's tarball layer.
func Layer(t testing.TB, entries ...Entry) v1.Layer {
	t.Helper()
	raw := Tar(t, entries...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Tar is the tar stream of entries.
func Tar(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.Name, Typeflag: e.Type, Linkname: e.Linkname, Mode: e.Mode, Uid: e.UID, Gid: e.GID,
			Devmajor: e.Devmajor, Size: int64(len(e.Body)), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		for k, v := range e.Xattrs {
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords["SCHILY.xattr."+k] = v
		}
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
			if hdr.Typeflag == tar.TypeDir {
				hdr.Mode = 0o755
			}
		}
		if hdr.Typeflag != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.Body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// BusyboxLayer is a layer with busybox at /bin/busybox and /bin/sh, cat, ls, env, id and pwd linked to it.
func BusyboxLayer(t testing.TB) v1.Layer {
	t.Helper()
	bin, err := os.ReadFile(Busybox)
	if err != nil {
		t.Fatalf("busybox-static is needed: %v", err)
	}
	es := []Entry{{Name: "bin/", Type: tar.TypeDir}, {Name: "bin/busybox", Body: string(bin), Mode: 0o755}}
	for _, n := range []string{"sh", "cat", "ls", "env", "id", "pwd", "echo", "stat", "touch", "mkdir", "rm", "sleep", "true"} {
		es = append(es, Entry{Name: "bin/" + n, Type: tar.TypeSymlink, Linkname: "busybox"})
	}
	es = append(es, Entry{Name: "etc/", Type: tar.TypeDir}, Entry{Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777})
	return Layer(t, es...)
}

// Image is an image of layers with the config cfg (its OS and architecture are the host's).
func Image(t testing.TB, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := NewImage(cfg, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// NewImage is Image outside a test.
func NewImage(cfg v1.Config, layers ...v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", hostArch(), cfg
	return mutate.ConfigFile(img, cf)
}

// BusyboxImage is an image of busybox, /etc/greeting, and an Env and WorkingDir of its own.
func BusyboxImage(t testing.TB, greeting string) v1.Image {
	t.Helper()
	return Image(t, v1.Config{
		Env:        []string{"PATH=/bin", "GREETING=" + greeting},
		WorkingDir: "/srv",
	}, BusyboxLayer(t), Layer(t,
		Entry{Name: "etc/greeting", Body: greeting + "\n"},
		Entry{Name: "srv/", Type: tar.TypeDir},
		Entry{Name: "srv/owned", Body: "by 1000\n", UID: 1000, GID: 1000},
	))
}

// Registry is a docker-registry serving on loopback.
type Registry struct {
	Host string // 127.0.0.1:port
	cmd  *exec.Cmd
}

// StartRegistry starts a registry with an empty store under t's temporary directory; it ends with t.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	r, err := ServeRegistry(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Kill)
	return r
}

// ServeRegistry is StartRegistry outside a test: its configuration and store are under dir, and it
// runs until Kill, which the caller owes it once it answers.
func ServeRegistry(dir string) (*Registry, error) {
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		return nil, fmt.Errorf("docker-registry is needed (Debian's docker-registry package): %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	host := ln.Addr().String()
	ln.Close()
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), host)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &Registry{Host: host, cmd: cmd}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r, nil
			}
		}
		if time.Now().After(deadline) {
			r.Kill()
			return nil, fmt.Errorf("the registry on %s does not answer: %v", host, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill ends the registry; a second call is a no-op.
func (r *Registry) Kill() {
	if r.cmd.Process != nil && r.cmd.ProcessState == nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}

// Push puts img on the registry as repo:tag and returns its reference by tag and by digest.
func (r *Registry) Push(t testing.TB, repo string, img v1.Image) (tagged, pinned string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tagged, pinned, err := r.PushContext(ctx, repo, img)
	if err != nil {
		t.Fatal(err)
	}
	return tagged, pinned
}

// PushContext is Push outside a test.
func (r *Registry) PushContext(ctx context.Context, repo string, img v1.Image) (tagged, pinned string, err error) {
	tagged = r.Host + "/" + repo
	ref, err := name.ParseReference(tagged, name.Insecure)
	if err != nil {
		return "", "", err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return "", "", err
	}
	d, err := img.Digest()
	if err != nil {
		return "", "", err
	}
	return tagged, ref.Context().Name() + "@" + d.String(), nil
}

func hostArch() string { return runtime.GOARCH }

// Proxy serves on loopback a proxy to the registry at host whose requests go through hook, which
// passes one on by calling next, and returns its host:port. It ends with the test.
func Proxy(t testing.TB, host string, hook func(w http.ResponseWriter, r *http.Request, next http.Handler)) string {
	t.Helper()
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: host})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hook(w, r, rp) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// ServePart answers r with the first n bytes of what the registry at host answers to it, then sends
// nothing more until r's client goes away: a pull stalled mid-blob.
func ServePart(w http.ResponseWriter, r *http.Request, host string, n int64) {
	resp, err := http.Get("http://" + host + r.URL.Path)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Length", resp.Header.Get("Content-Length"))
	w.WriteHeader(resp.StatusCode)
	io.CopyN(w, resp.Body, n)
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}
