package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// fixedPortDaemon starts the daemon on a loopback port of its own that a restart keeps, so that a
// client's reconnects find the next daemon where the last one was.
func fixedPortDaemon(t *testing.T, dataDir string, flags ...string) (start func() *daemon, c *client.Client) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err = client.New("http://"+addr, client.WithRetry(200, 20*time.Millisecond, 250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--provider", "oci", "--oci-warm-pool", "0", "--listen", addr}, flags...)
	return func() *daemon { return startDaemon(t, dataDir, args...) }, c
}

// ociProcessDaemon starts a daemon on the oci provider (fixedPortDaemon) and makes one ready sandbox.
func ociProcessDaemon(t *testing.T) (func() *daemon, *client.Client, *daemon, *sandbox.Sandbox) {
	t.Helper()
	needOCI(t)
	dataDir := testenv.StateDir(t)
	removeContainersAtEnd(t, dataDir)
	start, c := fixedPortDaemon(t, dataDir)
	d := start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := c.Create(ctx, sandbox.Spec{})
	if err == nil {
		sb, err = c.WaitState(ctx, sb.ID, sandbox.StateReady)
	}
	if err != nil {
		t.Fatal(err)
	}
	return start, c, d, sb
}

// processTicker prints n numbered lines, one every 10 ms.
func processTicker(n int) ([]string, string) {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return []string{"sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo line $i; i=$((i+1)); sleep 0.01; done", n)}, b.String()
}

// readThroughRestarts reads a process's output to its exit over connections it drops after a random
// number of events and reopens at the offset it reached, riding out a daemon that is not there:
// every byte it got, in order, and how many connections it took.
func readThroughRestarts(ctx context.Context, c *client.Client, sb *sandbox.Sandbox, pid int, rnd *rand.Rand) ([]byte, int, error) {
	var got []byte
	conns := 0
	for ctx.Err() == nil {
		s, err := c.OpenOutput(ctx, sb.ID, sb.Generation, pid, int64(len(got)))
		if err != nil {
			time.Sleep(50 * time.Millisecond) // the daemon is away: try again
			continue
		}
		conns++
		for n := rnd.IntN(6); n >= 0; n-- {
			ev, err := s.Next()
			if err != nil {
				break // the daemon went away mid-stream
			}
			switch {
			case ev.Kind == "output" && ev.Offset == int64(len(got)):
				got = append(got, ev.Data...)
			case ev.Kind == "end" && ev.Reason == client.ProcessEndExited:
				s.Close()
				return got, conns, nil
			case ev.Kind == "end" && ev.Reason == client.ProcessEndDaemonStopping:
				n = 0
			default:
				s.Close()
				return got, conns, fmt.Errorf("at %d: event %+v", len(got), ev)
			}
		}
		s.Close()
	}
	return got, conns, ctx.Err()
}

// TestOCIProcessOutputSurvivesDaemonSIGKILL: a process printing a line every 10 ms for 30 s (3000
// lines) is read by a client that drops and reopens its stream at random points and by an
// OutputReader, while the daemon is killed with SIGKILL and started again twice, at random points of
// the run: the process runs on in its sandbox, and both readers get every byte once, in order.
func TestOCIProcessOutputSurvivesDaemonSIGKILL(t *testing.T) {
	start, c, d, sb := ociProcessDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(11, seed))
	argv, want := processTicker(3000)
	p, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		got   []byte
		conns int
		err   error
	}
	choppy, whole := make(chan result, 1), make(chan result, 1)
	go func() {
		got, conns, err := readThroughRestarts(ctx, c, sb, p.PID, rand.New(rand.NewPCG(12, seed)))
		choppy <- result{got, conns, err}
	}()
	go func() {
		r := c.NewOutputReader(ctx, sb.ID, sb.Generation, p.PID, 0)
		defer r.Close()
		got, err := io.ReadAll(r)
		whole <- result{got: got, err: err}
	}()
	// Kill the daemon while both read, twice, each after 2 to 10 s: both kills fall within the 30 s.
	for range 2 {
		time.Sleep(2*time.Second + time.Duration(rnd.Int64N(int64(8*time.Second))))
		d.kill()
		d = start()
	}
	if now, err := c.GetProcess(ctx, sb.ID, sb.Generation, p.PID); err != nil || !now.Running {
		t.Fatalf("the process ended before the restarts were over: %+v, %v", now, err)
	}
	for name, ch := range map[string]chan result{"choppy reader": choppy, "OutputReader": whole} {
		res := <-ch
		if res.err != nil {
			t.Fatalf("%s: %v", name, res.err)
		}
		if string(res.got) != want {
			t.Fatalf("%s got %d bytes, not the %d printed", name, len(res.got), len(want))
		}
		if res.conns > 0 {
			t.Logf("%s: %d bytes over %d connections", name, len(res.got), res.conns)
		}
	}
	done, err := c.WaitProcess(ctx, sb.ID, sb.Generation, p.PID, 10*time.Second)
	if err != nil || done.Running || done.ExitCode == nil || *done.ExitCode != 0 {
		t.Fatalf("after the restarts: %+v, %v", done, err)
	}
}

// floodRead is what a reader of the flood saw: the bytes it read, the bytes reported dropped, and
// how its (first) connection ended.
type floodRead struct {
	read, dropped int64
	end           client.OutputEvent // the first connection's end event; Kind "" if it had none
	cut           error              // the error that ended the first connection without an end event
	err           error
}

// readOneConnection reads an output stream from offset after on one connection, checking that every
// event continues where the last left off, until its end event or an error of the connection; stall,
// if not nil, runs once after the first output.
func readOneConnection(s *client.OutputStream, after int64, stall func()) floodRead {
	var res floodRead
	at := after
	for {
		ev, err := s.Next()
		if err != nil {
			res.cut = err
			return res
		}
		switch {
		case ev.Kind == "output" && ev.Offset == at:
			res.read += int64(len(ev.Data))
			at += int64(len(ev.Data))
			if stall != nil {
				stall()
				stall = nil
			}
		case ev.Kind == "dropped" && ev.Offset == at && ev.To > at:
			res.dropped += ev.To - at
			at = ev.To
		case ev.Kind == "end" && ev.Offset == at:
			res.end = ev
			return res
		default:
			res.err = fmt.Errorf("at %d: event %+v", at, ev)
			return res
		}
	}
}

// TestOCIProcessOutputFlood: a process writing as fast as it can for 60 s, read by a fast reader and
// by one that stops reading. The daemon's memory stays within its bound; the process never waits for
// either (the journal drops its oldest output); the fast reader is never dropped by the daemon (one
// connection carries it from offset 0 to the exit, every byte either read or reported dropped by the
// journal, in order); the slow reader's connection is cut by the daemon before the end, and a new
// one resumes at the offset it reached, past what the journal no longer kept, to the exit.
func TestOCIProcessOutputFlood(t *testing.T) {
	_, c, d, sb := ociProcessDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	before := rssKiB(t, d.cmd.Process.Pid)
	flood := `end=$(($(date +%s)+60)); while [ $(date +%s) -lt $end ]; do head -c 16777216 /dev/zero; done`
	p, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: []string{"sh", "-c", flood}})
	if err != nil {
		t.Fatal(err)
	}
	fast, slow := make(chan floodRead, 1), make(chan floodRead, 1)
	go func() {
		s, err := c.OpenOutput(ctx, sb.ID, sb.Generation, p.PID, 0)
		if err != nil {
			fast <- floodRead{err: err}
			return
		}
		defer s.Close()
		fast <- readOneConnection(s, 0, nil)
	}()
	go func() {
		s, err := c.OpenOutput(ctx, sb.ID, sb.Generation, p.PID, 0)
		if err != nil {
			slow <- floodRead{err: err}
			return
		}
		// Stop reading after the first output (the flood may have outrun the journal before the
		// stream opened: a drop comes first then) for longer than the daemon waits on a write; then
		// read on what the connection still holds, to its cut.
		first := readOneConnection(s, 0, func() { time.Sleep(15 * time.Second) })
		s.Close()
		if first.err != nil || first.cut == nil {
			first.err = cmp.Or(first.err, fmt.Errorf("the stalled connection was not cut: it ended with %+v", first.end))
			slow <- first
			return
		}
		// Resume on a new connection at the offset reached.
		offset := first.read + first.dropped
		r := c.NewOutputReader(ctx, sb.ID, sb.Generation, p.PID, offset)
		defer r.Close()
		n, err := io.Copy(io.Discard, r)
		first.read += n
		first.dropped += r.Dropped()
		first.err = err
		if err == nil && (r.ExitCode() == nil || r.Offset() != offset+n+r.Dropped()) {
			first.err = fmt.Errorf("resumed at %d: %d read, %d dropped, offset %d, exit %v", offset, n, r.Dropped(), r.Offset(), r.ExitCode())
		}
		slow <- first
	}()
	var fastRes, slowRes floodRead
	peak := before
	for fastDone, slowDone := false, false; !fastDone || !slowDone; {
		select {
		case fastRes = <-fast:
			fastDone = true
			if fastRes.err != nil {
				t.Fatalf("fast reader: %v", fastRes.err)
			}
			if fastRes.cut != nil || fastRes.end.Reason != client.ProcessEndExited {
				t.Fatalf("the daemon dropped the fast reader: connection cut by %v after %d bytes read and %d dropped; end %+v",
					fastRes.cut, fastRes.read, fastRes.dropped, fastRes.end)
			}
			t.Logf("fast reader: one connection, %d bytes read, %d dropped by the journal", fastRes.read, fastRes.dropped)
		case slowRes = <-slow:
			slowDone = true
			if slowRes.err != nil {
				t.Fatalf("slow reader: %v", slowRes.err)
			}
			if slowRes.dropped == 0 {
				t.Fatalf("the slow reader was never behind what the sandbox keeps: %d bytes read", slowRes.read)
			}
			t.Logf("slow reader: cut by the daemon (%v), resumed; %d bytes read, %d dropped", slowRes.cut, slowRes.read, slowRes.dropped)
		case <-time.After(200 * time.Millisecond):
			peak = max(peak, rssKiB(t, d.cmd.Process.Pid))
		}
	}
	done, err := c.WaitProcess(ctx, sb.ID, sb.Generation, p.PID, 0)
	if err != nil || done.Running || done.OutputEnd < 1<<30 {
		t.Fatalf("flood: %+v, %v", done, err)
	}
	// Every offset of the output was accounted for by each reader: read, or reported dropped.
	for name, res := range map[string]floodRead{"fast": fastRes, "slow": slowRes} {
		if res.read+res.dropped != done.OutputEnd {
			t.Fatalf("%s reader: %d read + %d dropped, the output ended at %d", name, res.read, res.dropped, done.OutputEnd)
		}
	}
	t.Logf("%d MiB of output; daemon RSS %d KiB before, peak %d KiB", done.OutputEnd>>20, before, peak)
	if peak-before > memoryBoundKiB {
		t.Fatalf("RSS grew by %d KiB, over the bound of %d KiB", peak-before, memoryBoundKiB)
	}
	if _, err := c.OpenOutput(ctx, sb.ID, sb.Generation, p.PID, done.OutputEnd+1); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("a stream past the end: %v", err)
	}
}
