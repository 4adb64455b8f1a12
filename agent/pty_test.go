package agent

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/proc"
)

// TestProcessStdinDeadlineOnATerminal: a write to the terminal of a process that reads nothing (raw,
// so its input fills up) ends at its deadline, refused, instead of holding stdin for good.
func TestProcessStdinDeadlineOnATerminal(t *testing.T) {
	var ps Processes
	runner := &proc.Runner{Env: []string{"PATH=/usr/bin:/bin"}}
	defer runner.Close(context.Background())
	defer ps.Close()
	p, err := ps.Start(runner, t.TempDir(), t.TempDir(), sandbox.ProcessSpec{
		Argv: []string{"sh", "-c", "stty raw -echo; echo ready; exec sleep 60"}, PTY: &sandbox.TerminalSize{Rows: 24, Cols: 80},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Signal(p.PID, "KILL")
	if out, err := ps.Read(context.Background(), p.PID, 0, 100, 10*time.Second); err != nil || !bytes.Contains(out.Data, []byte("ready")) {
		t.Fatalf("output %q, %v", out.Data, err)
	}
	flood := bytes.Repeat([]byte("x"), 64<<10)
	for i := 0; ; i++ {
		err := ps.Stdin(p.PID, flood, false, time.Now().Add(200*time.Millisecond))
		if errors.Is(err, sandbox.ErrInvalidState) {
			break
		}
		if err != nil || i == 100 {
			t.Fatalf("stdin %d to a terminal nobody reads: %v", i, err)
		}
	}
}
