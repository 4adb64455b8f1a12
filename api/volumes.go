package api

import "github.com/sandboxd/sandbox"

// VolumeCreate is the body of POST /v1/volumes.
type VolumeCreate struct {
	Name    string `json:"name"`
	SizeMiB int64  `json:"sizeMiB"`
	Shared  bool   `json:"shared,omitempty"`
}

// VolumeList is the answer of GET /v1/volumes.
type VolumeList struct {
	Volumes []sandbox.Volume `json:"volumes"`
}
