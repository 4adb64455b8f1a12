package agent_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// ticker is a process that prints n numbered lines, one every 10 ms.
func ticker(n int) []string {
	return []string{"sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo line $i; i=$((i+1)); sleep 0.01; done", n)}
}

func tickerOutput(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// readAll reads a process's output from after to its end in reads of random sizes and waits, as a
// client that drops and comes back would: every byte once, in order.
func readAll(t *testing.T, c *agentclient.Client, pid int, after int64, rnd *rand.Rand) []byte {
	t.Helper()
	var got []byte
	for deadline := time.Now().Add(60 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatalf("output of %d not done after a minute; %d bytes read", pid, len(got))
		}
		out, err := c.Output(ctx(t), pid, after, 1+rnd.IntN(300), time.Duration(rnd.IntN(200))*time.Millisecond)
		if err != nil {
			t.Fatalf("output from %d: %v", after, err)
		}
		if out.Start != after {
			t.Fatalf("output from %d starts at %d: nothing was dropped", after, out.Start)
		}
		got = append(got, out.Data...)
		after += int64(len(out.Data))
		if out.Done {
			return got
		}
	}
}

// TestProcessOutputResumesByOffset: a process printing a line every 10 ms, read by a client that
// reads in random pieces and comes back at random points, is read whole, in order, once; its end is
// recorded with its exit code.
func TestProcessOutputResumesByOffset(t *testing.T) {
	a := start(t)
	const n = 200
	p, err := a.c.StartProcess(ctx(t), sandbox.ProcessSpec{Argv: ticker(n), Tag: "ticker"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Running || p.Tag != "ticker" || p.PID <= 0 {
		t.Fatalf("started %+v", p)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	got := readAll(t, a.c, p.PID, 0, rnd)
	if string(got) != tickerOutput(n) {
		t.Fatalf("output %q, want %q", got, tickerOutput(n))
	}
	// Read again from the middle: the journal keeps it.
	mid := int64(len(got) / 2)
	if again := readAll(t, a.c, p.PID, mid, rnd); !bytes.Equal(again, got[mid:]) {
		t.Fatalf("second read from %d differs", mid)
	}
	done, err := a.c.Process(ctx(t), p.PID, 5*time.Second)
	if err != nil || done.Running || done.ExitCode == nil || *done.ExitCode != 0 || done.OutputEnd != int64(len(got)) || done.FinishedAt == nil {
		t.Fatalf("ended %+v, %v", done, err)
	}
	list, err := a.c.Processes(ctx(t))
	if err != nil || len(list) != 1 || list[0].PID != p.PID {
		t.Fatalf("list %+v, %v", list, err)
	}
	// The journal is on the working directory's file system, without a name: nothing in the
	// sandbox sees it, or can open it.
	if entries, err := a.c.List(ctx(t), "/workspace"); err != nil || len(entries) != 0 {
		t.Fatalf("the working directory holds %+v (%v), want nothing", entries, err)
	}
}

// TestProcessJournalDropsTheOldest: past protocol.JournalBytes the oldest output is dropped, and a
// read from before it says where the kept output starts; the process never waits for a reader.
func TestProcessJournalDropsTheOldest(t *testing.T) {
	a := start(t)
	const total = protocol.JournalBytes + 3<<20
	p, err := a.c.StartProcess(ctx(t), sandbox.ProcessSpec{Argv: []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x", total)}})
	if err != nil {
		t.Fatal(err)
	}
	done, err := a.c.Process(ctx(t), p.PID, 20*time.Second)
	if err != nil || done.Running {
		t.Fatalf("flood did not end: %+v, %v", done, err)
	}
	out, err := a.c.Output(ctx(t), p.PID, 0, protocol.MaxOutputChunk, 0)
	if err != nil {
		t.Fatal(err)
	}
	if out.Start != total-protocol.JournalBytes || out.Oldest != out.Start || out.End != total || len(out.Data) != protocol.MaxOutputChunk {
		t.Fatalf("read from 0 after a flood: start %d oldest %d end %d, %d bytes", out.Start, out.Oldest, out.End, len(out.Data))
	}
	if bytes.Count(out.Data, []byte("x")) != len(out.Data) {
		t.Fatal("the journal returned bytes the process did not write")
	}
	last, err := a.c.Output(ctx(t), p.PID, total-10, 100, 0)
	if err != nil || !last.Done || string(last.Data) != "xxxxxxxxxx" {
		t.Fatalf("last bytes %+v, %v", last, err)
	}
	if _, err := a.c.Output(ctx(t), p.PID, total+1, 100, 0); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("read past the end: %v", err)
	}
}

// TestProcessStdinAndSignal: stdin reaches the process, closing it ends cat; a signal reaches its group.
func TestProcessStdinAndSignal(t *testing.T) {
	a := start(t)
	p, err := a.c.StartProcess(ctx(t), sandbox.ProcessSpec{Argv: []string{"cat"}, Stdin: []byte("first\n")})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.c.Stdin(ctx(t), p.PID, []byte("second\n"), true); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, a.c, p.PID, 0, rand.New(rand.NewPCG(3, 4))); string(got) != "first\nsecond\n" {
		t.Fatalf("cat said %q", got)
	}
	if err := a.c.Stdin(ctx(t), p.PID, []byte("late"), false); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("stdin after the end: %v", err)
	}

	s, err := a.c.StartProcess(ctx(t), sandbox.ProcessSpec{Argv: []string{"sh", "-c", "sleep 100 & wait"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.c.Signal(ctx(t), s.PID, "BOGUS"); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("unknown signal: %v", err)
	}
	if err := a.c.Signal(ctx(t), s.PID, "TERM"); err != nil {
		t.Fatal(err)
	}
	done, err := a.c.Process(ctx(t), s.PID, 10*time.Second)
	if err != nil || done.Running || *done.ExitCode != 128+15 {
		t.Fatalf("after TERM: %+v, %v", done, err)
	}
	if err := a.c.Signal(ctx(t), s.PID, "KILL"); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("signal after the end: %v", err)
	}
	if _, err := a.c.Process(ctx(t), 999999, 0); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("unknown pid: %v", err)
	}
	if _, err := a.c.StartProcess(ctx(t), sandbox.ProcessSpec{Argv: []string{"no-such-program-here"}}); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("missing program: %v", err)
	}
	if _, err := a.c.StartProcess(ctx(t), sandbox.ProcessSpec{Argv: []string{"true"}, Cwd: "../../etc"}); err == nil {
		t.Fatal("a cwd outside the root was taken")
	}
}

// TestProcessStdinKeepsItsOrder: stdin given at the start and stdin written right after reach the
// process in that order, every time.
func TestProcessStdinKeepsItsOrder(t *testing.T) {
	a := start(t)
	for i := range 30 {
		p, err := a.c.StartProcess(ctx(t), sandbox.ProcessSpec{Argv: []string{"cat"}, Stdin: bytes.Repeat([]byte("first\n"), 1000)})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.c.Stdin(ctx(t), p.PID, []byte("second\n"), true); err != nil {
			t.Fatal(err)
		}
		got := readAll(t, a.c, p.PID, 0, rand.New(rand.NewPCG(uint64(i), 5)))
		if want := strings.Repeat("first\n", 1000) + "second\n"; string(got) != want {
			t.Fatalf("run %d: cat said %d bytes ending %q", i, len(got), got[max(0, len(got)-20):])
		}
	}
}

// TestProcessPTYEndsWhileAChildHoldsIt: a pty process whose child left its session and keeps the
// terminal open ends all the same, its output whole, a little after it exited (drainGrace), while
// the child still runs.
func TestProcessPTYEndsWhileAChildHoldsIt(t *testing.T) {
	a := start(t)
	p, err := a.c.StartProcess(ctx(t), sandbox.ProcessSpec{
		Argv: []string{"sh", "-c", "setsid sh -c 'echo child $$; exec sleep 60' & sleep 0.2; echo parent done"},
		PTY:  &sandbox.TerminalSize{Rows: 24, Cols: 80},
	})
	if err != nil {
		t.Fatal(err)
	}
	done, err := a.c.Process(ctx(t), p.PID, 20*time.Second)
	if err != nil || done.Running {
		t.Fatalf("the process's output did not end while its child held the terminal: %+v, %v", done, err)
	}
	out, err := a.c.Output(ctx(t), p.PID, 0, protocol.MaxOutputChunk, 0)
	if err != nil || !out.Done || !strings.Contains(string(out.Data), "parent done") {
		t.Fatalf("output %q done %v, %v", out.Data, out.Done, err)
	}
	var child int
	if i := strings.Index(string(out.Data), "child "); i < 0 {
		t.Fatalf("no child's pid in %q", out.Data)
	} else if _, err := fmt.Sscanf(string(out.Data[i:]), "child %d", &child); err != nil {
		t.Fatalf("no child's pid in %q: %v", out.Data, err)
	}
	if err := syscall.Kill(child, 0); err != nil {
		t.Fatalf("the child %d is gone already (%v): nothing held the terminal", child, err)
	}
	syscall.Kill(child, syscall.SIGKILL)
}
