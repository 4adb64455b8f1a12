package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// nobody is the owner a captured file shows when its host owner is outside the sandbox's range.
const nobody = 65534

// ErrCaptureRefused is returned for an upper directory that holds what the store will not take
// whole: an overlay redirect or metacopy (whose bytes are not in the upper), or files that add up to
// more than the bound.
var ErrCaptureRefused = errors.New("upper directory cannot be captured")

// capture writes the overlayfs upper directory dir as an OCI layer tar to w: a 0:0 character device
// becomes a ".wh.NAME" whiteout, a directory with trusted.overlay.opaque=y gets a ".wh..wh..opq"
// marker. The owners on disk are host ids of the range [idBase, idBase+idSize), shown as 0.. inside;
// any other is nobody's. Other device nodes and sockets are left out (a sandbox's /dev is its own);
// only user.* xattrs are kept. A file's size counts in full, sparse or not, against max.
//
// The tree is the sandbox's: everything is read through an os.Root of dir without following a
// symlink (each one is a tar entry, its target data), so nothing outside dir is read.
func capture(w io.Writer, dir string, idBase, idSize uint32, max int64) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	var total int64
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if name == "." {
			return nil
		}
		st, err := root.Lstat(name)
		if err != nil {
			return err
		}
		sys, _ := st.Sys().(*syscall.Stat_t)
		if sys == nil {
			return fmt.Errorf("%s: no stat", name)
		}
		hdr := &tar.Header{Name: name, Mode: int64(st.Mode().Perm()), ModTime: st.ModTime(), Format: tar.FormatPAX,
			Uid: inside(sys.Uid, idBase, idSize), Gid: inside(sys.Gid, idBase, idSize)}
		if st.Mode()&fs.ModeSetuid != 0 {
			hdr.Mode |= 0o4000
		}
		if st.Mode()&fs.ModeSetgid != 0 {
			hdr.Mode |= 0o2000
		}
		if st.Mode()&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		var body *os.File
		switch typ := st.Mode().Type(); {
		case typ == fs.ModeDevice|fs.ModeCharDevice:
			if sys.Rdev != 0 {
				return nil
			}
			dir, base := path.Split(name)
			return tw.WriteHeader(&tar.Header{Name: dir + whiteoutPrefix + base, Typeflag: tar.TypeReg, Mode: 0o600,
				ModTime: st.ModTime(), Format: tar.FormatPAX})
		case typ&(fs.ModeDevice|fs.ModeSocket|fs.ModeIrregular) != 0:
			return nil
		case typ == fs.ModeSymlink:
			target, err := root.Readlink(name)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		case typ == fs.ModeNamedPipe:
			hdr.Typeflag = tar.TypeFifo
		case typ == fs.ModeDir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
			f, err := root.OpenFile(name, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
			if err != nil {
				return err
			}
			err = xattrs(f, hdr)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		case typ == 0:
			total += st.Size()
			if total > max {
				return fmt.Errorf("%s: %d bytes so far, at most %d: %w", name, total, max, ErrCaptureRefused)
			}
			f, err := root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := xattrs(f, hdr); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			hdr.Typeflag, hdr.Size, body = tar.TypeReg, st.Size(), f
		default:
			return nil
		}
		opaque := hdr.PAXRecords["opaque"] == "y"
		delete(hdr.PAXRecords, "opaque")
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if body != nil {
			// The size is the one the header says, whatever the file does meanwhile.
			if n, err := io.Copy(tw, io.LimitReader(body, hdr.Size)); err != nil {
				return err
			} else if n < hdr.Size {
				return fmt.Errorf("%s: shrank while read", name)
			}
		}
		if opaque {
			return tw.WriteHeader(&tar.Header{Name: name + "/" + whiteoutOpaque, Typeflag: tar.TypeReg, Mode: 0o600,
				ModTime: st.ModTime(), Format: tar.FormatPAX})
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// inside is the id a host id of a sandbox's range has inside it, or nobody's.
func inside(id, base, size uint32) int {
	if id < base || id-base >= size {
		return nobody
	}
	return int(id - base)
}

// xattrs records in hdr the user.* xattrs of f, and "opaque" for overlayfs's opaque marker. It
// refuses an overlay redirect or metacopy: such a file's bytes, or a directory's entries, are below.
func xattrs(f *os.File, hdr *tar.Header) error {
	fd := int(f.Fd())
	buf := make([]byte, 4096)
	n, err := unix.Flistxattr(fd, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Flistxattr(fd, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Flistxattr(fd, buf)
		}
	}
	if errors.Is(err, unix.ENOTSUP) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range strings.Split(string(buf[:n]), "\x00") {
		switch {
		case k == "":
		case k == opaqueXattr:
			v, err := getXattr(fd, k)
			if err != nil {
				return err
			}
			if v == "y" {
				setPAX(hdr, "opaque", "y")
			}
		case k == "trusted.overlay.redirect" || k == "trusted.overlay.metacopy":
			return fmt.Errorf("%s: %w", k, ErrCaptureRefused)
		case strings.HasPrefix(k, "user."):
			v, err := getXattr(fd, k)
			if err != nil {
				return err
			}
			setPAX(hdr, "SCHILY.xattr."+k, v)
		}
	}
	return nil
}

func setPAX(hdr *tar.Header, k, v string) {
	if hdr.PAXRecords == nil {
		hdr.PAXRecords = map[string]string{}
	}
	hdr.PAXRecords[k] = v
}

// getXattr reads the xattr k of fd, at most 64 KiB as the kernel bounds a value.
func getXattr(fd int, k string) (string, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Fgetxattr(fd, k, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
