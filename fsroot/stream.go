package fsroot

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

// What streamed transfers need of a root: a file opened once for reading, a directory found once
// whose every later step works on its fd (Dir), and a directory as an os.Root for archives.

// Open opens the regular file at p for reading and returns it with its stat. Errors as ReadFile.
func (r *Root) Open(p string) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	full, err := r.full(p)
	if err != nil {
		return nil, st, fmt.Errorf("read %q: %w", p, err)
	}
	fd, err := r.openat2(full, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK)
	if err != nil {
		return nil, st, fmt.Errorf("read %q: %w", p, classify(err))
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, st, fmt.Errorf("read %q: %w", p, err)
	}
	if err := wantRegular(st.Mode); err != nil {
		unix.Close(fd)
		return nil, st, fmt.Errorf("read %q: %w", p, err)
	}
	return os.NewFile(uintptr(fd), p), st, nil
}

// OpenRoot opens the directory at p as an os.Root, which confines every path under it (Go's own
// resolution, symlinks included). The directory is resolved inside r first, and the os.Root opened
// through its fd, so nothing swapped in between is reached. Errors: ErrNotFound, ErrInvalidRequest
// (not a directory).
func (r *Root) OpenRoot(p string) (*os.Root, error) {
	full, err := r.full(p)
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", p, err)
	}
	fd, err := r.openat2(full, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", p, classify(err))
	}
	defer unix.Close(fd)
	root, err := os.OpenRoot("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", p, err)
	}
	return root, nil
}

// MkdirAll makes the directory at p and its parents, as WriteFile does for a file's parents.
func (r *Root) MkdirAll(p string) error {
	full, err := r.full(p)
	if err != nil {
		return fmt.Errorf("mkdir %q: %w", p, err)
	}
	fd, err := r.mkdirAll(full, 0)
	if err != nil {
		return fmt.Errorf("mkdir %q: %w", p, err)
	}
	unix.Close(fd)
	return nil
}

// OpenPath resolves the directory at p and returns an O_PATH fd of it; the caller closes it. Its
// /proc/self/fd path names the directory itself, for calls that take a path (inotify).
func (r *Root) OpenPath(p string) (int, error) {
	full, err := r.full(p)
	if err != nil {
		return -1, fmt.Errorf("open %q: %w", p, err)
	}
	fd, err := r.openat2(full, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, fmt.Errorf("open %q: %w", p, classify(err))
	}
	return fd, nil
}

// Dir is a directory inside a root, resolved once: every call on it works on its fd, so a symlink
// planted in its path later redirects nothing.
type Dir struct {
	fd   int
	path string // for messages
}

// Parent resolves the parent directory of the file at p, making it and its parents as WriteFile
// does when create is set, and returns it with the file's name. Errors: ErrInvalidRequest when p
// names a directory or a parent is not one, ErrNotFound for a missing parent or a dangling symlink.
func (r *Root) Parent(p string, create bool) (*Dir, string, error) {
	full, err := r.full(p)
	if err != nil {
		return nil, "", fmt.Errorf("write %q: %w", p, err)
	}
	dir, name := split(full)
	if name == "" || name == "." || name == ".." {
		return nil, "", fmt.Errorf("write %q: names a directory: %w", p, sandbox.ErrInvalidRequest)
	}
	var dfd int
	if create {
		dfd, err = r.mkdirAll(dir, 0)
	} else if dfd, err = r.openat2(dir, unix.O_PATH|unix.O_DIRECTORY); err != nil {
		err = classify(err)
	}
	if err != nil {
		return nil, "", fmt.Errorf("write %q: %w", p, err)
	}
	return &Dir{fd: dfd, path: dir}, name, nil
}

// Close releases the directory's fd.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// FileMode returns the permissions of the regular file name in d, 0 when there is none. A directory
// there is ErrInvalidRequest.
func (d *Dir) FileMode(name string) (uint32, error) {
	var st unix.Stat_t
	switch err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return 0, fmt.Errorf("%s/%s is a directory: %w", d.path, name, sandbox.ErrInvalidRequest)
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG:
		return st.Mode & 0o7777, nil
	case err != nil && err != unix.ENOENT:
		return 0, classify(err)
	}
	return 0, nil
}

// CreateTemp makes an exclusive temporary file beside name.
func (d *Dir) CreateTemp(name string) (string, *os.File, error) {
	tmp, fd, err := createTemp(d.fd, name)
	if err != nil {
		return "", nil, classify(err)
	}
	return tmp, os.NewFile(uintptr(fd), tmp), nil
}

// OpenPartial opens (create: or makes) the regular file name in d for writing, never through a
// symlink, and returns it with its size.
func (d *Dir) OpenPartial(name string, create bool) (*os.File, int64, error) {
	flags := unix.O_RDWR | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	if create {
		flags |= unix.O_CREAT
	}
	fd, err := unix.Openat(d.fd, name, flags, 0o644)
	if err != nil {
		return nil, 0, classify(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, err
	}
	if err := wantRegular(st.Mode); err != nil {
		unix.Close(fd)
		return nil, 0, err
	}
	return os.NewFile(uintptr(fd), name), st.Size, nil
}

// Rename renames from over to, both in d.
func (d *Dir) Rename(from, to string) error { return classify(unix.Renameat(d.fd, from, d.fd, to)) }

// Remove removes the file name in d.
func (d *Dir) Remove(name string) error { return classify(unix.Unlinkat(d.fd, name, 0)) }

// Sync makes d's entries durable.
func (d *Dir) Sync() {
	if sfd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		_ = unix.Fsync(sfd)
		_ = unix.Close(sfd)
	}
}

// RemoveStale removes the files of d whose names start with prefix and contain mark and that have not
// changed for age: partial uploads nobody came back for. It looks at no more than limit entries.
func (d *Dir) RemoveStale(prefix, mark string, age time.Duration, limit int) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	names, _ := f.Readdirnames(limit)
	cutoff := time.Now().Add(-age)
	for _, n := range names {
		if !strings.HasPrefix(n, prefix) || !strings.Contains(n, mark) {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(d.fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		if time.Unix(st.Mtim.Unix()).Before(cutoff) {
			_ = unix.Unlinkat(d.fd, n, 0)
		}
	}
}

// Path is the directory as found, for messages.
func (d *Dir) Path() string { return d.path }
