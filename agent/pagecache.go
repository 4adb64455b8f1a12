package agent

import (
	"io"
	"os"
	"sync/atomic"

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
// Nothing here waits (see writeBehind): a page still dirty or under writeback when its turn to be dropped comes is
// left cached (DONTNEED skips it), so on a disk slower than the copy the kernel's dirty throttling
// paces the upload as it did before. Where the calls are not there (gVisor implements
// sync_file_range's write alone as nothing, and a file that is no regular file refuses it), the
// write-behind stops and the copy goes on through the page cache.
const (
	writeBehindChunk  = 8 << 20
	writeBehindWindow = 64 << 20
)

// writeBehind follows the writes of one copy into file, from the offset it started at. The calls run
// on a goroutine of their own, started at the first chunk, so that a write never waits for one
// (sync_file_range's write waits while the disk's queue is full): the writes go on into the page
// cache meanwhile, and the next call takes what they wrote with it.
type writeBehind struct {
	fd      int
	off     int64      // where the next write lands
	sent    int64      // handed to the goroutine below this
	ends    chan int64 // the offsets written up to, in order
	done    chan struct{}
	stopped atomic.Bool
}

// newWriteBehind follows writes into file from its current offset; a file whose offset cannot be
// read is written through the page cache as it is. close ends it.
func newWriteBehind(file *os.File) *writeBehind {
	w := &writeBehind{fd: int(file.Fd())}
	off, err := file.Seek(0, io.SeekCurrent)
	if err != nil {
		w.stopped.Store(true)
	}
	w.off, w.sent = off, off
	return w
}

// wrote records n bytes written at the offset reached.
func (w *writeBehind) wrote(n int) {
	w.off += int64(n)
	if w.off-w.sent < writeBehindChunk || w.stopped.Load() {
		return
	}
	if w.ends == nil {
		w.ends, w.done = make(chan int64, 4), make(chan struct{})
		go w.run(w.sent)
	}
	select {
	case w.ends <- w.off:
		w.sent = w.off
	default: // the calls are behind: the next end takes these bytes with it
	}
}

// run asks for each range handed to it to be written out, from start on, and drops what it asked a
// window before.
func (w *writeBehind) run(start int64) {
	defer close(w.done)
	kicked, dropped := start, start
	for end := range w.ends {
		if w.stopped.Load() {
			continue
		}
		if err := unix.SyncFileRange(w.fd, kicked, end-kicked, unix.SYNC_FILE_RANGE_WRITE); err != nil {
			w.stopped.Store(true)
			continue
		}
		kicked = end
		if to := kicked - writeBehindWindow; to > dropped {
			if err := unix.Fadvise(w.fd, dropped, to-dropped, unix.FADV_DONTNEED); err != nil {
				w.stopped.Store(true)
				continue
			}
			dropped = to
		}
	}
}

// close waits for the calls under way: the file's descriptor is the caller's again.
func (w *writeBehind) close() {
	if w.ends != nil {
		close(w.ends)
		<-w.done
	}
}

// A raw read of a file that is not in the page cache (an upload's, written behind) would bring all
// of it in, charged to the sandbox as an upload's was. dropBehind reads such a file behind itself: when
// the kernel says (cachestat(2)) that at most a quarter of the range to read is cached (an upload
// written behind leaves its last window and what the disk had not taken yet), it drops each
// chunk it read once it is a window past it; a file the sandbox has cached, all or much of it, is
// left as it is. Without cachestat (before Linux 6.5, or on gVisor) nothing is dropped.
type dropBehind struct {
	r       io.Reader
	fd      int
	off     int64 // the offset of the next read
	dropped int64 // dropped below this
}

// newDropBehind reads n bytes of file through r from offset off, dropping behind when little of them
// is cached; r itself when much is.
func newDropBehind(r io.Reader, file *os.File, off, n int64) io.Reader {
	var st unix.Cachestat_t
	fd := int(file.Fd())
	if n < writeBehindWindow || unix.Cachestat(uint(fd), &unix.CachestatRange{Off: uint64(off), Len: uint64(n)}, &st, 0) != nil ||
		int64(st.Cache)*int64(os.Getpagesize()) > n/4 {
		return r
	}
	return &dropBehind{r: r, fd: fd, off: off, dropped: off}
}

func (d *dropBehind) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	d.off += int64(n)
	if end := d.off - writeBehindWindow; end-d.dropped >= writeBehindChunk {
		_ = unix.Fadvise(d.fd, d.dropped, end-d.dropped, unix.FADV_DONTNEED)
		d.dropped = end
	}
	return n, err
}
