package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestOCIImageWarmPool: a daemon run with --oci-warm-pool-image keeps a started container of the image
// (pulled at start), a create of the image takes it, and the image cannot be removed while the pool
// holds it (409, saying so).
func TestOCIImageWarmPool(t *testing.T) {
	needOCI(t)
	ctx := context.Background()
	reg := imagetest.StartRegistry(t)
	tagged, _ := reg.Push(t, "pool/busybox:1", imagetest.BusyboxImage(t, "from the pool"))
	dataDir := testenv.StateDir(t)
	removeContainersAtEnd(t, dataDir)
	d := startDaemon(t, dataDir, "--provider", "oci", "--oci-warm-pool", "0", "--insecure-registry", reg.Host,
		"--oci-warm-pool-image", tagged+"=1")
	// The pools' figures: the image's entry, once its agent answers, is the only idle one.
	idle := func() {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			resp, err := http.Get(d.url + "/metrics")
			if err == nil {
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if strings.Contains(string(raw), "\nsandboxd_warm_pool_idle{runtime_class=\"runc\"} 1\n") {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the image's pool never filled: %v", err)
			}
		}
	}
	idle()
	var sb sandbox.Sandbox
	if st := call(ctx, "POST", d.url+"/v1/sandboxes", map[string]any{"clientRequestId": "pooled", "image": tagged}, &sb); st != 201 {
		t.Fatalf("create: %d %+v", st, sb)
	}
	waitFor(t, d.url, sb.ID, sandbox.StateReady)
	if c := containerOf(t, dataDir, sb); !strings.HasPrefix(c, "pool-") {
		t.Fatalf("the sandbox did not take the image's pool container: %s", c)
	}
	var res sandbox.CommandResult
	if st := call(ctx, "POST", d.url+"/v1/sandboxes/"+string(sb.ID)+"/commands", map[string]any{"expectedGeneration": 1,
		"argv": []string{"sh", "-c", "cat /etc/greeting; echo $GREETING"}}, &res); st != 200 || res.Stdout != "from the pool\nfrom the pool\n" {
		t.Fatalf("exec: %d %+v", st, res)
	}
	if st := call(ctx, "POST", d.url+"/v1/sandboxes/"+string(sb.ID)+"/actions/terminate", map[string]any{"expectedGeneration": 1}, nil); st != 200 {
		t.Fatalf("terminate: %d", st)
	}
	waitFor(t, d.url, sb.ID, sandbox.StateTerminated)
	idle()
	var refused struct {
		Error struct{ Code, Message string }
	}
	if st := call(ctx, "POST", d.url+"/v1/images/remove", map[string]any{"reference": tagged}, &refused); st != 409 ||
		!strings.Contains(refused.Error.Message, "warm pool") {
		t.Fatalf("remove the pooled image: %d %+v", st, refused)
	}
}
