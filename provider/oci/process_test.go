package oci_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
)

// streamHeartbeat is the heartbeat interval of the process tests' API: every stream learns of a pause,
// a terminate or a dead agent within it and the poll's slack.
const streamHeartbeat = 300 * time.Millisecond

// processStack is the daemon's stack over a real oci provider, with a short heartbeat, and a client
// whose every answer is checked against api/extensions.yaml; and one ready sandbox.
func processStack(t *testing.T) (*stack.Stack, *client.Client, *sandbox.Sandbox) {
	t.Helper()
	s := stack.New(t, newProvider(t), stack.API(func(c *httpapi.Config) { c.HeartbeatInterval = streamHeartbeat }))
	c, err := client.New(s.URL, client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}),
		client.WithRetry(20, 20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := c.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if sb, err = c.WaitState(ctx, sb.ID, sandbox.StateReady); err != nil {
		t.Fatal(err)
	}
	return s, c, sb
}

// tickerArgv prints n numbered lines, one every 10 ms.
func tickerArgv(n int) []string {
	return []string{"sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo line $i; i=$((i+1)); sleep 0.01; done", n)}
}

func tickerText(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// readChoppy reads a process's output to its exit over connections it drops after a random number of
// events, each reopened at the offset reached: it returns every byte it got, in order.
func readChoppy(t *testing.T, c *client.Client, sb *sandbox.Sandbox, pid int, rnd *rand.Rand) ([]byte, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var got []byte
	for conns := 1; ; conns++ {
		s, err := c.OpenOutput(ctx, sb.ID, sb.Generation, pid, int64(len(got)))
		if err != nil {
			t.Fatalf("open at %d: %v", len(got), err)
		}
		for n := rnd.IntN(5); n >= 0; n-- {
			ev, err := s.Next()
			if err != nil {
				t.Fatalf("stream at %d: %v", len(got), err)
			}
			switch ev.Kind {
			case "output":
				if ev.Offset != int64(len(got)) {
					t.Fatalf("output at %d, want %d", ev.Offset, len(got))
				}
				got = append(got, ev.Data...)
			case "end":
				s.Close()
				if ev.Reason != client.ProcessEndExited || ev.ExitCode == nil || *ev.ExitCode != 0 || ev.Offset != int64(len(got)) {
					t.Fatalf("end %+v at %d", ev, len(got))
				}
				return got, conns
			default:
				t.Fatalf("event %+v: nothing was dropped", ev)
			}
		}
		s.Close()
	}
}

// TestProcessOutputResumes: a process printing a line every 10 ms, read by a client that drops its
// connection at random points and reopens it at the offset it reached, and by an OutputReader, is read
// whole by both, every byte once and in order; no goroutine of a stream is left behind.
func TestProcessOutputResumes(t *testing.T) {
	testenv.NoLeaks(t)
	_, c, sb := processStack(t)
	ctx := context.Background()
	const n = 300
	p, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: tickerArgv(n), Tag: "ticker"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Running || p.Tag != "ticker" {
		t.Fatalf("started %+v", p)
	}
	whole := make(chan []byte, 1)
	go func() {
		r := c.NewOutputReader(ctx, sb.ID, sb.Generation, p.PID, 0)
		defer r.Close()
		b, err := io.ReadAll(r)
		if err != nil || r.ExitCode() == nil || *r.ExitCode() != 0 {
			t.Errorf("reader: %v, exit %v", err, r.ExitCode())
		}
		whole <- b
	}()
	got, conns := readChoppy(t, c, sb, p.PID, rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano()))))
	if string(got) != tickerText(n) {
		t.Fatalf("choppy reader got %d bytes, not the %d printed", len(got), len(tickerText(n)))
	}
	if b := <-whole; string(b) != tickerText(n) {
		t.Fatalf("OutputReader got %d bytes, not the %d printed", len(b), len(tickerText(n)))
	}
	t.Logf("%d bytes over %d connections", len(got), conns)

	// From the middle, after the end: the sandbox keeps it.
	r := c.NewOutputReader(ctx, sb.ID, sb.Generation, p.PID, int64(len(got)/2))
	if rest, err := io.ReadAll(r); err != nil || !bytes.Equal(rest, got[len(got)/2:]) {
		t.Fatalf("read from the middle: %v, %d bytes", err, len(rest))
	}
	r.Close()
	done, err := c.WaitProcess(ctx, sb.ID, sb.Generation, p.PID, time.Second)
	if err != nil || done.Running || *done.ExitCode != 0 || done.OutputEnd != int64(len(got)) {
		t.Fatalf("wait: %+v, %v", done, err)
	}
	list, err := c.ListProcesses(ctx, sb.ID, sb.Generation)
	if err != nil || len(list) != 1 || list[0].PID != p.PID {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if _, err := c.StartProcess(ctx, sb.ID, sb.Generation+1, sandbox.ProcessSpec{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrGenerationConflict) {
		t.Fatalf("start at another generation: %v", err)
	}
}
