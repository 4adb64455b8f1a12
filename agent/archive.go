package agent

import (
	"fmt"
	"io"
	"net/http"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/fsroot"
	"github.com/sandboxd/sandbox/internal/tarroot"
)

// Archives: a directory in and out as a tar stream, through an os.Root of the directory
// (internal/tarroot says what is refused and why nothing outside it is reached).

// PutArchive extracts the tar stream body into the directory dir, making it if needed. It is not
// atomic as a whole: the entries before a refused one stay.
//
// Errors: ErrInvalidRequest (a malformed archive, an entry refused), ErrRequestTooLarge (the disk
// is full), ErrNotFound.
func (f *Files) PutArchive(root *fsroot.Root, dir string, body io.Reader) (sandbox.ArchiveWritten, error) {
	res := sandbox.ArchiveWritten{Path: dir}
	if err := root.MkdirAll(dir); err != nil {
		return res, err
	}
	rt, err := root.OpenRoot(dir)
	if err != nil {
		return res, err
	}
	defer rt.Close()
	w, err := tarroot.Extract(rt, body)
	res.Entries, res.Bytes = w.Entries, w.Bytes
	switch {
	case err == nil:
		return res, nil
	case diskFull(err):
		return res, fmt.Errorf("archive into %q: the sandbox's disk is full: %v: %w", dir, err, sandbox.ErrRequestTooLarge)
	case sandbox.ClassOf(err).Err == nil:
		return res, fmt.Errorf("archive into %q: %v: %w", dir, err, sandbox.ErrInvalidRequest)
	}
	return res, fmt.Errorf("archive into %q: %w", dir, err)
}

// GetArchive writes the directory dir as a tar stream to w.
//
// Errors: ErrNotFound, ErrInvalidRequest (not a directory); past the first byte, the stream's.
func (f *Files) GetArchive(root *fsroot.Root, dir string, w io.Writer) error {
	rt, err := root.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer rt.Close()
	if err := tarroot.Write(rt, w); err != nil {
		return fmt.Errorf("archive of %q: %w", dir, err)
	}
	return nil
}

func (a *Agent) putArchive(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	res, err := a.files.PutArchive(a.root, r.URL.Query().Get("path"), r.Body)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, protocol.ArchiveWritten{Path: res.Path, Entries: res.Entries, Bytes: res.Bytes})
}

func (a *Agent) getArchive(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	dir := r.URL.Query().Get("path")
	// The directory is checked before the answer begins, so that a missing one is an error answer.
	rt, err := a.root.OpenRoot(dir)
	if err != nil {
		writeErr(w, err)
		return
	}
	rt.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	if err := a.files.GetArchive(a.root, dir, w); err != nil {
		// Past the head: the stream is cut without its end blocks, which the reader sees.
		panic(http.ErrAbortHandler)
	}
}
