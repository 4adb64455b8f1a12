package oci_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

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
	p := imageProvider(t, testenv.StateDir(t), reg)
	st := teststack.New(t, p)
	c, err := client.New(st.URL, client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}))
	if err != nil {
		t.Fatal(err)
	}
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
