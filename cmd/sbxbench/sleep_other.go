//go:build !linux

package main

import "time"

// preciseSleeper returns time.Sleep until t: elsewhere than on Linux the pacer sleeps like any
// goroutine.
func preciseSleeper() func(t time.Time) {
	return func(t time.Time) { time.Sleep(time.Until(t)) }
}
