package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestOCIPullSurvivesSIGKILL kills the daemon with SIGKILL while it pulls the image of a sandbox being
// created (a layer half-unpacked under the store's tmp/; the sandbox starting), restarts it on the same
// data dir, and finds the pull resumed: the sandbox becomes ready on the whole image, nothing is left
// in tmp/ or marked as being prepared, and the next create of the image works.
func TestOCIPullSurvivesSIGKILL(t *testing.T) {
	needOCI(t)
	ctx := context.Background()
	reg := imagetest.StartRegistry(t)
	big, err := random.Layer(8<<20, "application/vnd.oci.image.layer.v1.tar")
	if err != nil {
		t.Fatal(err)
	}
	bigDigest, _ := big.Digest()
	var stall atomic.Bool
	stall.Store(true)
	proxy := imagetest.Proxy(t, reg.Host, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if stall.Load() && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, bigDigest.String()) {
			imagetest.ServePart(w, r, reg.Host, 4<<20) // the daemon is mid-unpack when killed
			return
		}
		next.ServeHTTP(w, r)
	})
	reg.Push(t, "kill/pull:1", imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, imagetest.BusyboxLayer(t), big))
	image := proxy + "/kill/pull:1"
	dataDir := testenv.StateDir(t)
	removeContainersAtEnd(t, dataDir)
	flags := []string{"--provider", "oci", "--oci-warm-pool", "0", "--insecure-registry", proxy}
	d := startDaemon(t, dataDir, flags...)
	var sb sandbox.Sandbox
	if st := call(ctx, "POST", d.url+"/v1/sandboxes", map[string]any{"clientRequestId": "p", "image": image}, &sb); st != 201 || sb.State != sandbox.StateStarting {
		t.Fatalf("create: %d %s", st, sb.State)
	}
	tmp := filepath.Join(dataDir, "oci", "images", "tmp")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		m, _ := filepath.Glob(filepath.Join(tmp, "layer-*", "root", "*"))
		if len(m) > 0 {
			if st, err := os.Stat(m[0]); err == nil && st.Size() > 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the pull never reached the big layer")
		}
	}
	if got := waitFor(t, d.url, sb.ID, sandbox.StateStarting); got.Generation != 1 {
		t.Fatalf("during the pull: %+v", got)
	}
	d.kill()

	stall.Store(false)
	d = startDaemon(t, dataDir, flags...)
	waitForWithin(t, d.url, sb.ID, sandbox.StateReady, 2*time.Minute)
	var res sandbox.CommandResult
	if st := call(ctx, "POST", d.url+"/v1/sandboxes/"+string(sb.ID)+"/commands", map[string]any{"expectedGeneration": 1,
		"argv": []string{"/bin/sh", "-c", "echo ok"}, "timeoutSeconds": 30}, &res); st != 200 || res.Stdout != "ok\n" {
		t.Fatalf("the sandbox after the restart: %d %+v", st, res)
	}
	for _, dir := range []string{tmp, filepath.Join(dataDir, "oci", "preparing")} {
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Fatalf("%s holds %d entries once the pull is done", dir, len(ents))
		}
	}
	var next sandbox.Sandbox
	if st := call(ctx, "POST", d.url+"/v1/sandboxes", map[string]any{"clientRequestId": "p2", "image": image}, &next); st != 201 {
		t.Fatalf("the next create: %d", st)
	}
	waitFor(t, d.url, next.ID, sandbox.StateReady)
}
