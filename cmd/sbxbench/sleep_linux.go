package main

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// preciseSleeper locks the calling goroutine to its thread for good (the thread ends with the
// goroutine), sets the thread's timer slack to the least the kernel allows, and returns a function
// that sleeps that thread until t with nanosleep: it wakes within tens of microseconds of t, where
// time.Sleep in an idle Go process can wake a millisecond late.
func preciseSleeper() func(t time.Time) {
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) // best effort: the default slack is 50 µs
	return func(t time.Time) {
		for {
			d := time.Until(t)
			if d <= 0 {
				return
			}
			ts := unix.NsecToTimespec(d.Nanoseconds())
			_ = unix.Nanosleep(&ts, nil) // EINTR: sleep what is left
		}
	}
}
