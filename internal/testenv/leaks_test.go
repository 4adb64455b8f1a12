package testenv_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestLeftoverNamesALeakedGoroutine leaks a goroutine on purpose: Leftover reports it with its stack
// while it runs, and nothing once it has ended.
func TestLeftoverNamesALeakedGoroutine(t *testing.T) {
	g := testenv.RunningGoroutines()
	release := make(chan struct{})
	ended := make(chan struct{})
	go leakUntil(release, ended)
	err := g.Leftover(100 * time.Millisecond)
	close(release)
	<-ended
	if err == nil || !strings.Contains(err.Error(), "leakUntil") {
		t.Fatalf("Leftover with a goroutine blocked in leakUntil: %v", err)
	}
	if err := g.Leftover(testenv.LeakWait); err != nil {
		t.Fatalf("Leftover once it ended: %v", err)
	}
}

func leakUntil(release <-chan struct{}, ended chan<- struct{}) {
	<-release
	close(ended)
}
