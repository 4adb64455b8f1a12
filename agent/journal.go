package agent

import (
	"context"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

// journal keeps the last size bytes of a process's output in a file used as a ring: the byte at
// offset o (counted from the process's first byte) is at o%size in the file. Offsets below end-size
// are dropped. Appends and reads hold one lock, so a read never sees a region being overwritten.
//
// The newest bytes are kept in memory as well (recent, a ring of recentBytes): a reader that keeps up
// with the output, as a terminal's stream or a waiting poll does, takes them from there, and reads
// the file back only when it fell further behind or starts from an older offset. Every byte is
// written to the file before any reader can see it.
type journal struct {
	f    *os.File
	size int64

	mu     sync.Mutex
	end    int64         // offset past the last byte appended
	done   bool          // no byte will follow end
	failed error         // the file could not be written: nothing past end was kept
	wake   chan struct{} // closed and replaced at each append and at close
	recent []byte        // the byte at offset o is at o%len(recent), from end-len(recent) on; nil once done
}

// recentBytes is how much of the newest output a journal keeps in memory too.
const recentBytes = 16 << 10

// newJournal creates the journal's file on the file system of dir, without a name (O_TMPFILE), so that
// nothing in the sandbox can reach it or see it, and it goes with the journal. Where the file system
// cannot, the file is made with a name and unlinked at once.
func newJournal(dir string, size int64) (*journal, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return &journal{f: os.NewFile(uintptr(fd), "journal"), size: size, wake: make(chan struct{})}, nil
	}
	f, err := os.CreateTemp(dir, ".journal-")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name())
	return &journal{f: f, size: size, wake: make(chan struct{})}, nil
}

// append writes p at the end. Past a write error it keeps nothing more (failed says why) but the
// process is never held up: its output is read and dropped.
func (j *journal) append(p []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failed != nil || len(p) == 0 {
		return
	}
	if int64(len(p)) > j.size { // only its last size bytes can be kept
		j.end += int64(len(p)) - j.size
		p = p[int64(len(p))-j.size:]
	}
	pos := j.end % j.size
	first := min(int64(len(p)), j.size-pos)
	_, err := j.f.WriteAt(p[:first], pos)
	if err == nil && first < int64(len(p)) {
		_, err = j.f.WriteAt(p[first:], 0)
	}
	if err != nil {
		j.failed = err
		j.signal()
		return
	}
	j.remember(p)
	j.end += int64(len(p))
	j.signal()
}

// remember copies p, appended at j.end, into recent.
func (j *journal) remember(p []byte) {
	if j.recent == nil {
		j.recent = make([]byte, min(recentBytes, j.size))
	}
	r := int64(len(j.recent))
	at := j.end // the offset of p[0]
	if int64(len(p)) > r {
		at += int64(len(p)) - r
		p = p[int64(len(p))-r:]
	}
	n := copy(j.recent[at%r:], p)
	copy(j.recent, p[n:])
}

// fromRecent copies the bytes from offset start into data (at most len(recent) bytes, none past end),
// when recent holds them all.
func (j *journal) fromRecent(data []byte, start int64) bool {
	r := int64(len(j.recent))
	if r == 0 || start < j.end-r {
		return false
	}
	n := copy(data, j.recent[start%r:])
	copy(data[n:], j.recent)
	return true
}

func (j *journal) signal() {
	close(j.wake)
	j.wake = make(chan struct{})
}

// close says no byte follows; the file stays readable until release.
func (j *journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.done {
		j.done = true
		j.recent = nil
		j.signal()
	}
}

func (j *journal) release() { j.f.Close() }

// bounds returns the oldest offset kept, the end, and whether the journal is done.
func (j *journal) bounds() (oldest, end int64, done bool, failed error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return max(0, j.end-j.size), j.end, j.done, j.failed
}

// read returns up to max bytes from offset after, or from the oldest offset kept when after is
// older, waiting until ctx ends for a byte when there is none yet and more may come. An offset past
// the end is ErrInvalidRequest.
func (j *journal) read(ctx context.Context, after int64, max int) (start int64, data []byte, end int64, done bool, err error) {
	for {
		j.mu.Lock()
		oldest := j.end - j.size
		if oldest < 0 {
			oldest = 0
		}
		if after > j.end || after < 0 {
			end := j.end
			j.mu.Unlock()
			return 0, nil, 0, false, fmt.Errorf("offset %d is past the end of the output, %d: %w", after, end, sandbox.ErrInvalidRequest)
		}
		start = after
		if start < oldest {
			start = oldest
		}
		n := j.end - start
		finished := j.done || j.failed != nil
		if n > 0 || finished || ctx.Err() != nil {
			if n > int64(max) {
				n = int64(max)
			}
			data = make([]byte, n)
			var rerr error
			if !j.fromRecent(data, start) {
				pos := start % j.size
				first := min(n, j.size-pos)
				_, rerr = j.f.ReadAt(data[:first], pos)
				if rerr == nil && first < n {
					_, rerr = j.f.ReadAt(data[first:], 0)
				}
			}
			end, done = j.end, finished
			j.mu.Unlock()
			if rerr != nil {
				return 0, nil, 0, false, fmt.Errorf("reading the journal: %w", rerr)
			}
			return start, data, end, done && start+n == end, nil
		}
		wake := j.wake
		j.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
		}
	}
}
