package agent

import (
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// diskDir is a directory of the test's on a file system whose page cache can be dropped (not tmpfs,
// whose pages are the file).
func diskDir(t *testing.T) string {
	for _, dir := range []string{t.TempDir(), "/var/tmp"} {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err == nil && st.Type != unix.TMPFS_MAGIC {
			d, err := os.MkdirTemp(dir, "writebehind")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	t.Fatal("no directory here on a disk's file system, neither the test's nor /var/tmp")
	return ""
}

// cachedBytes is how much of file is in the page cache (mincore over a mapping of it).
func cachedBytes(t *testing.T, file *os.File, size int64) int64 {
	m, err := unix.Mmap(int(file.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	page := int64(os.Getpagesize())
	vec := make([]byte, (size+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	var n int64
	for _, v := range vec {
		n += int64(v & 1)
	}
	return n * page
}

// A large upload keeps about a window of its file in the page cache, not the whole file, and the file
// holds every byte in order: resumed at an offset too.
func TestCopyHashedWritesBehind(t *testing.T) {
	const size = 384 << 20
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i*31 + i/509)
	}
	for _, offset := range []int64{0, 5<<20 + 4096*3 + 17} {
		file, err := os.Create(diskDir(t) + "/f")
		if err != nil {
			t.Fatal(err)
		}
		defer file.Close()
		want := sha256.New()
		if offset > 0 {
			head := bytes.Repeat([]byte{7}, int(offset))
			if _, err := file.Write(head); err != nil {
				t.Fatal(err)
			}
			want.Write(head)
		}
		src := io.LimitReader(&repeat{block: block}, size)
		h := sha256.New()
		n, err := copyHashed(file, h, src)
		if err != nil || n != size {
			t.Fatalf("copied %d of %d: %v", n, size, err)
		}
		body := sha256.New()
		io.Copy(io.MultiWriter(want, body), io.LimitReader(&repeat{block: block}, size))
		if !bytes.Equal(h.Sum(nil), body.Sum(nil)) {
			t.Fatalf("offset %d: the copy's hash is not the body's", offset)
		}
		cached := cachedBytes(t, file, offset+size)
		// The window and the chunk being written, and slack for pages still under writeback when their
		// turn to be dropped came.
		if limit := int64(writeBehindWindow + 2*writeBehindChunk + 64<<20); cached > limit {
			t.Errorf("offset %d: %d MiB of the %d MiB file cached after the copy, want at most %d MiB", offset, cached>>20, (offset+size)>>20, limit>>20)
		}
		got := sha256.New()
		if _, err := io.Copy(got, io.NewSectionReader(file, 0, offset+size)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
			t.Fatalf("offset %d: the file is not the bytes written", offset)
		}
		t.Logf("offset %d: %d MiB of %d MiB cached after the copy", offset, cached>>20, (offset+size)>>20)
	}
}

// repeat reads block again and again.
type repeat struct {
	block []byte
	off   int
}

func (r *repeat) Read(p []byte) (int, error) {
	n := copy(p, r.block[r.off:])
	r.off = (r.off + n) % len(r.block)
	return n, nil
}

// A read of a file that was not cached leaves about a window of it cached, and hands out every byte
// in order; a read of a file that was cached leaves it cached.
func TestReadDropsBehindWhatItBroughtIn(t *testing.T) {
	const size = 256 << 20
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i*13 + i/251)
	}
	file, err := os.Create(diskDir(t) + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if _, err := copyHashed(file, sha256.New(), io.LimitReader(&repeat{block: block}, size)); err != nil {
		t.Fatal(err)
	}
	want := sha256.New()
	io.Copy(want, io.LimitReader(&repeat{block: block}, size))
	read := func(start int64) ([]byte, int64) {
		t.Helper()
		if err := file.Sync(); err != nil { // written, so that all of it can be dropped
			t.Fatal(err)
		}
		h := sha256.New()
		buf := make([]byte, 1<<20)
		if _, err := io.CopyBuffer(h, newDropBehind(io.NewSectionReader(file, start, size-start), file, start, size-start), buf); err != nil {
			t.Fatal(err)
		}
		return h.Sum(nil), cachedBytes(t, file, size)
	}
	if err := unix.Fadvise(int(file.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	sum, cached := read(0)
	if !bytes.Equal(sum, want.Sum(nil)) {
		t.Fatal("the read is not the file's bytes")
	}
	// The window, a chunk read past it, and the kernel's readahead (8 MiB on the disks here, twice
	// that ahead at times, in folios of up to 2 MiB).
	const limit = 128 << 20
	if cached > limit {
		t.Errorf("%d MiB of the %d MiB file cached after a read of it, uncached before; want at most %d MiB", cached>>20, size>>20, limit>>20)
	} else {
		t.Logf("%d MiB of the %d MiB file cached after a read of it", cached>>20, size>>20)
	}
	// From an offset that is no chunk's, the same.
	unix.Fadvise(int(file.Fd()), 0, 0, unix.FADV_DONTNEED)
	if _, cached := read(3<<20 + 5); cached > limit {
		t.Errorf("%d MiB cached after a read from an offset", cached>>20)
	}
	// Cached before: left so.
	io.Copy(io.Discard, io.NewSectionReader(file, 0, size))
	if _, cached := read(0); cached < size-writeBehindChunk {
		t.Errorf("%d MiB of %d MiB cached after a read of a file that was all cached", cached>>20, size>>20)
	}
}
