package testenv

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// LeakWait bounds how long NoLeaks waits for the goroutines a test started to end.
const LeakWait = 5 * time.Second

// Goroutines is the set of goroutines running at one moment.
type Goroutines struct{ before goleak.Option }

// RunningGoroutines returns the goroutines running now.
func RunningGoroutines() Goroutines { return Goroutines{before: goleak.IgnoreCurrent()} }

// Leftover waits up to wait for every goroutine started since g to end, and returns an error with the
// stacks of those still running then, or nil.
func (g Goroutines) Leftover(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := goleak.Find(g.before) // itself retries for a little while
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// NoLeaks fails t if a goroutine started after the call is still running LeakWait after t's later
// cleanups (a stack's, a stream's) have run. Goroutines are not tied to tests, so a test that calls it
// must not run in parallel with others.
func NoLeaks(t testing.TB) {
	t.Helper()
	g := RunningGoroutines()
	t.Cleanup(func() {
		if err := g.Leftover(LeakWait); err != nil {
			t.Errorf("goroutines left running: %v", err)
		}
	})
}

// StreamPaused is the function in which the goroutine of a stream (an output stream, a watch, a
// terminal attach) waits while its sandbox is paused: GoroutinesIn(StreamPaused) counts such streams.
const StreamPaused = "github.com/sandboxd/sandbox/httpapi.(*Server).waitPaused"

// GoroutinesIn counts the goroutines of this process whose stack has a frame of the function fn
// (its full name, as a stack trace writes it: "pkg/path.(*Type).Method").
func GoroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(fn+"(")) {
			count++
		}
	}
	return count
}
