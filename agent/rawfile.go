package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/fsroot"
)

// Files streams the files of one sandbox (docs/files.md): raw writes, each to a temporary file beside
// its target renamed over it once whole and its digest checked; resumable uploads, whose partial file
// is named by the upload (partialName) and outlives a body that broke off; raw reads with the
// digest of the whole file; archives (archive.go); watches (watch.go). The agent holds one; the host
// provider one for all its sandboxes. The zero value is ready.
type Files struct {
	mu      sync.Mutex
	digests map[fileKey]fileDigest   // digests of files written here, while the file is unchanged
	watches map[any]int              // open watches by sandbox key (watch.go)
	uploads map[string]chan struct{} // partials being written, closed when done
}

// uploadWait bounds how long a put or a state of an upload waits for the write of the same upload
// before it (a connection that broke, whose last bytes the agent still takes in) to end.
const uploadWait = 10 * time.Second

// claim waits for no other call to hold the partial key and holds it; release ends that.
func (f *Files) claim(key string) (release func(), err error) {
	deadline := time.NewTimer(uploadWait)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		if f.uploads == nil {
			f.uploads = map[string]chan struct{}{}
		}
		busy, ok := f.uploads[key]
		if !ok {
			done := make(chan struct{})
			f.uploads[key] = done
			f.mu.Unlock()
			return func() {
				f.mu.Lock()
				delete(f.uploads, key)
				f.mu.Unlock()
				close(done)
			}, nil
		}
		f.mu.Unlock()
		select {
		case <-busy:
		case <-deadline.C:
			return nil, fmt.Errorf("the upload is still being written by an earlier request: %w", sandbox.ErrInvalidState)
		}
	}
}

// UploadTTL is how long a partial upload nobody came back for is kept: the next upload into its
// directory removes one older.
const UploadTTL = 24 * time.Hour

// maxDigests bounds the digests a Files remembers.
const maxDigests = 4096

// fileKey names a file for its cached digest; fileDigest holds the digest with what the file was
// when it was computed: any write, truncate, chmod or rename since changes its ctime.
type fileKey struct{ dev, ino uint64 }

type fileDigest struct {
	size         int64
	mtime, ctime unix.Timespec
	sum          [sha256.Size]byte
}

// partialMark is in the name of every partial upload: ".NAME.upload-ID".
const partialMark = ".upload-"

func partialName(name, upload string) string {
	if len(name) > 150 {
		name = name[:150]
	}
	return "." + name + partialMark + upload
}

// diskFull says whether err is the sandbox's disk (or a quota, or the file size limit) refusing
// more bytes.
func diskFull(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.EFBIG)
}

// bodyError marks a failure to read the request body, as against one to write the file.
type bodyError struct{ err error }

func (e bodyError) Error() string { return e.err.Error() }
func (e bodyError) Unwrap() error { return e.err }

// copyBufs are the buffers of raw writes and reads.
var fileBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// PutFile writes the file put.Path from body, atomically (see Files). On a body that breaks off, an
// upload's partial is kept for a later put from the offset reached; on anything else (a digest that
// does not match, a full disk) the partial is removed and the old file is left as it was.
//
// Errors: ErrInvalidRequest (a bad path or upload, a digest mismatch, a body that broke off),
// ErrInvalidState (an offset past what the partial holds), ErrRequestTooLarge (the disk is full).
func (f *Files) PutFile(root *fsroot.Root, put sandbox.FilePut, body io.Reader) (sandbox.FileWritten, error) {
	var none sandbox.FileWritten
	switch {
	case put.Upload != "" && !sandbox.UploadIDValid(put.Upload):
		return none, fmt.Errorf("upload %.80q: want 8 to 64 of [A-Za-z0-9_-]: %w", put.Upload, sandbox.ErrInvalidRequest)
	case put.Offset < 0 || (put.Offset > 0 && put.Upload == ""):
		return none, fmt.Errorf("offset %d: a non-zero offset needs an upload: %w", put.Offset, sandbox.ErrInvalidRequest)
	case put.Digest != nil && len(put.Digest) != sha256.Size:
		return none, fmt.Errorf("digest of %d bytes is no SHA-256: %w", len(put.Digest), sandbox.ErrInvalidRequest)
	}
	d, name, err := root.Parent(put.Path, true)
	if err != nil {
		return none, err
	}
	defer d.Close()
	mode, err := d.FileMode(name)
	if err != nil {
		return none, fmt.Errorf("write %q: %w", put.Path, err)
	}
	h := sha256.New()
	var tmp string
	var file *os.File
	if put.Upload == "" {
		tmp, file, err = d.CreateTemp(name)
	} else {
		if put.Offset == 0 {
			d.RemoveStale(".", partialMark, UploadTTL, 10000)
		}
		tmp = partialName(name, put.Upload)
		release, cerr := f.claim(d.Path() + "/" + tmp)
		if cerr != nil {
			return none, fmt.Errorf("write %q: %w", put.Path, cerr)
		}
		defer release()
		file, err = resumePartial(d, tmp, put.Offset, h)
	}
	if err != nil {
		if diskFull(err) {
			err = fmt.Errorf("%w: %w", err, sandbox.ErrRequestTooLarge)
		}
		return none, fmt.Errorf("write %q: %w", put.Path, err)
	}
	keep := false // the partial outlives this call
	defer func() {
		file.Close()
		if !keep {
			_ = d.Remove(tmp)
		}
	}()
	n, err := copyHashed(file, h, body)
	if err == nil && put.Length >= 0 && n != put.Length {
		err = bodyError{fmt.Errorf("body of %d bytes, %d announced", n, put.Length)}
	}
	var be bodyError
	switch {
	case errors.As(err, &be):
		keep = put.Upload != ""
		return none, fmt.Errorf("write %q: the body broke off at offset %d: %v: %w", put.Path, put.Offset+n, be.err, sandbox.ErrInvalidRequest)
	case err != nil && diskFull(err):
		return none, fmt.Errorf("write %q: the sandbox's disk is full after %d bytes (%v); the file is as it was: %w",
			put.Path, put.Offset+n, err, sandbox.ErrRequestTooLarge)
	case err != nil:
		return none, fmt.Errorf("write %q: %w", put.Path, err)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	want, err := expectedDigest(put)
	if err != nil {
		return none, fmt.Errorf("write %q: %w (the file is as it was)", put.Path, err)
	}
	if want != nil && !bytes.Equal(want, sum[:]) {
		return none, fmt.Errorf("write %q: the bytes received have SHA-256 %x, the request said %x; the file is as it was: %w",
			put.Path, sum, want, sandbox.ErrInvalidRequest)
	}
	if mode == 0 {
		mode = 0o644
	}
	err = file.Chmod(os.FileMode(mode & 0o777))
	if err == nil && root.Durable {
		err = file.Sync()
	}
	if err == nil {
		err = d.Rename(tmp, name)
	}
	if err != nil {
		return none, fmt.Errorf("write %q: %w", put.Path, err)
	}
	keep = true // renamed: nothing left to remove
	if root.Durable {
		d.Sync()
	}
	size := put.Offset + n
	f.remember(file, sum)
	return sandbox.FileWritten{Path: put.Path, Size: size, Digest: sum[:]}, nil
}

// expectedDigest is the SHA-256 put expects of the whole file, read once its body has ended: its
// Digest, its TrailerDigest, or both when they are the same; nil: none.
func expectedDigest(put sandbox.FilePut) ([]byte, error) {
	if put.TrailerDigest == nil {
		return put.Digest, nil
	}
	td, err := put.TrailerDigest()
	switch {
	case err != nil && sandbox.ClassOf(err).Err == nil:
		return nil, fmt.Errorf("the digest trailer: %w: %w", err, sandbox.ErrInvalidRequest)
	case err != nil:
		return nil, err
	case td == nil:
		return put.Digest, nil
	case len(td) != sha256.Size:
		return nil, fmt.Errorf("the digest trailer of %d bytes is no SHA-256: %w", len(td), sandbox.ErrInvalidRequest)
	case put.Digest != nil && !bytes.Equal(td, put.Digest):
		return nil, fmt.Errorf("the digest trailer %x disagrees with the digest header %x: %w", td, put.Digest, sandbox.ErrInvalidRequest)
	}
	return td, nil
}

// resumePartial opens the partial tmp of an upload to go on at offset: a new one at 0, one that
// holds at least offset bytes cut there, its first offset bytes hashed into h.
func resumePartial(d *fsroot.Dir, tmp string, offset int64, h hash.Hash) (*os.File, error) {
	file, size, err := d.OpenPartial(tmp, offset == 0)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, fmt.Errorf("no partial upload to resume at offset %d: %w", offset, sandbox.ErrInvalidState)
	}
	if err != nil {
		return nil, err
	}
	if size < offset {
		file.Close()
		return nil, fmt.Errorf("the partial upload holds %d bytes, not %d: %w", size, offset, sandbox.ErrInvalidState)
	}
	err = file.Truncate(offset)
	if err == nil && offset > 0 {
		buf := fileBufs.Get().(*[]byte)
		_, err = io.CopyBuffer(h, io.NewSectionReader(file, 0, offset), *buf)
		fileBufs.Put(buf)
	}
	if err == nil {
		_, err = file.Seek(offset, io.SeekStart)
	}
	if err != nil {
		file.Close()
		return nil, err
	}
	return file, nil
}

// copyHashed copies body to file and into h; a failure to read body is a bodyError. It is a
// pipeline of pooled buffers: this goroutine fills one from body while a second hashes the one
// before and a third writes the one before that. Past wideAfter bytes, the agent (which runs on one
// P, see Main) takes a second P for the rest of the copy, so that hashing runs beside reading. The
// writes are written behind (writeBehind): the page cache holds about a window of the file.
func copyHashed(file *os.File, h hash.Hash, body io.Reader) (int64, error) {
	var bufs [copyDepth]*[]byte
	free := make(chan []byte, copyDepth)
	for i := range bufs {
		bufs[i] = fileBufs.Get().(*[]byte)
		free <- *bufs[i]
	}
	defer func() {
		for _, b := range bufs {
			fileBufs.Put(b)
		}
	}()
	// Every channel holds all the buffers: no stage ever blocks on a send.
	toHash, toWrite := make(chan []byte, copyDepth), make(chan []byte, copyDepth)
	failed := make(chan struct{}) // closed when a write failed; werr says why
	written := make(chan struct{})
	var werr error
	go func() {
		defer close(toWrite)
		for b := range toHash {
			h.Write(b)
			toWrite <- b
		}
	}()
	behind := newWriteBehind(file)
	go func() {
		defer close(written)
		for b := range toWrite {
			if werr == nil {
				if _, err := file.Write(b); err != nil {
					werr = err
					close(failed)
				} else {
					behind.wrote(len(b))
				}
			}
			free <- b[:cap(b)]
		}
	}()
	var n int64
	var rerr error
	narrow := func() {}
	for rerr == nil {
		var buf []byte
		select {
		case <-failed:
		default:
			select {
			case buf = <-free:
			case <-failed:
			}
		}
		if buf == nil {
			break
		}
		m := 0
		for m < len(buf) && rerr == nil {
			var k int
			k, rerr = body.Read(buf[m:])
			m += k
		}
		if n < wideAfter && n+int64(m) >= wideAfter {
			narrow = widen()
		}
		n += int64(m)
		toHash <- buf[:m]
	}
	close(toHash)
	<-written // the hash and the buffers are this goroutine's again
	behind.close()
	narrow()
	if werr != nil {
		return n, werr
	}
	if rerr != io.EOF {
		return n, bodyError{rerr}
	}
	return n, nil
}

const (
	copyDepth = 4       // buffers in copyHashed's pipeline
	wideAfter = 4 << 20 // bytes copied after which copyHashed takes a second P
)

// procs counts the copies that hold a second P (widen).
var procs struct {
	sync.Mutex
	n    int
	prev int
}

// widen raises GOMAXPROCS to 2 on a machine of two CPUs or more, until the last of the calls that
// raised it calls the function it returned: a request's hand-offs on one P are what keeps an exec's
// round trip short, so the second P lasts only as long as the large copies that need it.
func widen() func() {
	procs.Lock()
	defer procs.Unlock()
	if procs.n == 0 {
		procs.prev = runtime.GOMAXPROCS(0)
		if procs.prev < 2 && runtime.NumCPU() >= 2 {
			runtime.GOMAXPROCS(2)
		}
	}
	procs.n++
	return func() {
		procs.Lock()
		defer procs.Unlock()
		procs.n--
		if procs.n == 0 && runtime.GOMAXPROCS(0) != procs.prev {
			runtime.GOMAXPROCS(procs.prev)
		}
	}
}

// remember keeps the digest of file as it is now.
func (f *Files) remember(file *os.File, sum [sha256.Size]byte) {
	var st unix.Stat_t
	if unix.Fstat(int(file.Fd()), &st) != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.digests == nil {
		f.digests = map[fileKey]fileDigest{}
	}
	if len(f.digests) >= maxDigests {
		for k := range f.digests { // any one: they are only a cache
			delete(f.digests, k)
			break
		}
	}
	f.digests[fileKey{st.Dev, st.Ino}] = fileDigest{size: st.Size, mtime: st.Mtim, ctime: st.Ctim, sum: sum}
}

// known returns the remembered digest of the file of st when it is unchanged since.
func (f *Files) known(st *unix.Stat_t) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.digests[fileKey{st.Dev, st.Ino}]
	if !ok || d.size != st.Size || d.mtime != st.Mtim || d.ctime != st.Ctim {
		return nil, false
	}
	return d.sum[:], true
}

// UploadState says how many bytes the partial of upload for path holds (0: none).
func (f *Files) UploadState(root *fsroot.Root, path, upload string) (sandbox.FileWritten, error) {
	if !sandbox.UploadIDValid(upload) {
		return sandbox.FileWritten{}, fmt.Errorf("upload %.80q: want 8 to 64 of [A-Za-z0-9_-]: %w", upload, sandbox.ErrInvalidRequest)
	}
	d, name, err := root.Parent(path, false)
	if errors.Is(err, sandbox.ErrNotFound) {
		return sandbox.FileWritten{Path: path}, nil
	}
	if err != nil {
		return sandbox.FileWritten{}, err
	}
	defer d.Close()
	tmp := partialName(name, upload)
	release, err := f.claim(d.Path() + "/" + tmp)
	if err != nil {
		return sandbox.FileWritten{}, fmt.Errorf("upload of %q: %w", path, err)
	}
	defer release()
	file, size, err := d.OpenPartial(tmp, false)
	if errors.Is(err, sandbox.ErrNotFound) {
		return sandbox.FileWritten{Path: path}, nil
	}
	if err != nil {
		return sandbox.FileWritten{}, fmt.Errorf("upload of %q: %w", path, err)
	}
	file.Close()
	return sandbox.FileWritten{Path: path, Size: size}, nil
}

// GetFile opens the file at path for a raw read of rng (nil: all of it). A range that starts at or
// past the end reads nothing (the caller answers 416). The digest of the whole file is in the answer
// for a whole read, or when wantDigest: the remembered one when the file is unchanged since this
// Files wrote it, else computed by reading the file once before.
func (f *Files) GetFile(root *fsroot.Root, path string, rng *sandbox.FileRange, wantDigest bool) (*sandbox.FileRead, error) {
	file, st, err := root.Open(path)
	if err != nil {
		return nil, err
	}
	rd := &sandbox.FileRead{Size: st.Size, Length: st.Size}
	if rng != nil {
		rd.Start = rng.Start
		rd.Length = max(st.Size-rng.Start, 0)
		if rng.Length >= 0 {
			rd.Length = min(rd.Length, rng.Length)
		}
	}
	if rng == nil || wantDigest {
		sum, ok := f.known(&st)
		if !ok {
			h := sha256.New()
			bp := fileBufs.Get().(*[]byte)
			_, err := io.CopyBuffer(h, io.NewSectionReader(file, 0, st.Size), *bp)
			fileBufs.Put(bp)
			if err != nil {
				file.Close()
				return nil, fmt.Errorf("read %q: %w", path, err)
			}
			sum = h.Sum(nil)
		}
		rd.Digest = sum
	}
	if _, err := file.Seek(rd.Start, io.SeekStart); err != nil {
		file.Close()
		return nil, fmt.Errorf("read %q: %w", path, err)
	}
	rd.ReadCloser = limitedFile{newDropBehind(io.LimitReader(file, rd.Length), file, rd.Start, rd.Length), file}
	return rd, nil
}

type limitedFile struct {
	io.Reader
	io.Closer
}

// The agent's routes of raw files.

func (a *Agent) putRawFile(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	q := r.URL.Query()
	put := sandbox.FilePut{Path: q.Get("path"), Upload: q.Get("upload"), Length: r.ContentLength}
	if v := q.Get("offset"); v != "" {
		off, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeErr(w, fmt.Errorf("offset %.32q: %w", v, sandbox.ErrInvalidRequest))
			return
		}
		put.Offset = off
	}
	if v := r.Header.Get(protocol.HeaderDigest); v != "" {
		sum, err := hexDigest(v)
		if err != nil {
			writeErr(w, err)
			return
		}
		put.Digest = sum
	}
	if err := bodyTrailer(r, &put); err != nil {
		writeErr(w, err)
		return
	}
	res, err := a.files.PutFile(a.root, put, r.Body)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, protocol.FileWritten{Path: res.Path, Size: res.Size, Digest: hex.EncodeToString(res.Digest)})
}

// hexDigest reads a SHA-256 in hex.
func hexDigest(v string) ([]byte, error) {
	sum, err := hex.DecodeString(v)
	if err != nil || len(sum) != sha256.Size {
		return nil, fmt.Errorf("digest %.80q is not a SHA-256 in hex: %w", v, sandbox.ErrInvalidRequest)
	}
	return sum, nil
}

// bodyTrailer sets put.TrailerDigest from the protocol.HeaderDigest trailer r declares: the only
// trailer a raw write takes, and only after a chunked body (net/http leaves the Trailer header in
// place on any other).
func bodyTrailer(r *http.Request, put *sandbox.FilePut) error {
	if len(r.Header.Values("Trailer")) > 0 {
		return fmt.Errorf("a trailer declared on a body that is not chunked: %w", sandbox.ErrInvalidRequest)
	}
	for k := range r.Trailer {
		if k != protocol.HeaderDigest {
			return fmt.Errorf("trailer %.80q: a raw write takes only %s: %w", k, protocol.HeaderDigest, sandbox.ErrInvalidRequest)
		}
	}
	if _, ok := r.Trailer[protocol.HeaderDigest]; !ok {
		return nil
	}
	put.TrailerDigest = func() ([]byte, error) {
		var v string
		for k, vs := range r.Trailer {
			if k != protocol.HeaderDigest || len(vs) > 1 {
				return nil, fmt.Errorf("trailer %.80q: a raw write takes one %s: %w", k, protocol.HeaderDigest, sandbox.ErrInvalidRequest)
			}
			if len(vs) == 1 {
				v = vs[0]
			}
		}
		if v == "" {
			return nil, nil
		}
		return hexDigest(v)
	}
	return nil
}

func (a *Agent) uploadState(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	q := r.URL.Query()
	res, err := a.files.UploadState(a.root, q.Get("path"), q.Get("upload"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, protocol.FileWritten{Path: res.Path, Size: res.Size})
}

func (a *Agent) getRawFile(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	rng, err := parseRange(r.Header.Get(protocol.HeaderRange))
	if err != nil {
		writeErr(w, err)
		return
	}
	rd, err := a.files.GetFile(a.root, r.URL.Query().Get("path"), rng, r.Header.Get(protocol.HeaderWantDigest) != "")
	if err != nil {
		writeErr(w, err)
		return
	}
	defer rd.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(rd.Length, 10))
	h.Set(protocol.HeaderSize, strconv.FormatInt(rd.Size, 10))
	h.Set(protocol.HeaderStart, strconv.FormatInt(rd.Start, 10))
	if rd.Digest != nil {
		h.Set(protocol.HeaderDigest, hex.EncodeToString(rd.Digest))
	}
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, rd)
}

// parseRange reads protocol.HeaderRange: "START-END" (inclusive) or "START-"; empty: nil.
func parseRange(v string) (*sandbox.FileRange, error) {
	if v == "" {
		return nil, nil
	}
	return sandbox.ParseFileRange(v)
}

// FormatRange is the protocol.HeaderRange value of rng.
func FormatRange(rng sandbox.FileRange) string {
	s := strconv.FormatInt(rng.Start, 10) + "-"
	if rng.Length >= 0 {
		s += strconv.FormatInt(rng.Start+rng.Length-1, 10)
	}
	return s
}

// writeJSONLine writes v as one line of JSON.
func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
