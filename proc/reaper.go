package proc

import (
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// Reaper is a Waiter for a process that must reap every child: PID 1 in a container, or a child
// subreaper. It is the only caller of wait4 in the process: one loop reaps whatever exits, hands the
// status of each pid registered through Start to its waiter, and drops the statuses of orphans
// re-parented to it. Nothing else in the process may wait for children (os/exec's Cmd.Wait included)
// while a Reaper runs.
type Reaper struct {
	mu      sync.Mutex
	waiting map[int]chan unix.WaitStatus
	sigs    chan os.Signal
	done    chan struct{}
}

// NewReaper starts a reaper. Stop it with Stop.
func NewReaper() *Reaper {
	r := &Reaper{
		waiting: make(map[int]chan unix.WaitStatus),
		sigs:    make(chan os.Signal, 1),
		done:    make(chan struct{}),
	}
	signal.Notify(r.sigs, unix.SIGCHLD)
	go r.loop()
	return r
}

// Start forks under the reaper's lock and registers the pid before the lock is released, so a child
// that exits at once is reaped by the loop and still delivered: the loop needs the lock to deliver.
func (r *Reaper) Start(start func() (int, error)) (int, <-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiting[pid] = ch
	return pid, ch, nil
}

// Stop ends the loop. Children still running are no longer reaped.
func (r *Reaper) Stop() {
	signal.Stop(r.sigs)
	close(r.done)
}

func (r *Reaper) loop() {
	for {
		select {
		case <-r.done:
			return
		case <-r.sigs:
		}
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			r.mu.Lock()
			if ch, ok := r.waiting[pid]; ok {
				delete(r.waiting, pid)
				ch <- ws
			}
			r.mu.Unlock()
		}
	}
}
