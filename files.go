package sandbox

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Streamed file transfer and file watch (api/extensions.yaml, docs/files.md): files of any size the
// sandbox's disk holds, directories as tar streams, and a stream of the changes under a directory.

// FilePut is one raw write of a file: Length bytes of body, to be found at Offset of the file.
type FilePut struct {
	Path string
	// Upload names a resumable upload (UploadIDValid): its partial file is kept when the body breaks
	// off, and a later put with the same Upload goes on from Offset. Empty: a one-shot write whose
	// partial is removed on any failure.
	Upload string
	Offset int64  // where the body starts; non-zero only with Upload
	Length int64  // the body's length; -1 when the client did not say
	Digest []byte // the SHA-256 of the whole file the client expects; nil: not checked
	// TrailerDigest, when set, is the SHA-256 of the whole file the client sent after the body (an
	// HTTP trailer): called once the body has returned io.EOF, it returns nil when the client sent
	// none, and an error of class ErrInvalidRequest for a malformed or unexpected trailer. It is
	// checked as Digest is, before the file is replaced; a Digest it disagrees with is refused.
	TrailerDigest func() ([]byte, error)
}

// FileWritten is what a raw write, or an upload's state, says of the file.
type FileWritten struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Digest []byte `json:"-"` // SHA-256 of the whole file
}

// FileRange is a byte range of a file: Length -1 reads to its end.
type FileRange struct {
	Start, Length int64
}

// ParseFileRange reads "START-END" (inclusive, as in HTTP's Range) or "START-".
func ParseFileRange(spec string) (*FileRange, error) {
	a, b, ok := strings.Cut(spec, "-")
	start, err := strconv.ParseInt(a, 10, 64)
	if !ok || err != nil || start < 0 {
		return nil, fmt.Errorf("range %.64q: %w", spec, ErrInvalidRequest)
	}
	if b == "" {
		return &FileRange{Start: start, Length: -1}, nil
	}
	end, err := strconv.ParseInt(b, 10, 64)
	if err != nil || end < start {
		return nil, fmt.Errorf("range %.64q: %w", spec, ErrInvalidRequest)
	}
	return &FileRange{Start: start, Length: end - start + 1}, nil
}

// FileRead is an open raw read: Length bytes from Start of a file of Size bytes.
type FileRead struct {
	io.ReadCloser
	Size, Start, Length int64
	// Digest is the SHA-256 of the whole file, when known before its bytes are sent (always for a
	// read of the whole file, see docs/files.md); nil otherwise.
	Digest []byte
}

// ArchiveWritten is what an archive's extraction wrote.
type ArchiveWritten struct {
	Path    string `json:"path"`
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"`
}

// FileChangeKind is the kind of a change a watch reports.
type FileChangeKind string

// The kinds of change. FileOverflow says changes were dropped: what the client knows of the directory
// may be stale and should be read again.
const (
	FileCreated  FileChangeKind = "created"
	FileModified FileChangeKind = "modified"
	FileDeleted  FileChangeKind = "deleted"
	FileRenamed  FileChangeKind = "renamed"
	FileOverflow FileChangeKind = "overflow"
)

// FileChange is one change under a watched directory. Path is the watched path joined with the
// changed entry's name, as the client would pass it back; From is the old path of a rename.
type FileChange struct {
	Kind FileChangeKind `json:"kind"`
	Path string         `json:"path,omitempty"`
	From string         `json:"from,omitempty"`
	Dir  bool           `json:"dir,omitempty"`
}

// FileWatch is an open watch of a directory. Changes is closed when the watch ends, after which Err
// says why (nil: Close was called).
type FileWatch interface {
	Changes() <-chan FileChange
	Err() error
	Close() error
}

// A WatchHolder is a FileWatch whose provider ends it when the sandbox says nothing for a while (its
// agent's heartbeats stopped): Hold(true) suspends that bound while the sandbox is paused, its agent
// frozen, and Hold(false) starts it again, so that a watch outlives a pause of any length.
type WatchHolder interface {
	Hold(paused bool)
}

// Bounds of streamed files.
const (
	// MaxWatches bounds the watches open at once on one sandbox; one more is ErrInvalidState.
	MaxWatches = 8
	// MaxArchiveEntries bounds the entries of one archive, in or out.
	MaxArchiveEntries = 1 << 20
	// MaxArchiveName bounds an archive entry's name and link target (PATH_MAX).
	MaxArchiveName = 4096
)

// UploadIDValid reports whether s can name an upload: 8 to 64 of [A-Za-z0-9_-].
func UploadIDValid(s string) bool {
	if len(s) < 8 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// FileStreamer is a provider that streams files in and out of a sandbox, and watches its directories.
// Paths resolve as for FileSystem. A write is atomic: the old file stays until the new one is whole
// and its digest checked. A write that finds the sandbox's disk full is ErrRequestTooLarge.
type FileStreamer interface {
	PutFile(ctx context.Context, ref Ref, put FilePut, body io.Reader) (FileWritten, error)
	// UploadState says how many bytes the partial file of an upload holds (0: none).
	UploadState(ctx context.Context, ref Ref, path, upload string) (FileWritten, error)
	// GetFile opens the regular file at path for reading; rng nil reads it whole. wantDigest asks
	// for the digest of the whole file even with a range.
	GetFile(ctx context.Context, ref Ref, path string, rng *FileRange, wantDigest bool) (*FileRead, error)
	PutArchive(ctx context.Context, ref Ref, dir string, body io.Reader) (ArchiveWritten, error)
	GetArchive(ctx context.Context, ref Ref, dir string) (io.ReadCloser, error)
	WatchFiles(ctx context.Context, ref Ref, dir string, recursive bool) (FileWatch, error)
}
