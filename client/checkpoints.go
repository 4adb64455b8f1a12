package client

import (
	"context"
	"encoding/json"
	"maps"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// Checkpoint writes a checkpoint of the ready sandbox id, fenced by gen. Without leaveRunning the
// sandbox is paused at it, and Resume restores it. Errors: ErrNotFound, ErrGenerationConflict,
// ErrInvalidState, ErrUnsupportedCapability (no memorySnapshot), ErrProviderUnavailable.
func (c *Client) Checkpoint(ctx context.Context, id sandbox.ID, gen sandbox.Generation, leaveRunning bool) (*api.CheckpointResult, error) {
	var res api.CheckpointResult
	body := api.CheckpointRequest{ExpectedGeneration: gen, LeaveRunning: leaveRunning}
	if err := c.do(ctx, call{method: "POST", path: sandboxPath(id) + "/actions/checkpoint", body: body}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Checkpoints lists the checkpoints taken of sandbox id, oldest first.
func (c *Client) Checkpoints(ctx context.Context, id sandbox.ID) ([]sandbox.Checkpoint, error) {
	var list api.CheckpointList
	if err := c.do(ctx, call{method: "GET", path: sandboxPath(id) + "/checkpoints", safe: true}, &list); err != nil {
		return nil, err
	}
	return list.Checkpoints, nil
}

// ForkSpec returns spec started from checkpoint ckpt of sandbox id (spec.extensions["sandboxd.checkpoint"]).
func ForkSpec(spec sandbox.Spec, id sandbox.ID, ckpt string) sandbox.Spec {
	raw, _ := json.Marshal(map[string]string{"sandboxId": string(id), "checkpoint": ckpt})
	ext := make(map[string]json.RawMessage, len(spec.Extensions)+1)
	maps.Copy(ext, spec.Extensions)
	ext["sandboxd.checkpoint"] = raw
	spec.Extensions = ext
	return spec
}
