package api

import (
	"time"

	"github.com/sandboxd/sandbox"
)

// SandboxStats is the answer of GET /v1/sandboxes/{sandboxId}/stats (StatsSandbox in extensions.yaml):
// what a ready or paused sandbox uses now. A figure the provider cannot read is left out.
type SandboxStats struct {
	SandboxID  sandbox.ID         `json:"sandboxId"`
	Generation sandbox.Generation `json:"generation"`
	State      sandbox.State      `json:"state"`
	ObservedAt time.Time          `json:"observedAt"`
	sandbox.Usage
}
