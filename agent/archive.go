package agent

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/fsroot"
)

// Archives: a directory in and out as a tar stream. Both open the directory as an os.Root, which
// confines every path under it; on the way in, each entry is refused when its name is absolute or
// climbs with "..", when a parent in its path is a symlink (no writing through a link the archive
// made), or when it is a device node or a FIFO. A file is written to a temporary beside it and
// renamed, so an entry over a symlink replaces the link. On the way out, symlinks are archived as
// links, never followed, and a file swapped for another between the listing and its open is left out.

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
	tr := tar.NewReader(body)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("archive into %q: entry %d: %v: %w", dir, res.Entries+1, err, sandbox.ErrInvalidRequest)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if res.Entries++; res.Entries > sandbox.MaxArchiveEntries {
			return res, fmt.Errorf("archive into %q: more than %d entries: %w", dir, sandbox.MaxArchiveEntries, sandbox.ErrInvalidRequest)
		}
		n, err := extract(rt, tr, hdr)
		res.Bytes += n
		if err != nil {
			if diskFull(err) {
				return res, fmt.Errorf("archive into %q: %.200q: the sandbox's disk is full: %v: %w", dir, hdr.Name, err, sandbox.ErrRequestTooLarge)
			}
			if sandbox.ClassOf(err).Err == nil {
				err = fmt.Errorf("%v: %w", err, sandbox.ErrInvalidRequest)
			}
			return res, fmt.Errorf("archive into %q: entry %.200q: %w", dir, hdr.Name, err)
		}
	}
}

// entryName is an archive entry's name as a path under the root, or why it is refused.
func entryName(name string) (string, error) {
	if len(name) > sandbox.MaxArchiveName {
		return "", fmt.Errorf("a name of %d bytes: %w", len(name), sandbox.ErrInvalidRequest)
	}
	if strings.HasPrefix(name, "/") || strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("an absolute name: %w", sandbox.ErrInvalidRequest)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("a name with \"..\": %w", sandbox.ErrInvalidRequest)
		}
	}
	clean := path.Clean(name)
	if clean == "." {
		return "", nil
	}
	return clean, nil
}

// checkParents refuses a name one of whose parents is not a directory (a symlink, above all).
func checkParents(rt *os.Root, name string) error {
	dir := path.Dir(name)
	if dir == "." {
		return nil
	}
	p := ""
	for _, part := range strings.Split(dir, "/") {
		p = path.Join(p, part)
		fi, err := rt.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // made as a directory below
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("its parent %.200q is not a directory (a symlink is never written through): %w", p, sandbox.ErrInvalidRequest)
		}
	}
	return nil
}

// extract writes one entry; n is the bytes of file content written.
func extract(rt *os.Root, tr *tar.Reader, hdr *tar.Header) (int64, error) {
	name, err := entryName(hdr.Name)
	if err != nil {
		return 0, err
	}
	if len(hdr.Linkname) > sandbox.MaxArchiveName {
		return 0, fmt.Errorf("a link target of %d bytes: %w", len(hdr.Linkname), sandbox.ErrInvalidRequest)
	}
	if name == "" {
		return 0, nil // the directory itself
	}
	if err := checkParents(rt, name); err != nil {
		return 0, err
	}
	if d := path.Dir(name); d != "." {
		if err := rt.MkdirAll(d, 0o755); err != nil {
			return 0, err
		}
	}
	perm := os.FileMode(hdr.Mode) & 0o777
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := rt.MkdirAll(name, 0o755); err != nil {
			return 0, err
		}
		if fi, err := rt.Lstat(name); err != nil || !fi.IsDir() {
			return 0, fmt.Errorf("not a directory: %w", sandbox.ErrInvalidRequest)
		}
		return 0, rt.Chmod(name, perm|0o700)
	case tar.TypeReg, tar.TypeRegA:
		return writeEntry(rt, name, perm, hdr.ModTime, tr)
	case tar.TypeSymlink:
		if err := clearEntry(rt, name); err != nil {
			return 0, err
		}
		return 0, rt.Symlink(hdr.Linkname, name)
	case tar.TypeLink:
		target, err := entryName(hdr.Linkname)
		if err != nil || target == "" {
			return 0, fmt.Errorf("a hard link to %.200q: %w", hdr.Linkname, sandbox.ErrInvalidRequest)
		}
		if err := checkParents(rt, target); err != nil {
			return 0, err
		}
		if fi, err := rt.Lstat(target); err != nil || !fi.Mode().IsRegular() {
			return 0, fmt.Errorf("a hard link to %.200q, which is no regular file here: %w", hdr.Linkname, sandbox.ErrInvalidRequest)
		}
		if err := clearEntry(rt, name); err != nil {
			return 0, err
		}
		return 0, rt.Link(target, name)
	}
	return 0, fmt.Errorf("entry type %q (device nodes, FIFOs and the like are not extracted): %w", hdr.Typeflag, sandbox.ErrInvalidRequest)
}

// clearEntry removes what is at name, unless it is a directory.
func clearEntry(rt *os.Root, name string) error {
	fi, err := rt.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("a directory is in the way: %w", sandbox.ErrInvalidRequest)
	}
	return rt.Remove(name)
}

// writeEntry writes a file entry through a temporary renamed over name.
func writeEntry(rt *os.Root, name string, perm os.FileMode, mtime time.Time, r io.Reader) (int64, error) {
	if fi, err := rt.Lstat(name); err == nil && fi.IsDir() {
		return 0, fmt.Errorf("a directory is in the way: %w", sandbox.ErrInvalidRequest)
	}
	tmp := path.Join(path.Dir(name), ".archive-"+randomName())
	file, err := rt.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	bp := fileBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(onlyWriter{file}, r, *bp)
	fileBufs.Put(bp)
	if err == nil {
		err = file.Chmod(perm)
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = rt.Rename(tmp, name)
	}
	if err != nil {
		_ = rt.Remove(tmp)
		return n, err
	}
	if !mtime.IsZero() {
		_ = rt.Chtimes(name, mtime, mtime)
	}
	return n, nil
}

// onlyWriter hides a file's ReadFrom, so the copy uses the pooled buffer.
type onlyWriter struct{ io.Writer }

// GetArchive writes the directory dir as a tar stream to w: directories, regular files, symlinks
// (as links); other entries are left out.
//
// Errors: ErrNotFound, ErrInvalidRequest (not a directory); past the first byte, the stream's.
func (f *Files) GetArchive(root *fsroot.Root, dir string, w io.Writer) error {
	rt, err := root.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer rt.Close()
	tw := tar.NewWriter(w)
	entries := 0
	err = fs.WalkDir(rt.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if name == "." {
				return err
			}
			return nil // gone since it was listed
		}
		if name == "." {
			return nil
		}
		if entries++; entries > sandbox.MaxArchiveEntries {
			return fmt.Errorf("more than %d entries: %w", sandbox.MaxArchiveEntries, sandbox.ErrInvalidRequest)
		}
		fi, err := rt.Lstat(name)
		if err != nil {
			return nil
		}
		return archiveEntry(rt, tw, name, fi)
	})
	if err != nil {
		return fmt.Errorf("archive of %q: %w", dir, err)
	}
	return tw.Close()
}

// archiveEntry writes one entry as lstat saw it.
func archiveEntry(rt *os.Root, tw *tar.Writer, name string, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		hdr, _ := tar.FileInfoHeader(fi, "")
		hdr.Name = name + "/"
		return tw.WriteHeader(plain(hdr))
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := rt.Readlink(name)
		if err != nil {
			return nil
		}
		hdr, _ := tar.FileInfoHeader(fi, target)
		hdr.Name = name
		return tw.WriteHeader(plain(hdr))
	case fi.Mode().IsRegular():
		file, err := rt.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return nil
		}
		defer file.Close()
		now, err := file.Stat()
		if err != nil || !os.SameFile(fi, now) || !now.Mode().IsRegular() {
			return nil // swapped since it was listed: a link is never followed
		}
		hdr, _ := tar.FileInfoHeader(now, "")
		hdr.Name = name
		if err := tw.WriteHeader(plain(hdr)); err != nil {
			return err
		}
		bp := fileBufs.Get().(*[]byte)
		defer fileBufs.Put(bp)
		// A file that grows as it is read is cut at its size in the header.
		n, err := io.CopyBuffer(tw, io.LimitReader(file, hdr.Size), *bp)
		if err == nil && n < hdr.Size {
			_, err = io.CopyN(tw, zeros{}, hdr.Size-n) // one that shrank is padded
		}
		return err
	}
	return nil
}

// plain drops what a header has of the agent's host (user and group names).
func plain(h *tar.Header) *tar.Header {
	h.Uname, h.Gname = "", ""
	h.Format = tar.FormatPAX
	return h
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
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
