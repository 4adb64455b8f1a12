package agent

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// A large upload written through the page cache as it is would keep all of its pages cached until
// the kernel's writeback came for them: a 2 GiB upload charges 2 GiB of page cache to the sandbox's
// memory cgroup (where it pushes out the sandbox's own memory), and every page of it is memory the
// machine has to find, which on a guest whose balloon hands free pages back to its host costs many
// times the copy (docs/performance.md, "Write-behind"). So copyHashed writes behind: every
// writeBehindChunk bytes it asks the kernel to start writing the chunk out (sync_file_range with
// SYNC_FILE_RANGE_WRITE, which does not wait), and it drops from the page cache what it asked to be
// written writeBehindWindow bytes before (posix_fadvise POSIX_FADV_DONTNEED), by then on the disk on
// any disk as fast as the copy. The pages it drops are the ones its next writes take, so an upload
// of any size needs about a window of page cache.
//
// Nothing here waits: a page still dirty or under writeback when its turn to be dropped comes is
// left cached (DONTNEED skips it), so on a disk slower than the copy the kernel's dirty throttling
// paces the upload as it did before. Where the calls are not there (gVisor implements
// sync_file_range's write alone as nothing, and a file that is no regular file refuses it), the
// write-behind stops and the copy goes on through the page cache.
const (
	writeBehindChunk  = 8 << 20
	writeBehindWindow = 64 << 20
)

// writeBehind follows the writes of one copy into file, from the offset it started at.
type writeBehind struct {
	fd      int
	off     int64 // where the next write lands
	kicked  int64 // asked to be written out below this
	dropped int64 // dropped from the page cache below this
	stopped bool
}

// newWriteBehind follows writes into file from its current offset; a file whose offset cannot be
// read is written through the page cache as it is.
func newWriteBehind(file *os.File) *writeBehind {
	off, err := file.Seek(0, io.SeekCurrent)
	if err != nil {
		return &writeBehind{stopped: true}
	}
	return &writeBehind{fd: int(file.Fd()), off: off, kicked: off, dropped: off}
}

// wrote records n bytes written at the offset reached.
func (w *writeBehind) wrote(n int) {
	w.off += int64(n)
	if w.stopped || w.off-w.kicked < writeBehindChunk {
		return
	}
	if err := unix.SyncFileRange(w.fd, w.kicked, w.off-w.kicked, unix.SYNC_FILE_RANGE_WRITE); err != nil {
		w.stopped = true
		return
	}
	w.kicked = w.off
	if end := w.kicked - writeBehindWindow; end > w.dropped {
		if err := unix.Fadvise(w.fd, w.dropped, end-w.dropped, unix.FADV_DONTNEED); err != nil {
			w.stopped = true
			return
		}
		w.dropped = end
	}
}
