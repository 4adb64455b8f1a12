package kubernetes_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/testenv/processtest"
)

// TestProcesses runs the tests of background processes and their output streams on Pods (the calls
// reach the agent through pods/exec and its relay); there is no pause here. A sandbox's agent is
// killed by SIGTERM to its process 1, on which it exits and its Pod ends.
func TestProcesses(t *testing.T) {
	// The connections to the API server (client-go shares them between clients of one configuration)
	// are made before the suite counts goroutines.
	newProvider(t)
	processtest.Run(t, processtest.Provider{New: func(t *testing.T) sandbox.Provider { return newProvider(t) }, KillAgent: killAgent})
}

// killAgent ends a sandbox's agent by SIGTERM to its process 1, on which it exits and its Pod ends.
func killAgent(t *testing.T, p sandbox.Provider, ref sandbox.Ref) {
	// The answer may or may not come back before the agent is gone.
	_, _ = p.(sandbox.Executor).Exec(context.Background(), ref, sandbox.Command{Argv: []string{"kill", "-TERM", "1"}})
}

// TestProcessAcrossRestart: a process started through one daemon keeps running in its sandbox when the
// daemon stops (as a crash would) and another starts; its output, read by offset over connections the
// reader drops, goes on from where the first daemon's reader was, every line once and in order; a
// signal through the new daemon ends it.
func TestProcessAcrossRestart(t *testing.T) {
	ns := namespace(t)
	dir := t.TempDir()
	c, stop := apiStack(t, dir, config(t, ns))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb := create(t, c, sandbox.Spec{ClientRequestID: client.NewRequestID()})
	p, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{
		Argv: []string{"sh", "-c", "i=0; while :; do echo line $i; i=$((i+1)); sleep 0.02; done"}, Tag: "ticker",
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	// readSome reads at least n more bytes, one connection per event batch, each opened at the offset
	// reached.
	readSome := func(c *client.Client, n int) {
		t.Helper()
		want := len(got) + n
		for len(got) < want {
			s, err := c.OpenOutput(ctx, sb.ID, sb.Generation, p.PID, int64(len(got)))
			if err != nil {
				t.Fatalf("open at %d: %v", len(got), err)
			}
			for i := 0; i < 3 && len(got) < want; i++ {
				ev, err := s.Next()
				if err != nil {
					t.Fatalf("event at %d: %v", len(got), err)
				}
				if ev.Kind == "output" {
					if ev.Offset != int64(len(got)) {
						t.Fatalf("output at %d, asked from %d", ev.Offset, len(got))
					}
					got = append(got, ev.Data...)
				}
			}
			s.Close()
		}
	}
	readSome(c, 200)
	stop()

	c, _ = apiStack(t, dir, config(t, ns))
	again, err := c.GetProcess(ctx, sb.ID, sb.Generation, p.PID)
	if err != nil || !again.Running || again.Tag != "ticker" || again.OutputEnd <= int64(len(got)) {
		t.Fatalf("the process after the restart: %+v, %v (read %d bytes before)", again, err, len(got))
	}
	readSome(c, 400)
	if err := c.SignalProcess(ctx, sb.ID, sb.Generation, p.PID, "TERM"); err != nil {
		t.Fatal(err)
	}
	r := c.NewOutputReader(ctx, sb.ID, sb.Generation, p.PID, int64(len(got)))
	rest, err := io.ReadAll(r)
	r.Close()
	if err != nil || r.ExitCode() == nil || *r.ExitCode() != 143 {
		t.Fatalf("reading to the end: %v, exit %v", err, r.ExitCode())
	}
	got = append(got, rest...)
	sc := bufio.NewScanner(strings.NewReader(string(got)))
	n := 0
	for sc.Scan() {
		if want := fmt.Sprintf("line %d", n); sc.Text() != want {
			t.Fatalf("line %d is %q", n, sc.Text())
		}
		n++
	}
	done, err := c.WaitProcess(ctx, sb.ID, sb.Generation, p.PID, 10*time.Second)
	if err != nil || done.Running || *done.ExitCode != 143 || done.OutputEnd != int64(len(got)) {
		t.Fatalf("after TERM: %+v, %v (read %d bytes)", done, err, len(got))
	}
	t.Logf("%d lines across two daemons", n)
}
