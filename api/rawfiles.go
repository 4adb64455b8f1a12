package api

// RawFileWritten is the answer of PUT /v1/sandboxes/{id}/files/raw: the file's size and the SHA-256
// of its bytes, as RFC 9530 writes it ("sha-256=:base64:").
type RawFileWritten struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
}

// UploadState is the answer of GET /v1/sandboxes/{id}/files/upload: how many bytes of the upload
// the sandbox holds; a PUT with offset=Offset goes on from there.
type UploadState struct {
	Path   string `json:"path"`
	Upload string `json:"upload"`
	Offset int64  `json:"offset"`
}

// ArchiveWritten is the answer of PUT /v1/sandboxes/{id}/files/archive.
type ArchiveWritten struct {
	Path    string `json:"path"`
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"`
}
