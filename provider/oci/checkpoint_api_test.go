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
	"github.com/sandboxd/sandbox/internal/testenv"
	teststack "github.com/sandboxd/sandbox/internal/testenv/stack"
)

// TestCheckpointAPI: checkpoints through the HTTP API on gVisor, every answer checked against
// api/extensions.yaml: fenced by the generation (409), a checkpoint pauses the sandbox and resume
// restores it with its counter going on, a create from a checkpoint is a fork, and one that names a
// checkpoint that does not exist is a 400 before anything is made.
func TestCheckpointAPI(t *testing.T) {
	cfg := testConfig(t, testenv.StateDir(t))
	cfg.Runtime = gvisorRuntime(t)
	p := newProviderWith(t, cfg)
	st := teststack.New(t, p)
	c, err := client.New(st.URL, client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitState := func(id sandbox.ID, want sandbox.State) *sandbox.Sandbox {
		t.Helper()
		for {
			sb, err := c.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if sb.State == want {
				return sb
			}
			if sb.State == sandbox.StateFailed || ctx.Err() != nil {
				t.Fatalf("sandbox %s is %s (%+v), want %s", id, sb.State, sb.Failure, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	sb, err := c.Create(ctx, sandbox.Spec{ClientRequestID: "src"})
	if err != nil {
		t.Fatal(err)
	}
	sb = waitState(sb.ID, sandbox.StateReady)
	proc, err := p.StartProcess(ctx, sb.Ref(), sandbox.ProcessSpec{Argv: []string{"python3", "-u", "-c", counter}})
	if err != nil {
		t.Fatal(err)
	}
	before := waitCount(t, p, sb.Ref(), proc.PID, 3)

	if _, err := c.Checkpoint(ctx, sb.ID, sb.Generation+1, false); !errors.Is(err, sandbox.ErrGenerationConflict) {
		t.Fatalf("checkpoint of another generation: %v, want a generation conflict", err)
	}
	res, err := c.Checkpoint(ctx, sb.ID, sb.Generation, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != sandbox.StatePaused || res.Checkpoint.SandboxID != sb.ID || res.Checkpoint.SizeBytes <= 0 {
		t.Fatalf("checkpoint %+v", res)
	}
	if _, err := c.Checkpoint(ctx, sb.ID, sb.Generation, true); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Errorf("checkpoint of a paused sandbox: %v, want invalid state", err)
	}
	list, err := c.Checkpoints(ctx, sb.ID)
	if err != nil || len(list) != 1 || list[0].ID != res.Checkpoint.ID {
		t.Fatalf("checkpoints %+v %v", list, err)
	}
	if _, err := c.Resume(ctx, sb.ID, sb.Generation); err != nil {
		t.Fatal(err)
	}
	waitState(sb.ID, sandbox.StateReady)
	consecutive(t, "after resume", waitCount(t, p, sb.Ref(), proc.PID, before[len(before)-1]+3))

	f, err := c.Create(ctx, client.ForkSpec(sandbox.Spec{ClientRequestID: "fork"}, sb.ID, res.Checkpoint.ID))
	if err != nil {
		t.Fatal(err)
	}
	f = waitState(f.ID, sandbox.StateReady)
	consecutive(t, "the fork", waitCount(t, p, f.Ref(), proc.PID, before[len(before)-1]+3))

	if _, err := c.Create(ctx, client.ForkSpec(sandbox.Spec{ClientRequestID: "nothing"}, sb.ID, "ckpt_0123456789abcdef")); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Errorf("a fork of a checkpoint that does not exist: %v, want invalid request", err)
	}
}
