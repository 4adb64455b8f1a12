package api

import "github.com/sandboxd/sandbox"

// CommandRequest is the body of POST /v1/sandboxes/{sandboxId}/commands. A nil TimeoutSeconds or
// MaxOutputBytes is left out, and means the contract's default. The answer is a sandbox.CommandResult.
type CommandRequest struct {
	ExpectedGeneration sandbox.Generation `json:"expectedGeneration"`
	Argv               []string           `json:"argv"`
	Cwd                string             `json:"cwd,omitempty"`
	Env                map[string]string  `json:"env,omitempty"`
	TimeoutSeconds     *float64           `json:"timeoutSeconds,omitempty"`
	MaxOutputBytes     *int               `json:"maxOutputBytes,omitempty"`
}
