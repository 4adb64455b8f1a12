package sandbox

import (
	"context"
	"time"
)

// Checkpoint is a saved copy of a sandbox's memory, processes and working directory, from which it
// can be resumed or a new sandbox started (CapMemorySnapshot).
type Checkpoint struct {
	ID          string     `json:"id"`
	SandboxID   ID         `json:"sandboxId"`
	Generation  Generation `json:"generation"`
	CreatedAt   time.Time  `json:"createdAt"`
	LeftRunning bool       `json:"leftRunning"`
	SizeBytes   int64      `json:"sizeBytes"`
}

// Checkpointer is implemented by a provider that writes checkpoints. A checkpoint without leaveRunning
// stops the sandbox at it: the provider then observes it paused, and its Resume restores it.
type Checkpointer interface {
	// Checkpoint writes a checkpoint of the ready sandbox ref. Errors: ErrNotFound, ErrInvalidState,
	// ErrUnsupportedCapability, ErrProviderUnavailable, ErrProviderProtocol.
	Checkpoint(ctx context.Context, ref Ref, leaveRunning bool) (Checkpoint, error)
	// Checkpoints lists those of sandbox id, oldest first.
	Checkpoints(ctx context.Context, id ID) ([]Checkpoint, error)
}
