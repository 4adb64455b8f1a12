package oci_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	teststack "github.com/sandboxd/sandbox/internal/testenv/stack"
)

// TestVolumesHTTP drives volumes and stats through the API on oci, every answer checked against
// api/extensions.yaml or the contract: data written in one sandbox is read by the next generation
// after a terminate and a recreate; a second writer fails with volume_in_use; a volume named by a
// live sandbox is not deleted; a create naming no volume that exists is a 400 and records nothing.
func TestVolumesHTTP(t *testing.T) {
	p := newProvider(t)
	st := teststack.New(t, p)
	c, err := client.New(st.URL, client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	if onGVisor(t, p) {
		volumesRefused(t, c)
		return
	}
	if _, err := c.CreateVolume(ctx, "data", 16, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateVolume(ctx, "data", 16, false); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("the name again: %v", err)
	}
	spec, _ := client.VolumeMounts(sandbox.Spec{ClientRequestID: "a"}, sandbox.VolumeMount{Name: "data", MountPath: "/data"})
	a := waitForState(t, c, mustCreate(t, c, spec), sandbox.StateReady)
	if res, err := c.Exec(ctx, a.ID, a.Generation, sandbox.Command{Argv: []string{"sh", "-c", "echo hello > /data/note"}}); err != nil || code(*res) != 0 {
		t.Fatalf("write: %+v %v", res, err)
	}
	if st, err := c.Stats(ctx, a.ID); err != nil || st.CPUSeconds == nil || st.MemoryBytes == nil || st.Pids == nil {
		t.Fatalf("stats: %+v %v", st, err)
	}
	spec2, _ := client.VolumeMounts(sandbox.Spec{ClientRequestID: "b"}, sandbox.VolumeMount{Name: "data", MountPath: "/data"})
	b := waitForState(t, c, mustCreate(t, c, spec2), sandbox.StateFailed)
	if b.Failure == nil || b.Failure.Code != "volume_in_use" {
		t.Fatalf("a second writer: %+v", b.Failure)
	}
	if err := c.DeleteVolume(ctx, "data"); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("delete while mounted: %v", err)
	}
	if v, err := c.Volume(ctx, "data"); err != nil || len(v.AttachedTo) != 2 {
		t.Fatalf("volume: %+v %v", v, err)
	}
	missing, _ := client.VolumeMounts(sandbox.Spec{ClientRequestID: "c"}, sandbox.VolumeMount{Name: "none", MountPath: "/data"})
	if _, err := c.Create(ctx, missing); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("a missing volume: %v", err)
	}
	for _, sb := range []*sandbox.Sandbox{a, b} {
		if _, err := c.Terminate(ctx, sb.ID, sb.Generation); err != nil {
			t.Fatal(err)
		}
		waitForState(t, c, sb.ID, sandbox.StateTerminated)
	}
	spec3, _ := client.VolumeMounts(sandbox.Spec{ClientRequestID: "a2"}, sandbox.VolumeMount{Name: "data", MountPath: "/mnt/d", ReadOnly: true})
	re, err := c.Recreate(ctx, a.ID, a.Generation, spec3)
	if err != nil {
		t.Fatal(err)
	}
	re = waitForState(t, c, re.ID, sandbox.StateReady)
	if res, err := c.Exec(ctx, re.ID, re.Generation, sandbox.Command{Argv: []string{"cat", "/mnt/d/note"}}); err != nil || string(res.Stdout) != "hello\n" {
		t.Fatalf("the next generation reads: %+v %v", res, err)
	}
	if _, err := c.Terminate(ctx, re.ID, re.Generation); err != nil {
		t.Fatal(err)
	}
	waitForState(t, c, re.ID, sandbox.StateTerminated)
	if err := c.DeleteVolume(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Volume(ctx, "data"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if list, err := c.Volumes(ctx); err != nil || len(list) != 0 {
		t.Fatalf("list: %+v %v", list, err)
	}
}

// volumesRefused: where the manifest says persistentVolume false (gVisor), every volume call and a
// create that mounts one is a 422 unsupported_capability, and nothing is made.
func volumesRefused(t *testing.T, c *client.Client) {
	t.Helper()
	ctx := ctxFor(t)
	if info, err := c.Runtime(ctx); err != nil || info.Provider.Capabilities.PersistentVolume {
		t.Fatalf("runtime %+v %v, want persistentVolume false", info, err)
	}
	if _, err := c.CreateVolume(ctx, "data", 16, false); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Errorf("create volume: %v, want unsupported capability", err)
	}
	if _, err := c.Volumes(ctx); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Errorf("list volumes: %v, want unsupported capability", err)
	}
	if err := c.DeleteVolume(ctx, "data"); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Errorf("delete volume: %v, want unsupported capability", err)
	}
	spec, _ := client.VolumeMounts(sandbox.Spec{ClientRequestID: "v"}, sandbox.VolumeMount{Name: "data", MountPath: "/data"})
	if _, err := c.Create(ctx, spec); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Errorf("a create mounting a volume: %v, want unsupported capability", err)
	}
	if list, err := c.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("sandboxes after the refusals: %+v %v", list, err)
	}
}

func mustCreate(t *testing.T, c *client.Client, spec sandbox.Spec) sandbox.ID {
	t.Helper()
	sb, err := c.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return sb.ID
}

func waitForState(t *testing.T, c *client.Client, id sandbox.ID, want sandbox.State) *sandbox.Sandbox {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		sb, err := c.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == want {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s, want %s", id, sb.State, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
