package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// Streamed files (docs/files.md): Upload and Download of files of any size with resume and SHA-256
// verification end to end, UploadArchive and DownloadArchive of directories as tar streams, and
// WatchFiles of a directory's changes.

// ErrDigestMismatch: the bytes that arrived are not the bytes that were sent.
var ErrDigestMismatch = errors.New("digest mismatch")

// UploadOptions tune Upload.
type UploadOptions struct {
	// Size is the content's length; 0 with a source that is not an io.Seeker means unknown.
	Size int64
	// Digest is the SHA-256 of the content, when the caller knows it: it goes in the request's head.
	// Otherwise Upload computes it as it sends and sends it as the body's trailer: either way the
	// server refuses bytes that arrive changed and keeps the old file.
	Digest []byte
	// Upload names the upload for resuming; empty: a random name when the source can be sought.
	Upload string
	// Retries bounds the resumes after a broken connection (default 5; -1: none).
	Retries int
	// Progress, when set, is called with the bytes sent so far.
	Progress func(sent int64)
}

// Upload writes the file at path of generation gen from src, atomically: the old file stays until
// the new one is whole and its digest checked. From a src that is an io.Seeker (a file), a broken
// connection is resumed from the offset the sandbox holds. Without opts.Digest, src is read ahead
// of the send by a goroutine; after an error, one still in a Read of a src that is no io.Seeker
// (a pipe) ends when that Read returns. Errors: ErrInvalidRequest (a digest
// mismatch among them), ErrRequestTooLarge (the sandbox's disk is full), ErrNotFound,
// ErrGenerationConflict, ErrInvalidState, ErrUnsupportedCapability, ErrProviderUnavailable,
// ErrDigestMismatch.
func (c *Client) Upload(ctx context.Context, id sandbox.ID, gen sandbox.Generation, path string, src io.Reader, opts UploadOptions) (*api.RawFileWritten, error) {
	seeker, _ := src.(io.Seeker)
	size := opts.Size
	start := int64(0)
	if seeker != nil {
		var err error
		if start, err = seeker.Seek(0, io.SeekCurrent); err != nil {
			seeker = nil
		} else if size == 0 {
			end, err := seeker.Seek(0, io.SeekEnd)
			if err != nil {
				return nil, err
			}
			size = end - start
		}
	}
	known := size > 0 || seeker != nil
	digest := opts.Digest
	upload := opts.Upload
	if upload == "" && seeker != nil {
		upload = newUploadID()
	}
	retries := opts.Retries
	if retries == 0 {
		retries = 5
	}
	var offset int64
	for attempt := 0; ; attempt++ {
		var hashed *hashedBody // the body when the digest is sent as the trailer
		if digest == nil {
			h := sha256.New()
			if seeker != nil {
				if err := hashPrefix(seeker, src, start, offset, h); err != nil {
					return nil, fmt.Errorf("upload %s: %w", path, err)
				}
			}
			remaining := int64(-1)
			if known {
				remaining = size - offset
			}
			hashed = newHashedBody(src, remaining, h, offset, opts.Progress)
		} else if seeker != nil {
			if _, err := seeker.Seek(start+offset, io.SeekStart); err != nil {
				return nil, err
			}
		}
		res, err := c.putRaw(ctx, id, gen, path, upload, offset, digest, src, size, known, hashed, opts.Progress)
		if err == nil {
			want := digest
			if hashed != nil {
				hashed.wait() // the body has ended: its hash is whole
				want = hashed.h.Sum(nil)
			}
			if res.Digest != formatDigest(want) {
				return res, fmt.Errorf("upload %s: the sandbox wrote %s, sent %s: %w", path, res.Digest, formatDigest(want), ErrDigestMismatch)
			}
			return res, nil
		}
		if hashed != nil && seeker != nil {
			hashed.wait() // src is this goroutine's again (a file's read does not block)
		} else if hashed != nil {
			hashed.Close() // a read of src under way ends as it returns
		}
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Status != http.StatusBadGateway && apiErr.Status != http.StatusServiceUnavailable {
			return nil, err
		}
		if ctx.Err() != nil || seeker == nil || upload == "" || retries < 0 || attempt >= retries {
			return nil, err
		}
		if serr := sleep(ctx, c.backoff(attempt+1)); serr != nil {
			return nil, err
		}
		st, serr := c.UploadState(ctx, id, gen, path, upload)
		if serr != nil {
			return nil, fmt.Errorf("%w (and its state: %v)", err, serr)
		}
		offset = min(st.Offset, size)
	}
}

// hashPrefix seeks src to start+offset, hashing into h the offset bytes before: the trailer of an
// upload resumed at offset is the digest of the whole file.
func hashPrefix(seeker io.Seeker, src io.Reader, start, offset int64, h hash.Hash) error {
	if offset > 0 {
		if _, err := seeker.Seek(start, io.SeekStart); err != nil {
			return err
		}
		buf := uploadBufs.Get().(*[]byte)
		n, err := io.CopyBuffer(h, io.LimitReader(src, offset), *buf)
		uploadBufs.Put(buf)
		if err == nil && n != offset {
			err = fmt.Errorf("the source ended after %d bytes, before the %d the sandbox holds", n, offset)
		}
		if err != nil {
			return fmt.Errorf("hashing the bytes sent before: %w", err)
		}
	}
	_, err := seeker.Seek(start+offset, io.SeekStart)
	return err
}

// putRaw sends one PUT of the upload from offset: with digest, from src in its header; without,
// hashed (a hashedBody) with the digest in its trailer.
func (c *Client) putRaw(ctx context.Context, id sandbox.ID, gen sandbox.Generation, path, upload string, offset int64, digest []byte,
	src io.Reader, size int64, known bool, hashed *hashedBody, progress func(int64)) (*api.RawFileWritten, error) {
	q := genQuery(gen, path)
	if upload != "" {
		q.Set("upload", upload)
	}
	if offset > 0 {
		q.Set("offset", strconv.FormatInt(offset, 10))
	}
	req, err := c.newRequest(ctx, call{method: "PUT", path: sandboxPath(id) + "/files/raw", query: q}, nil)
	if err != nil {
		return nil, err
	}
	req.GetBody = nil
	req.Header.Set("Content-Type", "application/octet-stream")
	switch {
	case hashed != nil:
		req.Body = hashed
		req.ContentLength = -1 // chunked: the trailer follows the last chunk
		req.Trailer = hashed.trailer
	case known:
		req.Body = io.NopCloser(io.LimitReader(&countingReader{r: src, n: offset, progress: progress}, size-offset))
		req.ContentLength = size - offset
		if req.ContentLength == 0 {
			req.Body = http.NoBody
		}
	default:
		req.Body = io.NopCloser(&countingReader{r: src, n: offset, progress: progress})
		req.ContentLength = -1
	}
	if digest != nil {
		req.Header.Set("Repr-Digest", formatDigest(digest))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("PUT %s: %w", req.URL.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, decodeError(resp)
	}
	var out api.RawFileWritten
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&out); err != nil {
		return nil, fmt.Errorf("PUT %s: decoding the response: %w", req.URL.Path, err)
	}
	return &out, nil
}

// countingReader counts and reports what passes.
type countingReader struct {
	r        io.Reader
	n        int64
	progress func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.n += int64(n)
		if c.progress != nil {
			c.progress(c.n)
		}
	}
	return n, err
}

func newUploadID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func formatDigest(sum []byte) string {
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum) + ":"
}

// parseDigest reads the sha-256 of a Repr-Digest value; nil when there is none.
func parseDigest(v string) []byte {
	for _, m := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(m), "=")
		if !ok || k != "sha-256" || len(val) < 2 || val[0] != ':' || val[len(val)-1] != ':' {
			continue
		}
		if sum, err := base64.StdEncoding.DecodeString(val[1 : len(val)-1]); err == nil && len(sum) == sha256.Size {
			return sum
		}
	}
	return nil
}

// UploadState says how many bytes of an upload the sandbox holds.
func (c *Client) UploadState(ctx context.Context, id sandbox.ID, gen sandbox.Generation, path, upload string) (*api.UploadState, error) {
	q := genQuery(gen, path)
	q.Set("upload", upload)
	var out api.UploadState
	if err := c.do(ctx, call{method: "GET", path: sandboxPath(id) + "/files/upload", query: q, safe: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DownloadOptions tune Download.
type DownloadOptions struct {
	// Retries bounds the resumes after a broken connection (default 5; -1: none).
	Retries int
	// Progress, when set, is called with the bytes received so far.
	Progress func(received int64)
}

// Downloaded is what Download read.
type Downloaded struct {
	Size   int64
	Digest []byte
}

// Download writes the file at path of generation gen to w, resuming a broken connection with a
// Range read from the byte reached, and checks the whole file's SHA-256 against the server's
// Repr-Digest. Errors: as ReadFile, and ErrDigestMismatch (also when the file changed between two
// parts of a resumed read).
func (c *Client) Download(ctx context.Context, id sandbox.ID, gen sandbox.Generation, path string, w io.Writer, opts DownloadOptions) (*Downloaded, error) {
	retries := opts.Retries
	if retries == 0 {
		retries = 5
	}
	h := sha256.New()
	var got, size int64 = 0, -1
	var want []byte
	for attempt := 0; ; attempt++ {
		resp, err := c.getRaw(ctx, id, gen, path, got, attempt > 0)
		if err == nil {
			d := parseDigest(resp.Header.Get("Repr-Digest"))
			switch {
			case d == nil:
				err = fmt.Errorf("download %s: the answer has no Repr-Digest: %w", path, sandbox.ErrProviderProtocol)
			case want != nil && !bytes.Equal(d, want):
				err = fmt.Errorf("download %s: the file changed while it was read: %w", path, ErrDigestMismatch)
			}
			if err != nil {
				resp.Body.Close()
				return nil, err
			}
			want = d
			if size < 0 {
				size = resp.ContentLength
			}
			var n int64
			n, err = io.CopyBuffer(io.MultiWriter(w, h), &countingReader{r: resp.Body, n: got, progress: opts.Progress}, make([]byte, 1<<20))
			resp.Body.Close()
			got += n
			if err == nil && got == size {
				if sum := h.Sum(nil); !bytes.Equal(sum, want) {
					return nil, fmt.Errorf("download %s: received %x, the sandbox said %x: %w", path, sum, want, ErrDigestMismatch)
				}
				return &Downloaded{Size: size, Digest: want}, nil
			}
			if err == nil {
				err = fmt.Errorf("download %s: %d of %d bytes: %w", path, got, size, io.ErrUnexpectedEOF)
			}
		}
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Status != http.StatusBadGateway && apiErr.Status != http.StatusServiceUnavailable {
			return nil, err
		}
		if ctx.Err() != nil || retries < 0 || attempt >= retries || size < 0 {
			return nil, err
		}
		if serr := sleep(ctx, c.backoff(attempt+1)); serr != nil {
			return nil, err
		}
	}
}

// getRaw opens a raw read from byte from (a ranged one past 0, asking for the whole file's digest).
func (c *Client) getRaw(ctx context.Context, id sandbox.ID, gen sandbox.Generation, path string, from int64, ranged bool) (*http.Response, error) {
	req, err := c.newRequest(ctx, call{method: "GET", path: sandboxPath(id) + "/files/raw", query: genQuery(gen, path)}, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/octet-stream")
	if ranged {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(from, 10)+"-")
		req.Header.Set("Want-Repr-Digest", "sha-256=1")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", req.URL.Path, err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	if ranged && resp.StatusCode != http.StatusPartialContent {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: a range was answered whole: %w", req.URL.Path, sandbox.ErrProviderProtocol)
	}
	return resp, nil
}

// ReadRange opens length bytes of the file at path from start (length -1: to the end); the caller
// closes it. A range past the end is ErrInvalidRequest.
func (c *Client) ReadRange(ctx context.Context, id sandbox.ID, gen sandbox.Generation, path string, start, length int64) (io.ReadCloser, error) {
	req, err := c.newRequest(ctx, call{method: "GET", path: sandboxPath(id) + "/files/raw", query: genQuery(gen, path)}, nil)
	if err != nil {
		return nil, err
	}
	r := "bytes=" + strconv.FormatInt(start, 10) + "-"
	if length >= 0 {
		r += strconv.FormatInt(start+length-1, 10)
	}
	req.Header.Set("Range", r)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", req.URL.Path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp.Body, nil
}

// UploadArchive extracts the tar stream src into the directory dir of generation gen.
func (c *Client) UploadArchive(ctx context.Context, id sandbox.ID, gen sandbox.Generation, dir string, src io.Reader) (*api.ArchiveWritten, error) {
	req, err := c.newRequest(ctx, call{method: "PUT", path: sandboxPath(id) + "/files/archive", query: genQuery(gen, dir)}, nil)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(src)
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("PUT %s: %w", req.URL.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, decodeError(resp)
	}
	var out api.ArchiveWritten
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&out); err != nil {
		return nil, fmt.Errorf("PUT %s: decoding the response: %w", req.URL.Path, err)
	}
	return &out, nil
}

// DownloadArchive opens the directory dir of generation gen as a tar stream; the caller closes it.
// A stream cut short lacks the tar's end, which archive/tar reports.
func (c *Client) DownloadArchive(ctx context.Context, id sandbox.ID, gen sandbox.Generation, dir string) (io.ReadCloser, error) {
	resp, err := c.send(ctx, call{method: "GET", path: sandboxPath(id) + "/files/archive", query: genQuery(gen, dir),
		header: http.Header{"Accept": {"application/x-tar"}}, safe: true})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// FileEvent is one event of a watch: Kind is a change's (created, modified, deleted, renamed),
// "overflow" (changes were dropped: read the directory again), "heartbeat" with State (StreamPaused:
// the sandbox is paused, and the watch waits for its resume; StreamRunning: it runs again), or "end"
// with Reason (the ProcessEnd... reasons) and Message.
type FileEvent struct {
	Kind    string `json:"kind"`
	Path    string `json:"path,omitempty"`
	From    string `json:"from,omitempty"`
	Dir     bool   `json:"dir,omitempty"`
	State   string `json:"state,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// FileWatch is an open watch of a directory.
type FileWatch struct {
	body   io.ReadCloser
	br     *bufio.Reader
	done   bool
	paused atomic.Bool
}

// WatchFiles opens a watch of the directory dir of generation gen (recursive: and every directory
// under it). Errors: ErrNotFound, ErrInvalidRequest (not a directory), ErrInvalidState (too many
// watches, or not ready), ErrGenerationConflict, ErrUnsupportedCapability.
func (c *Client) WatchFiles(ctx context.Context, id sandbox.ID, gen sandbox.Generation, dir string, recursive bool) (*FileWatch, error) {
	q := genQuery(gen, dir)
	if recursive {
		q.Set("recursive", "true")
	}
	resp, err := c.send(ctx, call{method: "GET", path: sandboxPath(id) + "/files/watch", query: q,
		header: http.Header{"Accept": {"text/event-stream"}}})
	if err != nil {
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, &protocolError{fmt.Sprintf("watch has content type %q", ct)}
	}
	return &FileWatch{body: resp.Body, br: bufio.NewReaderSize(resp.Body, 16<<10)}, nil
}

// Next returns the next event; after the end event it returns io.EOF. A connection that ends
// without an end event is io.ErrUnexpectedEOF.
func (w *FileWatch) Next() (FileEvent, error) {
	if w.done {
		return FileEvent{}, io.EOF
	}
	var ev FileEvent
	var perr error
	got := false
	_, _, err := readSSE(w.br, func(name, data string) bool {
		got = true
		perr = json.Unmarshal([]byte(data), &ev)
		switch name {
		case "change", "overflow":
		case "heartbeat":
			ev = FileEvent{Kind: name, State: ev.State}
			w.paused.Store(ev.State == StreamPaused)
		case "end":
			ev = FileEvent{Kind: "end", Reason: ev.Reason, Message: ev.Message}
			w.done = true
		default:
			perr = fmt.Errorf("unknown event %q", name)
		}
		return false
	})
	switch {
	case perr != nil:
		return FileEvent{}, &protocolError{"watch: " + perr.Error()}
	case got:
		return ev, nil
	case err == nil:
		return FileEvent{}, io.ErrUnexpectedEOF
	}
	return FileEvent{}, err
}

// All is the watch's events as an iterator, to its end event or the first error.
func (w *FileWatch) All() iter.Seq2[FileEvent, error] {
	return func(yield func(FileEvent, error) bool) {
		for {
			ev, err := w.Next()
			if err == io.EOF {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// Paused reports whether the watch's last heartbeat said the sandbox was paused. It may be called
// from any goroutine.
func (w *FileWatch) Paused() bool { return w.paused.Load() }

// Close ends the watch.
func (w *FileWatch) Close() error { return w.body.Close() }
