package processtest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
)

// EchoArgv echoes every byte it reads, on a raw terminal, once it said ready: the program of the echo
// benchmarks, on a pty.
var EchoArgv = []string{"sh", "-c", "stty raw -echo; echo ready; exec cat"}

// StreamEchoArgv is EchoArgv on pipes, where there is no line discipline to make raw.
var StreamEchoArgv = []string{"sh", "-c", "echo ready; exec cat"}

// BenchmarkEcho times a keystroke's round trip through a terminal attach of p's: one byte written to
// the WebSocket, until its echo by a program on the sandbox's pty comes back on it. Beside it, in the
// same run, the floor: the same program on a local pty, the byte written to its master and its echo
// read there, with no daemon between. It reports the p50 and p99 of both and their ratio.
func BenchmarkEcho(b *testing.B, p sandbox.Provider) {
	floor := echoTimes(b, b.N, localEcho(b))
	ctx, c, sb := benchSandbox(b, p, stack.API(func(c *httpapi.Config) { c.HeartbeatInterval = time.Second }))
	proc, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: EchoArgv, PTY: &sandbox.TerminalSize{Rows: 24, Cols: 80}})
	if err != nil {
		b.Fatal(err)
	}
	term, err := c.Terminal(ctx, sb.ID, sb.Generation, proc.PID, client.TerminalOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer term.Close()
	b.ResetTimer()
	remote := echoTimes(b, b.N, echoer{w: term, r: term})
	b.StopTimer()
	reportBeside(b, remote, floor, "floor")
	c.SignalProcess(ctx, sb.ID, sb.Generation, proc.PID, "KILL")
}

// BenchmarkStreamEcho is BenchmarkEcho through any stream: w reaches the stdin of a program that
// echoes every byte (EchoArgv on a pty, or StreamEchoArgv on pipes) and r reads its output, "ready"
// first. It times one byte written to w until its echo comes back on r, beside the same floor, a
// local pty's echo, measured in the same run. A provider's benchmarks use it to time the parts of the
// terminal attach's path on their own.
func BenchmarkStreamEcho(b *testing.B, w io.Writer, r io.Reader) {
	floor := echoTimes(b, b.N, localEcho(b))
	b.ResetTimer()
	d := echoTimes(b, b.N, echoer{w: w, r: r})
	b.StopTimer()
	reportBeside(b, d, floor, "floor")
}

// benchSandbox starts the daemon's stack over p with opts and one ready sandbox in it, for a
// benchmark: its client (answers not checked against the document) and a context that ends with it.
func benchSandbox(b *testing.B, p sandbox.Provider, opts ...stack.Option) (context.Context, *client.Client, *sandbox.Sandbox) {
	s := stack.New(b, p, opts...)
	c, err := client.New(s.URL, client.WithHTTPClient(&http.Client{}))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	sb, err := c.Create(ctx, sandbox.Spec{})
	if err == nil {
		sb, err = c.WaitState(ctx, sb.ID, sandbox.StateReady)
	}
	if err != nil {
		b.Fatal(err)
	}
	return ctx, c, sb
}

type echoer struct {
	w io.Writer
	r io.Reader
}

// localEcho starts EchoArgv on a local pty.
func localEcho(b *testing.B) echoer {
	cmd := exec.Command(EchoArgv[0], EchoArgv[1:]...)
	master, err := pty.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		master.Close()
	})
	return echoer{w: master, r: master}
}

// echoTimes waits for "ready" on e, then times n round trips of one byte.
func echoTimes(b *testing.B, n int, e echoer) []time.Duration {
	var seen []byte
	buf := make([]byte, 256)
	for !bytes.Contains(seen, []byte("ready")) {
		k, err := e.r.Read(buf)
		if err != nil {
			b.Fatalf("waiting for ready: %v after %q", err, seen)
		}
		seen = append(seen, buf[:k]...)
	}
	if f, ok := e.r.(*os.File); ok {
		_ = f.SetReadDeadline(time.Now().Add(time.Minute))
	}
	d := make([]time.Duration, 0, n)
	key := []byte{0}
	for i := range n {
		key[0] = 'a' + byte(i%26)
		start := time.Now()
		if _, err := e.w.Write(key); err != nil {
			b.Fatal(err)
		}
		for {
			k, err := e.r.Read(buf[:1])
			if err != nil {
				b.Fatalf("echo %d: %v", i, err)
			}
			if k == 1 && buf[0] == key[0] {
				break
			}
		}
		d = append(d, time.Since(start))
	}
	slices.Sort(d)
	return d
}

func quantile(d []time.Duration, q float64) time.Duration { return d[int(q*float64(len(d)-1))] }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkFirstByte times the first output byte of a started process through the daemon's API: the
// start of `echo x` (client.StartProcess) and its output stream read (client.OpenOutput) until its
// first byte. Beside it, alternated with it in the same run (which goes first alternates too), the
// buffered exec of `true` (client.Exec) in the same sandbox. It reports the p50 and p99 of both and the
// ratio of the p50s.
func BenchmarkFirstByte(b *testing.B, p sandbox.Provider) {
	ctx, c, sb := benchSandbox(b, p)
	execTrue := func() time.Duration {
		start := time.Now()
		res, err := c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"true"}})
		d := time.Since(start)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("exec true: %+v, %v", res, err)
		}
		return d
	}
	firstByte := func() time.Duration {
		start := time.Now()
		proc, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: []string{"echo", "x"}})
		if err != nil {
			b.Fatal(err)
		}
		out, err := c.OpenOutput(ctx, sb.ID, sb.Generation, proc.PID, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer out.Close()
		for {
			ev, err := out.Next()
			if err != nil {
				b.Fatalf("output of echo: %v", err)
			}
			if ev.Kind == "output" && len(ev.Data) > 0 {
				if ev.Data[0] != 'x' {
					b.Fatalf("first byte %q", ev.Data[0])
				}
				return time.Since(start)
			}
			if ev.Kind != "dropped" {
				b.Fatalf("before the first byte: %+v", ev)
			}
		}
	}
	execTrue() // the first of each warms the paths
	firstByte()
	b.ResetTimer()
	execs, firsts := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	for i := range b.N {
		if i%2 == 0 {
			execs = append(execs, execTrue())
			firsts = append(firsts, firstByte())
		} else {
			firsts = append(firsts, firstByte())
			execs = append(execs, execTrue())
		}
	}
	b.StopTimer()
	slices.Sort(execs)
	slices.Sort(firsts)
	reportBeside(b, firsts, execs, "exec-true")
}

// reportBeside reports the p50 and p99 of the sorted times d and of floor, the times beside them that
// name names, and the ratio of the p50s.
func reportBeside(b *testing.B, d, floor []time.Duration, name string) {
	p50, fp50 := quantile(d, 0.5), quantile(floor, 0.5)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(quantile(d, 0.99)), "p99-ms")
	b.ReportMetric(ms(fp50), name+"-p50-ms")
	b.ReportMetric(ms(quantile(floor, 0.99)), name+"-p99-ms")
	b.ReportMetric(float64(p50)/float64(max(fp50, 1)), "x-"+name)
}
