package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A sandbox's disk is a sparse ext4 image of its own under its directory, attached to a loop device
// that frees itself on unmount, and mounted under the directory; /workspace is a directory on it.
//
// Making one is on the path of every cold create, so neither mkfs.ext4 nor mount(8) runs there for a
// disk of the default size: the provider makes one empty file system of that size once (mkfs.ext4
// into disks/, kept), and such a disk is a copy of that image's few data extents (under a MiB for a
// GiB) into a new sparse file, attached with LOOP_CONFIGURE and mounted with mount(2): ≈1 ms instead
// of ≈25 (docs/performance.md). A disk of another size gets an mkfs.ext4 of its own: a client asking
// for many sizes must not leave an image of each behind. Every disk of the default size has the same
// file system UUID, which nothing here reads.

// diskTemplates makes and finds the empty file system image of the default size under dir.
type diskTemplates struct {
	dir string
	mib int64      // the default size
	mu  sync.Mutex // serializes the making of the image
}

// image returns the path of the empty image of the default size, making it if needed.
func (t *diskTemplates) image(ctx context.Context) (string, error) {
	path := filepath.Join(t.dir, "ext4-"+strconv.FormatInt(t.mib, 10)+"m.img")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(t.dir, ".ext4-")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	f.Close()
	os.Remove(tmp)
	defer os.Remove(tmp) // a no-op once renamed
	if err := mkfs(ctx, tmp, t.mib); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}

// mkfs makes an ext4 file system of mib MiB in the new sparse file img.
func mkfs(ctx context.Context, img string, mib int64) error {
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(mib << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
		"-E", "nodiscard", img).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// makeDisk makes a disk of mib MiB at img and mounts it at dir.
func (t *diskTemplates) makeDisk(ctx context.Context, img, dir string, mib int64) error {
	if mib == t.mib {
		tmpl, err := t.image(ctx)
		if err != nil {
			return err
		}
		if err := copySparse(tmpl, img); err != nil {
			return err
		}
	} else if err := mkfs(ctx, img, mib); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return mountLoop(img, dir)
}

// copySparse copies the file src to the new file dst, its data extents only: dst has src's holes.
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = func() error {
		for off := int64(0); off < st.Size(); {
			data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
			if errors.Is(err, unix.ENXIO) {
				break // only a hole is left
			}
			if err != nil {
				return err
			}
			hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
			if err != nil {
				return err
			}
			if _, err := io.Copy(io.NewOffsetWriter(out, data), io.NewSectionReader(in, data, hole-data)); err != nil {
				return err
			}
			off = hole
		}
		return out.Truncate(st.Size())
	}()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// mountLoop attaches img to a free loop device that frees itself once unmounted, and mounts its ext4
// file system at dir (nosuid, nodev).
func mountLoop(img, dir string) error {
	f, err := os.OpenFile(img, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer ctl.Close()
	// Another process may take the free device between asking for it and configuring it: ask again.
	for try := 0; ; try++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("loop-control: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		loop, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			if try < 100 && errors.Is(err, os.ErrNotExist) {
				time.Sleep(time.Millisecond) // udev has not made the node yet
				continue
			}
			return err
		}
		// Direct I/O to the image: the sandbox's file system has its page cache, and the image's
		// own would hold every byte written twice, copied by the loop's worker (the kernel leaves the
		// flag out where the image's file system cannot take direct I/O).
		cfg := unix.LoopConfig{Fd: uint32(f.Fd()), Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO}}
		copy(cfg.Info.File_name[:], img)
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) && try < 100 {
			loop.Close()
			continue
		}
		if err != nil {
			loop.Close()
			return fmt.Errorf("configure %s: %w", dev, err)
		}
		// The mount holds the device from here on; closing ours leaves autoclear to free it.
		err = unix.Mount(dev, dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, "")
		loop.Close()
		if err != nil {
			return fmt.Errorf("mount %s on %s: %w", dev, dir, err)
		}
		return nil
	}
}
