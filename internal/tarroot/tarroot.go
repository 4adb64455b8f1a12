// Package tarroot moves tar streams in and out of a directory opened as an os.Root, which confines
// every path under it. Extract refuses an entry whose name is absolute or climbs with "..", whose path
// passes through a symlink (the archive's own or one already there), or that is a device node or a
// FIFO; it writes a file beside its target and renames it, so an entry over a symlink replaces the
// link. Write archives symlinks as links, never followed, and leaves out a file swapped for another
// between its listing and its open.
//
// Main invariant: nothing outside the root is opened, created or replaced, whatever the archive or
// the directory's other writers do.
package tarroot

import (
	"archive/tar"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandbox"
)

// Bounds of one archive.
const (
	MaxEntries = sandbox.MaxArchiveEntries
	MaxName    = sandbox.MaxArchiveName
)

var bufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// Written is what Extract wrote.
type Written struct {
	Entries int
	Bytes   int64
}

// Extract extracts the tar stream r under rt. It is not atomic: the entries before a refused one
// stay. Errors: ErrInvalidRequest for a malformed archive or an entry refused; the file system's
// own (a full disk) otherwise.
func Extract(rt *os.Root, r io.Reader) (Written, error) {
	var res Written
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("entry %d: %v: %w", res.Entries+1, err, sandbox.ErrInvalidRequest)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if res.Entries++; res.Entries > MaxEntries {
			return res, fmt.Errorf("more than %d entries: %w", MaxEntries, sandbox.ErrInvalidRequest)
		}
		n, err := extract(rt, tr, hdr)
		res.Bytes += n
		if err != nil {
			return res, fmt.Errorf("entry %.200q: %w", hdr.Name, err)
		}
	}
}

// Write writes everything under rt as a tar stream to w: directories, regular files, symlinks (as
// links); other entries are left out.
func Write(rt *os.Root, w io.Writer) error {
	tw := tar.NewWriter(w)
	entries := 0
	err := fs.WalkDir(rt.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if name == "." {
				return err
			}
			return nil // gone since it was listed
		}
		if name == "." {
			return nil
		}
		if entries++; entries > MaxEntries {
			return fmt.Errorf("more than %d entries: %w", MaxEntries, sandbox.ErrInvalidRequest)
		}
		fi, err := rt.Lstat(name)
		if err != nil {
			return nil
		}
		return archiveEntry(rt, tw, name, fi)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// entryName is an archive entry's name as a path under the root, or why it is refused.
func entryName(name string) (string, error) {
	if len(name) > MaxName {
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
	if len(hdr.Linkname) > MaxName {
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
		return 0, chmodDir(rt, name, perm|0o700)
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

// chmodDir sets the mode of the directory name with fchmod on a descriptor of its own, as a file's is
// set: under gVisor, os.Root.Chmod's chmod by name is refused (EPERM).
func chmodDir(rt *os.Root, name string, perm os.FileMode) error {
	d, err := rt.Open(name)
	if err != nil {
		return err
	}
	defer d.Close()
	if fi, err := d.Stat(); err != nil || !fi.IsDir() {
		return fmt.Errorf("not a directory: %w", sandbox.ErrInvalidRequest)
	}
	return d.Chmod(perm)
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
	bp := bufs.Get().(*[]byte)
	n, err := io.CopyBuffer(onlyWriter{file}, r, *bp)
	bufs.Put(bp)
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
		bp := bufs.Get().(*[]byte)
		defer bufs.Put(bp)
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

func randomName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
