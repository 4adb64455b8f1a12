// Package fsroot reads, writes and lists files confined to one root directory.
//
// Every path is resolved by the kernel as if the root were "/" (openat2 with RESOLVE_IN_ROOT and
// RESOLVE_NO_MAGICLINKS on a directory fd of the root): relative paths start at a working directory
// inside the root, absolute paths start at the root, and neither ".." nor a symlink (absolute or
// relative, at any depth) can lead outside it. Every later step (mkdirat, openat, renameat, fstat)
// works on the fd of the resolved parent directory, never on a path string, so a symlink planted
// between a check and its use cannot redirect anything.
//
// Main invariant: no file or directory outside the root is ever opened, created, replaced or removed.
//
// Symlinks: reads and listings follow them, inside the root. A write replaces the final path component
// itself: writing to a symlink swaps the link for a regular file and never writes through it.
package fsroot

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

// Root is an open root directory. It is safe for concurrent use; Close it when done.
type Root struct {
	// Durable makes WriteFile sync the file and its directory before it returns, for a root whose files
	// outlive a crash of the host. Set it before the root is used.
	Durable bool

	fd      int    // O_PATH directory fd of the root
	dir     string // the root as given to Open, for messages
	workdir string // absolute, clean, inside the root
}

// Open opens root for confined access. workdir is where relative paths start, given as a path inside
// the root ("/" for the root itself); it need not exist yet. Open fails when root is not a directory.
func Open(root, workdir string) (*Root, error) {
	if workdir == "" {
		workdir = "/"
	}
	if strings.IndexByte(workdir, 0) >= 0 {
		return nil, fmt.Errorf("fsroot: workdir %q: NUL byte: %w", workdir, sandbox.ErrInvalidRequest)
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fsroot: open root %s: %w", root, classify(err))
	}
	return &Root{fd: fd, dir: root, workdir: path.Clean("/" + workdir)}, nil
}

// Close releases the root's fd.
func (r *Root) Close() error { return unix.Close(r.fd) }

// full turns a client path into a path the kernel resolves against the root fd. It does not clean the
// path: "a/link/.." must be resolved by the kernel, not by string rules.
func (r *Root) full(p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("empty path: %w", sandbox.ErrInvalidRequest)
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("path %q has a NUL byte: %w", p, sandbox.ErrInvalidRequest)
	case len(p) > unix.PathMax-len(r.workdir)-2:
		return "", fmt.Errorf("path of %d bytes is too long: %w", len(p), sandbox.ErrInvalidRequest)
	case strings.HasPrefix(p, "/"):
		return p, nil
	case r.workdir == "/":
		return "/" + p, nil
	}
	return r.workdir + "/" + p, nil
}

// openat2 resolves p (already made full) inside the root, retrying the EAGAIN the kernel returns
// when a concurrent rename makes RESOLVE_IN_ROOT unsure.
func (r *Root) openat2(p string, flags uint64) (int, error) {
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(r.fd, p, &how)
		if err == unix.EINTR || (err == unix.EAGAIN && i < 100) {
			continue
		}
		return fd, err
	}
}

// ReadFile returns the content of the regular file at p. It returns ErrNotFound when p is missing and
// ErrInvalidRequest when p is not a regular file or is larger than max bytes.
func (r *Root) ReadFile(p string, max int64) ([]byte, error) {
	full, err := r.full(p)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", p, err)
	}
	// O_NONBLOCK so that a FIFO planted at p cannot hang the open.
	fd, err := r.openat2(full, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", p, classify(err))
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("read %q: %w", p, err)
	}
	if err := wantRegular(st.Mode); err != nil {
		return nil, fmt.Errorf("read %q: %w", p, err)
	}
	if st.Size > max {
		return nil, fmt.Errorf("read %q: %d bytes, more than the limit of %d: %w", p, st.Size, max, sandbox.ErrInvalidRequest)
	}
	// The file may grow while we read: never hold more than max bytes.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", p, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("read %q: more than the limit of %d bytes: %w", p, max, sandbox.ErrInvalidRequest)
	}
	return data, nil
}

// WriteFile replaces the file at p with data atomically: it creates the missing parent directories,
// writes a temporary file in the same directory and renames it over p, so a reader sees the old
// content or the new, never a part. Unless the root is Durable it does not sync: the files of a
// sandbox in a container or a Pod must outlive a crash of the daemon or of the agent, which the page
// cache gives, but not a crash of the host, which the sandbox does not outlive (it is failed when the
// host comes back), and the two syncs were a third of a 4 KiB write's time through the API. It returns
// ErrInvalidRequest when p names a directory or a parent is not a directory, and ErrNotFound when a
// parent is a dangling symlink.
func (r *Root) WriteFile(p string, data []byte) error {
	full, err := r.full(p)
	if err != nil {
		return fmt.Errorf("write %q: %w", p, err)
	}
	dir, name := split(full)
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("write %q: names a directory: %w", p, sandbox.ErrInvalidRequest)
	}
	dfd, err := r.mkdirAll(dir, 0)
	if err != nil {
		return fmt.Errorf("write %q: %w", p, err)
	}
	defer unix.Close(dfd)

	var st unix.Stat_t
	mode := uint32(0)
	switch err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return fmt.Errorf("write %q: is a directory: %w", p, sandbox.ErrInvalidRequest)
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG:
		mode = st.Mode & 0o7777 // a replaced file keeps its permissions
	case err != nil && err != unix.ENOENT:
		return fmt.Errorf("write %q: %w", p, classify(err))
	}

	tmp, tfd, err := createTemp(dfd, name)
	if err != nil {
		return fmt.Errorf("write %q: %w", p, classify(err))
	}
	f := os.NewFile(uintptr(tfd), tmp)
	var werr error
	if mode != 0 {
		werr = unix.Fchmod(tfd, mode)
	}
	if werr == nil {
		_, werr = f.Write(data)
	}
	if werr == nil && r.Durable {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = unix.Renameat(dfd, tmp, dfd, name)
	}
	if werr != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return fmt.Errorf("write %q: %w", p, classify(werr))
	}
	if r.Durable {
		// Make the rename durable; dfd is O_PATH, so open the directory for reading to fsync it.
		if sfd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			_ = unix.Fsync(sfd)
			_ = unix.Close(sfd)
		}
	}
	return nil
}

// createTemp makes an exclusive temporary file beside name in the directory dfd.
func createTemp(dfd int, name string) (string, int, error) {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		base := name
		if len(base) > 200 {
			base = base[:200]
		}
		tmp := "." + base + ".tmp-" + hex.EncodeToString(b[:])
		fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err == unix.EEXIST {
			continue
		}
		return tmp, fd, err
	}
}

// mkdirAll returns an O_PATH fd of the directory dir (a full path), creating it and its parents as
// needed. Each level is created with mkdirat on its parent's fd and then resolved again from the root,
// so a concurrently planted symlink is resolved inside the root like any other.
func (r *Root) mkdirAll(dir string, depth int) (int, error) {
	fd, err := r.openat2(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != unix.ENOENT || depth > 4096 {
		if err != nil {
			return -1, classify(err)
		}
		return fd, nil
	}
	d := strings.TrimRight(dir, "/")
	i := strings.LastIndexByte(d, '/')
	parent, name := "/", d[i+1:]
	if i > 0 {
		parent = d[:i]
	}
	pfd, err := r.mkdirAll(parent, depth+1)
	if err != nil {
		return -1, err
	}
	if name != "" && name != "." && name != ".." {
		err = unix.Mkdirat(pfd, name, 0o755)
	}
	unix.Close(pfd)
	if err != nil && err != unix.EEXIST {
		return -1, classify(err)
	}
	fd, err = r.openat2(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, classify(err)
	}
	return fd, nil
}

// List lists the directory at p, one level, sorted by name. Each entry's Path is p joined with the
// entry's name, so a client can pass it back. Symlinks are followed inside the root and reported as
// the kind and size of their target; dangling or looping symlinks, and entries that are neither
// files nor directories (FIFOs, sockets, devices), are left out. It returns ErrNotFound when p is
// missing and ErrInvalidRequest when it is not a directory.
func (r *Root) List(p string) ([]sandbox.FileEntry, error) {
	full, err := r.full(p)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", p, err)
	}
	fd, err := r.openat2(full, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", p, classify(err))
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", p, err)
	}
	sort.Strings(names)

	prefix := strings.TrimRight(p, "/")
	switch {
	case p == "." || prefix == ".":
		prefix = ""
	case prefix == "":
		prefix = "/" // p was "/" or "//"
	default:
		prefix += "/"
	}
	entries := make([]sandbox.FileEntry, 0, len(names))
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // removed since readdir
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			// Follow it inside the root, from the listed directory's full path.
			lfd, err := r.openat2(strings.TrimRight(full, "/")+"/"+name, unix.O_PATH)
			if err != nil {
				continue
			}
			err = unix.Fstat(lfd, &st)
			unix.Close(lfd)
			if err != nil {
				continue
			}
		}
		e := sandbox.FileEntry{Path: prefix + name}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			e.Kind, e.Size = sandbox.KindFile, st.Size
		case unix.S_IFDIR:
			e.Kind = sandbox.KindDirectory
		default:
			continue
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// ResolveDir returns the host path of the directory p inside the root, for use as a process's
// working directory. The answer is a string: it is exact when returned, but unlike the other
// methods nothing stops the directory from being replaced afterwards. It returns ErrNotFound when p is
// missing and ErrInvalidRequest when it is not a directory.
func (r *Root) ResolveDir(p string) (string, error) {
	full, err := r.full(p)
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", p, err)
	}
	fd, err := r.openat2(full, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", p, classify(err))
	}
	defer unix.Close(fd)
	host, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", p, err)
	}
	return host, nil
}

// split cuts a full path into its parent directory and last component, keeping the parent unclean.
func split(full string) (dir, name string) {
	trimmed := strings.TrimRight(full, "/")
	if trimmed != full {
		return full, "" // a trailing slash names a directory
	}
	i := strings.LastIndexByte(trimmed, '/')
	if i < 0 {
		return "/", trimmed
	}
	if i == 0 {
		return "/", trimmed[1:]
	}
	return trimmed[:i], trimmed[i+1:]
}

func wantRegular(mode uint32) error {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFDIR:
		return fmt.Errorf("is a directory: %w", sandbox.ErrInvalidRequest)
	}
	return fmt.Errorf("not a regular file: %w", sandbox.ErrInvalidRequest)
}

// classify wraps a system error in the error class a client should see.
func classify(err error) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return err
	}
	switch errno {
	case unix.ENOENT:
		return fmt.Errorf("%w: %w", errno, sandbox.ErrNotFound)
	case unix.ENOTDIR, unix.EISDIR, unix.ELOOP, unix.ENAMETOOLONG, unix.EXDEV, unix.ENOTEMPTY, unix.EEXIST, unix.ENXIO:
		return fmt.Errorf("%w: %w", errno, sandbox.ErrInvalidRequest)
	}
	return err
}
