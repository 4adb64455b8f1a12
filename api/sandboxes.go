package api

import "github.com/sandboxd/sandbox"

// Health is the body of GET /healthz.
type Health struct {
	Status string `json:"status"`
}

// RuntimeInfo is the body of GET /v1/runtime.
type RuntimeInfo struct {
	ProtocolVersion string           `json:"protocolVersion"`
	Provider        sandbox.Manifest `json:"provider"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []*sandbox.Sandbox `json:"sandboxes"`
}

// GenerationRequest is the body of pause, resume and terminate.
type GenerationRequest struct {
	ExpectedGeneration sandbox.Generation `json:"expectedGeneration"`
}

// RecreateRequest is the body of recreate.
type RecreateRequest struct {
	ExpectedGeneration sandbox.Generation `json:"expectedGeneration"`
	Spec               sandbox.Spec       `json:"spec"`
}
