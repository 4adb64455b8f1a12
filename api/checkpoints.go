package api

import "github.com/sandboxd/sandbox"

// CheckpointRequest is the body of POST /v1/sandboxes/{sandboxId}/actions/checkpoint.
type CheckpointRequest struct {
	ExpectedGeneration sandbox.Generation `json:"expectedGeneration"`
	LeaveRunning       bool               `json:"leaveRunning,omitempty"`
}

// CheckpointResult is its answer: the checkpoint written and the sandbox's state after it (paused, or
// ready when left running).
type CheckpointResult struct {
	Checkpoint sandbox.Checkpoint `json:"checkpoint"`
	State      sandbox.State      `json:"state"`
}

// CheckpointList is the answer of GET /v1/sandboxes/{sandboxId}/checkpoints.
type CheckpointList struct {
	Checkpoints []sandbox.Checkpoint `json:"checkpoints"`
}
