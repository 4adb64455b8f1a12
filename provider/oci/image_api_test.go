package oci_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
	teststack "github.com/sandboxd/sandbox/internal/testenv/stack"
)

// TestImageThroughTheAPI: spec.image end to end through the daemon's API: the sandbox runs the
// image, says which digest in providerExtensions, and a recreate runs that digest again though the
// tag has moved on the registry and in the store (pulled anew), and again once that digest has left
// the store (removed and pruned: pulled by digest); a new sandbox of the tag runs what it names now;
// an unknown image fails the sandbox with a stable code.
func TestImageThroughTheAPI(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, pinned := reg.Push(t, "api/busybox:1", imagetest.BusyboxImage(t, "first"))
	c := imageDaemon(t, reg)
	ctx := ctxFor(t)
	sb, err := c.Create(ctx, sandbox.Spec{ClientRequestID: "img-1", Image: tagged})
	if err != nil {
		t.Fatal(err)
	}
	if sb, err = c.WaitReady(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	digestOf := func(sb *sandbox.Sandbox) string {
		var info struct{ Reference, Digest string }
		if err := json.Unmarshal(sb.ProviderExtensions["sandboxd.image"], &info); err != nil {
			t.Fatalf("providerExtensions %s: %v", sb.ProviderExtensions, err)
		}
		return info.Digest
	}
	first := digestOf(sb)
	if first == "" || !strings.HasSuffix(pinned, "@"+first) {
		t.Fatalf("digest %s, pushed %s", first, pinned)
	}
	res, err := c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"cat", "/etc/greeting"}})
	if err != nil || res.Stdout != "first\n" {
		t.Fatalf("%+v, %v", res, err)
	}

	// The tag moves on, on the registry and in the store; the sandbox's next generation runs the
	// bytes it ran.
	reg.Push(t, "api/busybox:1", imagetest.BusyboxImage(t, "second"))
	moved, err := c.PullImage(ctx, tagged)
	if err != nil || moved.Digest == first {
		t.Fatalf("pull of the moved tag: %+v, %v", moved, err)
	}
	terminate := func() {
		t.Helper()
		if sb, err = c.Terminate(ctx, sb.ID, sb.Generation); err != nil {
			t.Fatal(err)
		}
		if _, err = c.WaitState(ctx, sb.ID, sandbox.StateTerminated); err != nil {
			t.Fatal(err)
		}
	}
	recreate := func(key string) {
		t.Helper()
		if sb, err = c.Recreate(ctx, sb.ID, sb.Generation, sandbox.Spec{ClientRequestID: key, Image: tagged}); err != nil {
			t.Fatal(err)
		}
		if sb, err = c.WaitReady(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if got := digestOf(sb); got != first {
			t.Fatalf("generation %d runs %s, the first generation ran %s", sb.Generation, got, first)
		}
		res, err := c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"cat", "/etc/greeting"}})
		if err != nil || res.Stdout != "first\n" {
			t.Fatalf("generation %d: %+v, %v", sb.Generation, res, err)
		}
	}
	terminate()
	recreate("img-2")

	// A new sandbox of the tag runs what it names now.
	fresh, err := c.Create(ctx, sandbox.Spec{ClientRequestID: "img-new", Image: tagged})
	if err != nil {
		t.Fatal(err)
	}
	if fresh, err = c.WaitReady(ctx, fresh.ID); err != nil {
		t.Fatal(err)
	}
	if got := digestOf(fresh); got != moved.Digest {
		t.Fatalf("a new sandbox of the tag runs %s, the tag names %s", got, moved.Digest)
	}
	if res, err = c.Exec(ctx, fresh.ID, fresh.Generation, sandbox.Command{Argv: []string{"cat", "/etc/greeting"}}); err != nil || res.Stdout != "second\n" {
		t.Fatalf("%+v, %v", res, err)
	}

	// The first digest leaves the store; the next generation pulls it again, by digest.
	terminate()
	if err := c.RemoveImage(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PruneImages(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Image(ctx, first); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("the first digest after remove and prune: %v", err)
	}
	recreate("img-2b")

	bad, err := c.Create(ctx, sandbox.Spec{ClientRequestID: "img-3", Image: reg.Host + "/no/such:1"})
	if err != nil {
		t.Fatal(err)
	}
	if bad, err = c.WaitState(ctx, bad.ID, sandbox.StateFailed); err != nil {
		t.Fatal(err)
	}
	if bad.Failure == nil || bad.Failure.Code != "image_not_found" {
		t.Fatalf("failure %+v", bad.Failure)
	}
	if _, err := c.Create(ctx, sandbox.Spec{ClientRequestID: "img-4", Image: "Not A Reference"}); err == nil {
		t.Fatal("a malformed image reference was accepted")
	}
}

// TestImageEndpoints: /v1/images through the daemon's API: import from a path on the daemon's host,
// pull, list, inspect, a remove refused while a sandbox runs on the image, prune.
func TestImageEndpoints(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	tagged, _ := reg.Push(t, "ep/busybox:1", imagetest.BusyboxImage(t, "pulled"))
	c := imageDaemon(t, reg)
	ctx := ctxFor(t)
	layoutDir := t.TempDir()
	lp, err := layout.Write(layoutDir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(imagetest.BusyboxImage(t, "imported")); err != nil {
		t.Fatal(err)
	}
	imported, err := c.ImportImage(ctx, layoutDir, "local/imported:1")
	if err != nil {
		t.Fatal(err)
	}
	if imported.WorkingDir != "/srv" || len(imported.Names) != 1 || imported.Names[0] != "local/imported:1" {
		t.Fatalf("imported %+v", imported)
	}
	pulled, err := c.PullImage(ctx, tagged)
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Images(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("list %+v, %v", list, err)
	}
	got, err := c.Image(ctx, pulled.Digest)
	if err != nil || got.Digest != pulled.Digest {
		t.Fatalf("inspect %+v, %v", got, err)
	}
	if _, err := c.Image(ctx, "sha256:"+strings.Repeat("0", 64)); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("inspect of an unknown digest: %v", err)
	}
	if _, err := c.PullImage(ctx, reg.Host+"/no/such:1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("pull of an unknown image: %v", err)
	}
	if _, err := c.ImportImage(ctx, "/nonexistent", "local/x:1"); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("import of nothing: %v", err)
	}

	sb, err := c.Create(ctx, sandbox.Spec{ClientRequestID: "ep-1", Image: "local/imported:1"})
	if err != nil {
		t.Fatal(err)
	}
	if sb, err = c.WaitReady(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"cat", "/etc/greeting"}})
	if err != nil || res.Stdout != "imported\n" {
		t.Fatalf("%+v, %v", res, err)
	}
	if err := c.RemoveImage(ctx, "local/imported:1"); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("remove of an image in use: %v", err)
	}
	if sb, err = c.Terminate(ctx, sb.ID, sb.Generation); err != nil {
		t.Fatal(err)
	}
	if _, err = c.WaitState(ctx, sb.ID, sandbox.StateTerminated); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"local/imported:1", pulled.Digest} {
		if err := c.RemoveImage(ctx, ref); err != nil {
			t.Fatalf("remove %s: %v", ref, err)
		}
	}
	if err := c.RemoveImage(ctx, "local/imported:1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("a second remove: %v", err)
	}
	n, err := c.PruneImages(ctx)
	if err != nil || n != 3 {
		t.Fatalf("prune: %d layers, %v (two images of two layers, the busybox layer shared)", n, err)
	}
	if list, err := c.Images(ctx); err != nil || len(list) != 0 {
		t.Fatalf("after prune: %+v, %v", list, err)
	}
}

// imageDaemon is a client of a daemon whose oci provider pulls from reg, whose answers are checked
// against the API documents.
func imageDaemon(t *testing.T, reg *imagetest.Registry) *client.Client {
	t.Helper()
	return registryDaemon(t, reg.Host, testenv.StateDir(t), nil)
}

// TestImagePullWhileStarting: a create of an image the store lacks answers at once with the sandbox
// starting, which it stays while the image is pulled, and a pull that lasts longer than a provider
// call may succeeds: it is bounded by the preparation's own bound.
func TestImagePullWhileStarting(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	reg.Push(t, "slow/busybox:1", imagetest.BusyboxImage(t, "slow"))
	gate := make(chan struct{})
	var held atomic.Int64
	proxy := imagetest.Proxy(t, reg.Host, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			held.Add(1)
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		next.ServeHTTP(w, r)
	})
	// Long enough for the allocation that follows the pull (a runc run) on a loaded machine.
	const providerTimeout = 8 * time.Second
	c := registryDaemon(t, proxy, testenv.StateDir(t), func(c *core.Config) { c.ProviderTimeout = providerTimeout })
	ctx := ctxFor(t)

	begun := time.Now()
	sb, err := c.Create(ctx, sandbox.Spec{ClientRequestID: "slow", Image: proxy + "/slow/busybox:1"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != sandbox.StateStarting {
		t.Fatalf("a create whose image is being pulled answers %s", sb.State)
	}
	// Held at the registry past the provider call's bound: still starting.
	for held.Load() == 0 || time.Since(begun) < providerTimeout*3/2 {
		time.Sleep(10 * time.Millisecond)
	}
	if sb, err = c.Get(ctx, sb.ID); err != nil || sb.State != sandbox.StateStarting {
		t.Fatalf("during the pull: %+v, %v", sb, err)
	}
	close(gate)
	if sb, err = c.WaitReady(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"cat", "/etc/greeting"}})
	if err != nil || res.Stdout != "slow\n" {
		t.Fatalf("%+v, %v", res, err)
	}
	evs, err := c.Events(ctx, sandbox.EventQuery{SandboxID: sb.ID})
	if err != nil {
		t.Fatal(err)
	}
	var moves []string
	for _, ev := range evs {
		if ev.Type == sandbox.EventStateChanged {
			var d sandbox.StateChangedData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			moves = append(moves, fmt.Sprintf("%s>%s:%s", d.From, d.To, d.Reason))
		}
	}
	if want := []string{"requested>starting:preparing", "starting>ready:ready"}; !slices.Equal(moves, want) {
		t.Fatalf("moves %v, want %v", moves, want)
	}
}

// TestImagePullBound: a pull that never ends fails the sandbox, image_pull_failed, once past the
// preparation's bound. A sandbox terminated during its pull is terminated at once, and stays so once
// the pull has put the image in the store: nothing is allocated for it, and no mark of its
// preparation is left.
func TestImagePullBound(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	reg.Push(t, "stuck/busybox:1", imagetest.BusyboxImage(t, "stuck"))
	reg.Push(t, "gated/busybox:1", imagetest.BusyboxImage(t, "gated"))
	gate := make(chan struct{})
	proxy := imagetest.Proxy(t, reg.Host, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			release := gate
			if strings.HasPrefix(r.URL.Path, "/v2/stuck/") {
				release = nil // never
			}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		next.ServeHTTP(w, r)
	})
	dir := testenv.StateDir(t)
	c := registryDaemon(t, proxy, dir, func(c *core.Config) { c.PrepareTimeout = 10 * time.Second })
	ctx := ctxFor(t)
	stuck, err := c.Create(ctx, sandbox.Spec{ClientRequestID: "stuck", Image: proxy + "/stuck/busybox:1"})
	if err != nil {
		t.Fatal(err)
	}
	if stuck, err = c.WaitState(ctx, stuck.ID, sandbox.StateFailed); err != nil {
		t.Fatal(err)
	}
	if stuck.Failure == nil || stuck.Failure.Code != "image_pull_failed" || !strings.Contains(stuck.Failure.Message, "deadline") {
		t.Fatalf("failure %+v", stuck.Failure)
	}

	gated := proxy + "/gated/busybox:1"
	gone, err := c.Create(ctx, sandbox.Spec{ClientRequestID: "gone", Image: gated})
	if err != nil || gone.State != sandbox.StateStarting {
		t.Fatalf("%+v, %v", gone, err)
	}
	if gone, err = c.Terminate(ctx, gone.ID, gone.Generation); err != nil || gone.State != sandbox.StateTerminated {
		t.Fatalf("terminate during the pull: %+v, %v", gone, err)
	}
	close(gate)
	for pulled := false; !pulled; time.Sleep(10 * time.Millisecond) {
		list, err := c.Images(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, img := range list {
			pulled = pulled || slices.Contains(img.Names, gated)
		}
	}
	if gone, err = c.Get(ctx, gone.ID); err != nil || gone.State != sandbox.StateTerminated || gone.Failure != nil {
		t.Fatalf("once the pull has ended: %+v, %v", gone, err)
	}
	for _, d := range []string{"preparing", "sandboxes"} {
		ents, _ := os.ReadDir(filepath.Join(dir, d))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), string(gone.ID)) || strings.HasPrefix(e.Name(), string(stuck.ID)) {
				t.Fatalf("%s/%s is left", d, e.Name())
			}
		}
	}
}

// registryDaemon is imageDaemon for the registry (or proxy) at host, its provider's state in dir, with
// the runtime's configuration changed by f when it is not nil.
func registryDaemon(t *testing.T, host, dir string, f func(*core.Config)) *client.Client {
	t.Helper()
	cfg := testConfig(t, dir)
	cfg.Runtime = "runc"
	cfg.InsecureRegistries = []string{host}
	var opts []teststack.Option
	if f != nil {
		opts = append(opts, teststack.Core(f))
	}
	st := teststack.New(t, newProviderWith(t, cfg), opts...)
	c, err := client.New(st.URL, client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
