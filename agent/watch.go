package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/fsroot"
)

// Watches: inotify on a directory (and, recursive, on every directory under it, new ones as they
// appear), its events turned into the domain's changes. Every directory is opened through an os.Root
// of the watched one and watched through its fd's /proc path, so a symlink planted under it is never
// followed out. The changes wait in a bounded queue; what does not fit is dropped and an overflow
// change said in its place, as for the kernel's own IN_Q_OVERFLOW.

// Bounds of one watch.
const (
	watchQueue  = 1024 // changes waiting to be read
	maxWatchDir = 8192 // directories one recursive watch follows
)

const watchMask = unix.IN_CREATE | unix.IN_CLOSE_WRITE | unix.IN_MODIFY | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// Watch is one open watch; it is a sandbox.FileWatch.
type Watch struct {
	f         *Files
	key       any
	root      *fsroot.Root // the sandbox's, where base is looked up again by removed
	dev, ino  uint64       // the watched directory's
	rt        *os.Root
	in        *os.File // the inotify descriptor
	base      string   // the watched path as the client gave it
	recursive bool

	dirs map[int32]string // watch descriptor -> directory relative to the watched one ("" for it)

	out       chan sandbox.FileChange
	dropped   bool
	last      sandbox.FileChange // the change sent last, to coalesce repeats
	closeOnce sync.Once
	done      chan struct{}
	err       error
}

var _ sandbox.FileWatch = (*Watch)(nil)

// Watch starts watching the directory dir. key names the sandbox for the bound of sandbox.MaxWatches.
//
// Errors: ErrNotFound, ErrInvalidRequest (not a directory), ErrInvalidState (too many watches).
func (f *Files) Watch(root *fsroot.Root, key any, dir string, recursive bool) (*Watch, error) {
	f.mu.Lock()
	if f.watches == nil {
		f.watches = map[any]int{}
	}
	if f.watches[key] >= sandbox.MaxWatches {
		f.mu.Unlock()
		return nil, fmt.Errorf("watch %q: %d watches are open on this sandbox, the most there may be: %w", dir, sandbox.MaxWatches, sandbox.ErrInvalidState)
	}
	f.watches[key]++
	f.mu.Unlock()
	w, err := startWatch(root, dir, recursive)
	if err != nil {
		f.release(key)
		return nil, err
	}
	w.f, w.key = f, key
	go w.run()
	return w, nil
}

func (f *Files) release(key any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watches[key]--; f.watches[key] <= 0 {
		delete(f.watches, key)
	}
}

func startWatch(root *fsroot.Root, dir string, recursive bool) (*Watch, error) {
	rt, err := root.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		rt.Close()
		return nil, fmt.Errorf("watch %q: %w", dir, err)
	}
	w := &Watch{root: root, rt: rt, in: os.NewFile(uintptr(fd), "inotify"), base: dir, recursive: recursive,
		dirs: map[int32]string{}, out: make(chan sandbox.FileChange, watchQueue), done: make(chan struct{})}
	if fi, err := rt.Stat("."); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			w.dev, w.ino = uint64(st.Dev), st.Ino
		}
	}
	if err := w.add(""); err != nil {
		w.in.Close()
		rt.Close()
		return nil, fmt.Errorf("watch %q: %w", dir, err)
	}
	if recursive {
		w.addTree("", false)
	}
	return w, nil
}

// add watches the directory rel, opened through the root.
func (w *Watch) add(rel string) error {
	if len(w.dirs) >= maxWatchDir {
		return fmt.Errorf("more than %d directories: %w", maxWatchDir, sandbox.ErrInvalidRequest)
	}
	name := rel
	if name == "" {
		name = "."
	}
	d, err := w.rt.OpenFile(name, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	if fi, err := d.Stat(); err != nil || !fi.IsDir() {
		return fmt.Errorf("not a directory: %w", sandbox.ErrInvalidRequest)
	}
	wd, err := unix.InotifyAddWatch(int(w.in.Fd()), "/proc/self/fd/"+strconv.Itoa(int(d.Fd())), watchMask)
	if err != nil {
		return err
	}
	w.dirs[int32(wd)] = rel
	return nil
}

// addTree watches every directory under rel; past maxWatchDir, the rest is not followed and an
// overflow said. announce says a created change of every entry found: what was made in a new
// directory before its watch was added.
func (w *Watch) addTree(rel string, announce bool) {
	start := rel
	if start == "" {
		start = "."
	}
	_ = fs.WalkDir(w.rt.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == start {
			return nil
		}
		if announce {
			w.send(sandbox.FileChange{Kind: sandbox.FileCreated, Path: w.join(p), Dir: d.IsDir()})
		}
		if !d.IsDir() {
			return nil
		}
		if w.add(p) != nil {
			if len(w.dirs) >= maxWatchDir {
				w.send(sandbox.FileChange{Kind: sandbox.FileOverflow})
				return fs.SkipAll
			}
			return fs.SkipDir
		}
		return nil
	})
}

// Changes is the channel of changes; it is closed when the watch ends.
func (w *Watch) Changes() <-chan sandbox.FileChange { return w.out }

// Err says why the watch ended, once Changes is closed: nil after Close.
func (w *Watch) Err() error {
	<-w.done
	return w.err
}

// Close ends the watch.
func (w *Watch) Close() error {
	w.closeOnce.Do(func() { w.in.Close() })
	<-w.done
	return nil
}

// run reads the inotify descriptor until it is closed or the watched directory goes.
func (w *Watch) run() {
	defer func() {
		w.closeOnce.Do(func() { w.in.Close() })
		w.rt.Close()
		w.f.release(w.key)
		close(w.out)
		close(w.done)
	}()
	buf := make([]byte, 64<<10)
	for {
		// The watch holds the directory open, so its removal sends no IN_DELETE_SELF: it is looked
		// for between reads.
		_ = w.in.SetReadDeadline(time.Now().Add(removedPoll))
		n, err := w.in.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if w.removed() {
				w.err = fmt.Errorf("watch %q: the directory was removed: %w", w.base, sandbox.ErrNotFound)
				return
			}
			continue
		}
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.err = fmt.Errorf("watch %q: %w", w.base, err)
			}
			return
		}
		if gone := w.events(buf[:n]); gone {
			w.err = fmt.Errorf("watch %q: the directory was removed or moved: %w", w.base, sandbox.ErrNotFound)
			return
		}
	}
}

// removedPoll is how often a quiet watch checks that its directory is still there.
const removedPoll = time.Second

// removed says whether the watched directory was removed: its link count is 0, or its path names
// it no more (gVisor keeps the count of a removed directory that is held open).
func (w *Watch) removed() bool {
	fi, err := w.rt.Stat(".")
	if err != nil {
		return true
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink == 0 {
		return true
	}
	fd, err := w.root.OpenPath(w.base)
	if err != nil {
		return errors.Is(err, sandbox.ErrNotFound)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && (st.Dev != w.dev || st.Ino != w.ino)
}

// events turns one read of inotify events into changes; gone says the watched directory went.
func (w *Watch) events(b []byte) (gone bool) {
	var from *sandbox.FileChange // a rename's first half, until its second
	var fromCookie uint32
	flush := func() {
		if from != nil {
			w.send(sandbox.FileChange{Kind: sandbox.FileDeleted, Path: from.From, Dir: from.Dir})
			from = nil
		}
	}
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		size := unix.SizeofInotifyEvent + int(ev.Len)
		if size > len(b) {
			break
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:size]), "\x00")
		b = b[size:]
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			flush()
			w.send(sandbox.FileChange{Kind: sandbox.FileOverflow})
			continue
		}
		rel, ok := w.dirs[ev.Wd]
		if !ok {
			continue
		}
		if ev.Mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, ev.Wd)
			if rel == "" {
				flush()
				return true
			}
			continue
		}
		if ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
			if rel == "" {
				flush()
				return true
			}
			continue
		}
		relName := path.Join(rel, name)
		p := w.join(relName)
		isDir := ev.Mask&unix.IN_ISDIR != 0
		if from != nil && !(ev.Mask&unix.IN_MOVED_TO != 0 && ev.Cookie == fromCookie) {
			flush()
		}
		switch {
		case ev.Mask&unix.IN_MOVED_FROM != 0:
			from, fromCookie = &sandbox.FileChange{From: p, Dir: isDir}, ev.Cookie
		case ev.Mask&unix.IN_MOVED_TO != 0:
			if from != nil {
				w.send(sandbox.FileChange{Kind: sandbox.FileRenamed, Path: p, From: from.From, Dir: isDir})
				from = nil
			} else {
				w.send(sandbox.FileChange{Kind: sandbox.FileCreated, Path: p, Dir: isDir})
			}
			if isDir && w.recursive {
				w.follow(relName)
			}
		case ev.Mask&unix.IN_CREATE != 0:
			w.send(sandbox.FileChange{Kind: sandbox.FileCreated, Path: p, Dir: isDir})
			if isDir && w.recursive {
				w.follow(relName)
			}
		case ev.Mask&unix.IN_DELETE != 0:
			w.send(sandbox.FileChange{Kind: sandbox.FileDeleted, Path: p, Dir: isDir})
		case ev.Mask&(unix.IN_MODIFY|unix.IN_CLOSE_WRITE) != 0:
			w.send(sandbox.FileChange{Kind: sandbox.FileModified, Path: p})
		}
	}
	flush()
	return false
}

// follow watches a new directory and what is already under it, saying what it finds there as
// created (a change made before the watch was added would be missed otherwise; one made after may
// come twice).
func (w *Watch) follow(rel string) {
	if w.add(rel) == nil {
		w.addTree(rel, true)
	} else if len(w.dirs) >= maxWatchDir {
		w.send(sandbox.FileChange{Kind: sandbox.FileOverflow})
	}
}

// join is the path of rel under the watched directory, as the client would pass it back.
func (w *Watch) join(rel string) string {
	base := strings.TrimRight(w.base, "/")
	switch {
	case w.base == "." || base == ".":
		return rel
	case base == "":
		return "/" + rel
	}
	return base + "/" + rel
}

// send queues c without blocking: a full queue drops it, and an overflow is said before the next
// change that fits. A change like the one sent last (writes to one file) is not repeated.
func (w *Watch) send(c sandbox.FileChange) {
	if c == w.last && c.Kind == sandbox.FileModified && !w.dropped {
		return
	}
	if w.dropped {
		select {
		case w.out <- sandbox.FileChange{Kind: sandbox.FileOverflow}:
			w.dropped = false
		default:
			return
		}
	}
	select {
	case w.out <- c:
		w.last = c
	default:
		w.dropped = true
	}
}

// watch answers the changes as WatchLine lines, a heartbeat line when nothing happened for
// protocol.WatchHeartbeatSeconds, and an end line when the watch ended on its own.
func (a *Agent) watch(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	q := r.URL.Query()
	wt, err := a.files.Watch(a.root, nil, q.Get("path"), q.Get("recursive") == "1")
	if err != nil {
		writeErr(w, err)
		return
	}
	defer wt.Close()
	w.Header().Set("Content-Type", protocol.WatchMediaType)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	line := func(l protocol.WatchLine) bool {
		return writeJSONLine(w, l) == nil && rc.Flush() == nil
	}
	if !line(protocol.WatchLine{Kind: "heartbeat"}) {
		return
	}
	beat := time.NewTicker(protocol.WatchHeartbeatSeconds * time.Second)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-beat.C:
			if !line(protocol.WatchLine{Kind: "heartbeat"}) {
				return
			}
		case c, ok := <-wt.Changes():
			if !ok {
				msg := "the watch ended"
				if err := wt.Err(); err != nil {
					msg = err.Error()
				}
				line(protocol.WatchLine{Kind: "end", Message: msg})
				return
			}
			if !line(protocol.WatchLine{Kind: string(c.Kind), Path: c.Path, From: c.From, Dir: c.Dir}) {
				return
			}
		}
	}
}
