package oci_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
	teststack "github.com/sandboxd/sandbox/internal/testenv/stack"
)

// TestImageThroughTheAPI: spec.image end to end through the daemon's API: the sandbox runs the
// image, says which digest in providerExtensions, and a recreate runs that digest again though the
// tag has moved on the registry; an unknown image fails the sandbox with a stable code.
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

	// The tag moves on; the sandbox's next generation runs the bytes it ran.
	reg.Push(t, "api/busybox:1", imagetest.BusyboxImage(t, "second"))
	if sb, err = c.Terminate(ctx, sb.ID, sb.Generation); err != nil {
		t.Fatal(err)
	}
	if _, err = c.WaitState(ctx, sb.ID, sandbox.StateTerminated); err != nil {
		t.Fatal(err)
	}
	if sb, err = c.Recreate(ctx, sb.ID, sb.Generation, sandbox.Spec{ClientRequestID: "img-2", Image: tagged}); err != nil {
		t.Fatal(err)
	}
	if sb, err = c.WaitReady(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := digestOf(sb); got != first {
		t.Fatalf("recreate runs %s, the first generation ran %s", got, first)
	}
	res, err = c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"cat", "/etc/greeting"}})
	if err != nil || res.Stdout != "first\n" {
		t.Fatalf("%+v, %v", res, err)
	}

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
	st := teststack.New(t, imageProvider(t, testenv.StateDir(t), reg))
	c, err := client.New(st.URL, client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
