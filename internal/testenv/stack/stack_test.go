package stack_test

import (
	"bufio"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/host"
)

func newStack(t *testing.T) *stack.Stack {
	t.Helper()
	prov, err := host.New(host.Config{Dir: filepath.Join(t.TempDir(), "host")})
	if err != nil {
		t.Fatal(err)
	}
	return stack.New(t, prov, stack.Core(func(c *core.Config) { c.ReconcileInterval = -1 }))
}

// stream is an open event stream of a stack, on a transport of its own.
type stream struct {
	client *http.Client
	resp   *http.Response
	lines  *bufio.Scanner
}

// openStream opens the stack's event stream and reads its opening comment; the test closes it, or
// its cleanup does.
func openStream(t *testing.T, s *stack.Stack) *stream {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{}}
	resp, err := c.Get(s.URL + "/v1/events/stream")
	if err != nil {
		t.Fatal(err)
	}
	st := &stream{client: c, resp: resp, lines: bufio.NewScanner(resp.Body)}
	t.Cleanup(st.close)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the stream answered %d", resp.StatusCode)
	}
	if !st.lines.Scan() || st.lines.Text() != ": stream" {
		t.Fatalf("the stream opened with %q, %v", st.lines.Text(), st.lines.Err())
	}
	return st
}

func (st *stream) close() {
	st.resp.Body.Close()
	st.client.CloseIdleConnections()
}

// TestEventStreamLeavesNoGoroutine reads an event from a stream and closes it: once the stack is closed,
// neither the stream's handler and its Runtime.Watch nor the stack leaves a goroutine running.
func TestEventStreamLeavesNoGoroutine(t *testing.T) {
	testenv.NoLeaks(t)
	s := newStack(t)
	st := openStream(t, s)
	sb, err := s.Runtime.Create(context.Background(), sandbox.Spec{ClientRequestID: "one"})
	if err != nil {
		t.Fatal(err)
	}
	for st.lines.Scan() && !strings.Contains(st.lines.Text(), string(sb.ID)) {
	}
	if err := st.lines.Err(); err != nil {
		t.Fatal(err)
	}
	st.close()
}

// TestLeftoverCatchesAnUnclosedStream leaves a stream open: the leak check names its handler, and once
// the stream is closed, nothing.
func TestLeftoverCatchesAnUnclosedStream(t *testing.T) {
	s := newStack(t)
	g := testenv.RunningGoroutines()
	st := openStream(t, s)
	err := g.Leftover(200 * time.Millisecond)
	st.close()
	if err == nil || !strings.Contains(err.Error(), "streamEvents") {
		t.Fatalf("Leftover with a stream open: %v", err)
	}
	if err := g.Leftover(testenv.LeakWait); err != nil {
		t.Fatalf("Leftover once the stream is closed: %v", err)
	}
}
