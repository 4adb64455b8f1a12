package image_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image"
	"github.com/sandboxd/sandbox/image/imagetest"
)

// A test process started with these pulls one image into a store and exits: what TestKilledMidPull
// kills.
const (
	pullDirEnv = "IMAGE_TEST_PULL_DIR"
	pullRefEnv = "IMAGE_TEST_PULL_REF"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(pullDirEnv); dir != "" {
		ref := os.Getenv(pullRefEnv)
		s, err := image.Open(image.Config{Dir: dir, Insecure: []string{strings.SplitN(ref, "/", 2)[0]}})
		if err == nil {
			_, err = s.Pull(context.Background(), ref, nil)
		}
		fmt.Fprintln(os.Stderr, "pull:", err)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// TestKilledMidPull: a process SIGKILLed while it unpacks a layer leaves nothing a later open of the
// store uses: its half-made layer is cleared, the image is unknown, and the next pull makes it whole.
func TestKilledMidPull(t *testing.T) {
	needRoot(t)
	reg := imagetest.StartRegistry(t)
	big, err := random.Layer(8<<20, "application/vnd.oci.image.layer.v1.tar")
	if err != nil {
		t.Fatal(err)
	}
	bigDigest, _ := big.Digest()
	proxy := imagetest.Proxy(t, reg.Host, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, bigDigest.String()) {
			imagetest.ServePart(w, r, reg.Host, 4<<20) // the puller is mid-unpack when killed
			return
		}
		next.ServeHTTP(w, r)
	})
	tagged, _ := reg.Push(t, "kill:1", imagetest.Image(t, v1.Config{}, imagetest.BusyboxLayer(t), big))
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), pullDirEnv+"="+dir, pullRefEnv+"="+strings.Replace(tagged, reg.Host, proxy, 1))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the big layer is being unpacked (its file in tmp/ has data), then kill.
	deadline := time.Now().Add(time.Minute)
	for {
		m, _ := filepath.Glob(filepath.Join(dir, "tmp", "layer-*", "root", "*"))
		if len(m) > 0 {
			if st, err := os.Stat(m[0]); err == nil && st.Size() > 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("the pull never reached the big layer")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()

	s := openStore(t, dir, reg.Host)
	assertEmpty(t, filepath.Join(dir, "tmp"))
	assertEmpty(t, filepath.Join(dir, "images"))
	if _, err := s.Lookup(tagged); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("after the kill: %v, want ErrNotFound", err)
	}
	img, err := s.Pull(context.Background(), tagged, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Layers) != 2 {
		t.Fatalf("%+v", img)
	}
}
