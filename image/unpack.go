package image

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrLayerTooLarge is returned when a layer's files add up to more than the store's bound.
var ErrLayerTooLarge = errors.New("layer past the bound of unpacked bytes")

// OCI's whiteout names (image-spec, layer.md).
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// opaqueXattr marks an overlayfs directory that hides the same directory of the layers below.
const opaqueXattr = "trusted.overlay.opaque"

// unpackLayer unpacks the uncompressed layer tar r into the empty directory dir, in overlayfs's
// format: a whiteout ".wh.NAME" becomes a 0:0 character device NAME, an opaque marker the
// trusted.overlay.opaque xattr of its directory. Every entry is made through an os.Root of dir, which
// resolves each path, the layer's own symlinks and hard link targets included, inside dir and refuses
// one that would leave it: such a layer fails whole. Device nodes are dropped (a sandbox's /dev is its
// own, and its root is mounted nodev); of the xattrs a layer carries, only user.* ones are kept. The
// files' sizes, sparse ones at their full length, add up to at most max bytes (ErrLayerTooLarge). It
// returns the layer's diffID, the sha256 of r as read to its end.
//
// Why not a library: docs/design/images.md.
func unpackLayer(dir string, r io.Reader, max int64) (string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	h := sha256.New()
	tr := tar.NewReader(io.TeeReader(r, h))
	var total int64
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("read the layer: %w", err)
		}
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeGNUSparse {
			total += hdr.Size
			if hdr.Size < 0 || total > max {
				return "", fmt.Errorf("%s: %d bytes so far, at most %d: %w", hdr.Name, total, max, ErrLayerTooLarge)
			}
		}
		if err := unpackEntry(root, hdr, tr); err != nil {
			return "", fmt.Errorf("unpack %q: %w", hdr.Name, err)
		}
	}
	// What follows the tar's end is part of the blob: hashed too, as the diffID covers it.
	if _, err := io.Copy(io.Discard, io.TeeReader(r, h)); err != nil {
		return "", fmt.Errorf("read the layer: %w", err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// entryName is hdr's path relative to the layer's root ("" for the root itself): made absolute and
// cleaned first, so that no ".." climbs above it.
func entryName(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

func unpackEntry(root *os.Root, hdr *tar.Header, r io.Reader) error {
	name := entryName(hdr.Name)
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	if name == "" {
		return nil // the root's own entry: the root stays the store's directory
	}
	if dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if base == whiteoutOpaque {
		return setXattr(root, dir, opaqueXattr, "y")
	}
	if strings.HasPrefix(base, whiteoutPrefix+whiteoutPrefix) {
		return nil // another whiteout meta file (aufs's): nothing of the tree
	}
	if hidden, ok := strings.CutPrefix(base, whiteoutPrefix); ok {
		if hidden == "" || hidden == "." || hidden == ".." {
			return errors.New("a whiteout of no name")
		}
		target := path.Join(dir, hidden)
		if err := root.RemoveAll(target); err != nil {
			return err
		}
		return mknodIn(root, dir, hidden, unix.S_IFCHR, 0)
	}
	// What the layer had at the name before is replaced, a directory by a directory excepted.
	if st, err := root.Lstat(name); err == nil && !(st.IsDir() && hdr.Typeflag == tar.TypeDir) {
		if err := root.RemoveAll(name); err != nil {
			return err
		}
	}
	mode := fs.FileMode(hdr.Mode).Perm()
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := root.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	case tar.TypeReg, tar.TypeGNUSparse:
		f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		// The target is data: resolved, when ever, inside a root (a sandbox's, or this one's).
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		return root.Lchown(name, hdr.Uid, hdr.Gid)
	case tar.TypeLink:
		// Both ends inside the layer: a target outside (or through a symlink out) is refused.
		return root.Link(entryName(hdr.Linkname), name)
	case tar.TypeFifo:
		if err := mknodIn(root, dir, base, unix.S_IFIFO, 0); err != nil {
			return err
		}
	case tar.TypeChar, tar.TypeBlock:
		return nil
	default:
		return nil // pax and GNU metadata entries are the reader's; nothing else has a file
	}
	if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	// After the owner: chown clears the set-id bits, which the layer may mean to keep (they do nothing
	// in a sandbox, whose root is mounted nosuid and whose processes gain no privileges).
	if err := root.Chmod(name, mode|setIDBits(hdr.Mode)); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeFifo {
		return root.Chtimes(name, hdr.AccessTime, hdr.ModTime) // opening it for its xattrs would wait for a writer
	}
	for k, v := range hdr.PAXRecords {
		if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok && strings.HasPrefix(x, "user.") {
			if err := setXattr(root, name, x, v); err != nil && !errors.Is(err, unix.ENOTSUP) {
				return err
			}
		}
	}
	return root.Chtimes(name, hdr.AccessTime, hdr.ModTime)
}

// setIDBits are the set-uid, set-gid and sticky bits of a tar mode, as os.FileMode bits.
func setIDBits(mode int64) fs.FileMode {
	var m fs.FileMode
	if mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// mknodIn makes the node base of type typ in the directory dir of root.
func mknodIn(root *os.Root, dir, base string, typ uint32, dev int) error {
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if st, err := d.Stat(); err != nil || !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return unix.Mknodat(int(d.Fd()), base, typ|0o644, dev)
}

// setXattr sets the xattr k of the file or directory name of root.
func setXattr(root *os.Root, name, k, v string) error {
	f, err := root.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fsetxattr(int(f.Fd()), k, []byte(v), 0)
}
