package protocol

// The agent's routes of streamed files (protocol 2). Bodies travel as they are, never whole in
// memory: a raw write's body is the file's bytes from its offset, a raw read's answer the bytes of
// its range; an archive is a tar stream; a watch answers one JSON line (WatchLine) per change.
const (
	// PUT ?path=&upload=&offset=, body the bytes, HeaderDigest the whole file's expected SHA-256:
	// answers FileWritten. GET ?path=, HeaderRange "START-END" (END may be empty), answers the bytes
	// with HeaderSize and, when known, HeaderDigest.
	PathRawFile = "/v1/files/raw"
	PathUpload  = "/v1/files/upload"  // GET ?path=&upload=: FileWritten of the partial (size 0: none)
	PathArchive = "/v1/files/archive" // PUT ?path=DIR, a tar body: ArchiveWritten. GET ?path=DIR: a tar stream
	PathWatch   = "/v1/files/watch"   // GET ?path=DIR&recursive=1: WatchLine lines

	// HeaderDigest carries a SHA-256 in hex. A raw write whose digest is known only once its body
	// has been sent declares it as a trailer ("Trailer: Sandbox-Digest") and sends its body chunked:
	// the agent checks it, and a header of the same name it must agree with, before the rename.
	HeaderDigest = "Sandbox-Digest"
	// HeaderRange asks a raw read for bytes START to END inclusive, or START to the end.
	HeaderRange = "Sandbox-Range"
	// HeaderWantDigest asks a ranged read for the whole file's digest as well.
	HeaderWantDigest = "Sandbox-Want-Digest"
	// HeaderSize is the size of the whole file a raw read reads from; HeaderStart where its bytes start.
	HeaderSize  = "Sandbox-Size"
	HeaderStart = "Sandbox-Start"

	// WatchMediaType is the type of a watch's answer: one WatchLine of JSON a line.
	WatchMediaType = "application/x-ndjson"
)

// Bounds of the file streams.
const (
	// MaxWatchLine bounds one line of a watch's answer: two paths and a little more.
	MaxWatchLine = 3*4096 + 256
	// WatchHeartbeat is how often a watch says it is alive when nothing changes.
	WatchHeartbeatSeconds = 10
	// MaxFileWrittenBytes bounds the JSON answer of a raw write or an upload's state.
	MaxFileWrittenBytes = 8 << 10
)

// FileWritten answers a raw write and an upload's state.
type FileWritten struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Digest string `json:"digest,omitempty"` // hex SHA-256 of the whole file (a write's answer)
}

// ArchiveWritten answers an archive's extraction.
type ArchiveWritten struct {
	Path    string `json:"path"`
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"`
}

// WatchLine is one line of a watch: a change, "heartbeat", "overflow", or "end" with the reason
// the watch ended (the directory went away, or an error).
type WatchLine struct {
	Kind    string `json:"kind"`
	Path    string `json:"path,omitempty"`
	From    string `json:"from,omitempty"`
	Dir     bool   `json:"dir,omitempty"`
	Message string `json:"message,omitempty"`
}
