package testenv

import (
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
