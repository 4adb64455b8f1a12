package agent

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// reaper is the only code in the agent that waits for children. As PID 1 (or a child subreaper) the
// agent inherits every orphan of the sandbox; a wait4(-1) loop collects them all, and hands the status
// of a process the agent started to whoever registered its pid. Registration happens under the same lock
// as the fork, so a child that exits at once cannot be reaped before its waiter exists.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]chan unix.WaitStatus
	sig     chan os.Signal
	done    chan struct{}
}

func newReaper() *reaper {
	r := &reaper{
		waiters: make(map[int]chan unix.WaitStatus),
		sig:     make(chan os.Signal, 1),
		done:    make(chan struct{}),
	}
	signal.Notify(r.sig, syscall.SIGCHLD)
	go r.loop()
	return r
}

// start forks a process with fork and registers it; the returned channel receives its wait status.
func (r *reaper) start(fork func() (int, error)) (int, <-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiters[pid] = ch
	return pid, ch, nil
}

func (r *reaper) loop() {
	for {
		select {
		case <-r.sig:
		case <-r.done:
			return
		}
		r.reapAll()
	}
}

// reapAll collects every child that has exited. Signals coalesce, so one SIGCHLD may stand for many.
func (r *reaper) reapAll() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.mu.Lock()
		if ch, ok := r.waiters[pid]; ok {
			ch <- ws
			delete(r.waiters, pid)
		}
		r.mu.Unlock()
	}
}

func (r *reaper) stop() {
	signal.Stop(r.sig)
	close(r.done)
}
