package agentclient_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
)

// agents is a provider's lookup of its sandboxes' agents: one client for every sandbox, or an error.
type agents struct {
	c   *agentclient.Client
	err error
}

func (a agents) Agent(_ context.Context, ref sandbox.Ref) (*agentclient.Client, error) {
	if a.err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", ref, a.err)
	}
	return a.c, nil
}

// TestDataPlaneCallsThroughItsAgents: each call goes to the client its Agents finds, and a sandbox
// Agents refuses keeps the class of that refusal.
func TestDataPlaneCallsThroughItsAgents(t *testing.T) {
	c := fake(t, agentclient.Wire{}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write([]byte("content of " + r.URL.Query().Get("path")))
	})
	ref := sandbox.Ref{ID: "sbx_a", Generation: 1}
	d := agentclient.DataPlane{Agents: agents{c: c}, ExecSlack: time.Second, CancelWait: time.Second, CallTimeout: 10 * time.Second}
	if data, err := d.ReadFile(bounded(t), ref, "f"); err != nil || string(data) != "content of f" {
		t.Fatalf("read: %q, %v", data, err)
	}
	d.Agents = agents{err: sandbox.ErrInvalidState}
	if _, err := d.ReadFile(bounded(t), ref, "f"); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("read in a sandbox Agents refuses: %v", err)
	}
	if _, err := d.Exec(bounded(t), ref, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("exec in a sandbox Agents refuses: %v", err)
	}
}
