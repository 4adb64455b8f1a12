package api

import "github.com/sandboxd/sandbox"

// FileWriteRequest is the body of PUT /v1/sandboxes/{sandboxId}/files/content.
type FileWriteRequest struct {
	ExpectedGeneration sandbox.Generation `json:"expectedGeneration"`
	Path               string             `json:"path"`
	ContentBase64      string             `json:"contentBase64"`
}

// FileContent is the body of a file read, and of a write with an empty contentBase64 (the content is not
// echoed back).
type FileContent struct {
	Path          string `json:"path"`
	ContentBase64 string `json:"contentBase64"`
	Size          int64  `json:"size"`
}

// FileList is the body of GET /v1/sandboxes/{sandboxId}/files/entries.
type FileList struct {
	Entries []sandbox.FileEntry `json:"entries"`
}
