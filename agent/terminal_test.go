package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// startShell starts sh on a pty of 24×80.
func startShell(t *testing.T, a *running, argv ...string) sandbox.Process {
	t.Helper()
	if len(argv) == 0 {
		argv = []string{"sh"}
	}
	p, err := a.c.StartProcess(ctx(t), sandbox.ProcessSpec{Argv: argv, Env: map[string]string{"PS1": "$ "},
		PTY: &sandbox.TerminalSize{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// termReader reads a terminal stream in the background, for a test to wait for text on it.
type termReader struct {
	st   *agentclient.TerminalStream
	got  chan sandbox.TerminalEvent
	fail chan error
	text string
	end  *sandbox.TerminalEnd
	refs []string
}

func readStream(t *testing.T, st *agentclient.TerminalStream) *termReader {
	r := &termReader{st: st, got: make(chan sandbox.TerminalEvent, 64), fail: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := st.Recv()
			if err != nil {
				r.fail <- err
				return
			}
			r.got <- ev
			if ev.End != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		st.Close()
		<-done
	})
	return r
}

// until reads events until ok says so, within 20 s.
func (r *termReader) until(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !ok() {
		select {
		case ev := <-r.got:
			r.text += string(ev.Output.Data)
			if ev.Refused != "" {
				r.refs = append(r.refs, ev.Refused)
			}
			if ev.End != nil {
				r.end = ev.End
			}
		case err := <-r.fail:
			t.Fatalf("waiting for %s: %v; screen %q", what, err, r.text)
		case <-deadline:
			t.Fatalf("no %s in 20 s; screen %q", what, r.text)
		}
	}
}

func (r *termReader) expect(t *testing.T, want string) {
	t.Helper()
	r.until(t, strconv.Quote(want), func() bool { return strings.Contains(r.text, want) })
}

// shellStream starts sh on a pty and reads its terminal stream from the start.
func shellStream(t *testing.T, a *running) (sandbox.Process, *agentclient.TerminalStream, *termReader) {
	t.Helper()
	p := startShell(t, a)
	st, err := a.c.AttachTerminal(ctx(t), p.PID, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return p, st, readStream(t, st)
}

// TestTerminalStream: keys, resizes and signals go in on one stream in their order, the output comes
// out of the journal, a refused frame is said and the stream goes on, the exit is the end frame with
// its code; another stream from an offset replays the journal from there.
func TestTerminalStream(t *testing.T) {
	a := start(t)
	p, st, r := shellStream(t, a)
	st.Stdin(ctx(t), []byte("stty size\n"))
	r.expect(t, "24 80")
	st.Resize(ctx(t), sandbox.TerminalSize{Rows: 30, Cols: 100})
	st.Stdin(ctx(t), []byte("stty size\n"))
	r.expect(t, "30 100")
	st.Signal(ctx(t), "BOGUS")
	r.until(t, "a refusal", func() bool { return len(r.refs) > 0 })
	st.Stdin(ctx(t), []byte("trap 'echo got-usr1' USR1; echo $((6*7)); kill -USR1 $$\n"))
	r.expect(t, "got-usr1")
	r.expect(t, "42")
	st.Stdin(ctx(t), []byte("exit 7\n"))
	r.until(t, "the end", func() bool { return r.end != nil })
	if r.end.Reason != protocol.TerminalExited || r.end.ExitCode == nil || *r.end.ExitCode != 7 || r.end.Offset != int64(len(r.text)) {
		t.Fatalf("end %+v after %d bytes", r.end, len(r.text))
	}
	whole := r.text
	mid := int64(len(whole) / 2)
	again, err := a.c.AttachTerminal(ctx(t), p.PID, mid, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rest := readStream(t, again)
	rest.until(t, "the replay's end", func() bool { return rest.end != nil })
	if rest.text != whole[mid:] || rest.end.Reason != protocol.TerminalExited {
		t.Fatalf("replay from %d: %q, end %+v; want %q", mid, rest.text, rest.end, whole[mid:])
	}
}

// TestTerminalStreamEndsWhenTheAgentStops: an agent going away ends its streams with an end frame
// saying so.
func TestTerminalStreamEndsWhenTheAgentStops(t *testing.T) {
	a := start(t)
	_, st, r := shellStream(t, a)
	st.Stdin(ctx(t), []byte("echo up\n"))
	r.expect(t, "up")
	proc, _ := os.FindProcess(a.pid)
	proc.Signal(os.Interrupt)
	r.until(t, "the end", func() bool { return r.end != nil })
	if r.end.Reason != protocol.TerminalAgentStopping {
		t.Fatalf("end %+v", r.end)
	}
}

// rawTerminal asks the agent for a terminal stream by hand: the answer's status, and the connection
// when it switched.
func rawTerminal(t *testing.T, a *running, query, upgrade string) (int, net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("unix", a.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	deadline := strconv.FormatInt(time.Now().Add(time.Minute).UnixNano(), 10)
	fmt.Fprintf(conn, "GET %s?%s HTTP/1.1\r\nHost: agent\r\nConnection: Upgrade\r\nUpgrade: %s\r\n%s: %s\r\n\r\n",
		protocol.PathProcessTerminal, query, upgrade, protocol.HeaderDeadline, deadline)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body.Close()
		conn.Close()
		return resp.StatusCode, nil, nil
	}
	return resp.StatusCode, conn, br
}

// lastFrame reads frames until the end frame, which it returns, within 20 s.
func lastFrame(t *testing.T, conn net.Conn, br *bufio.Reader) protocol.TerminalEnd {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	fr := protocol.NewFrameReader(br)
	for {
		f, err := fr.Read()
		if err != nil {
			t.Fatalf("no end frame: %v", err)
		}
		if f.Type == protocol.FrameEnd {
			e, _ := protocol.DecodeEnd(f.Payload)
			return e
		}
	}
}

// TestTerminalStreamHostile: a stream for a pid the agent has not started, for a process without a
// terminal, from past the end, with another framing or a beat out of bounds is refused before the
// switch; a frame of unknown type, one past its bound (refused from its head, before its payload),
// or one of the agent's kinds ends the stream with an end frame saying protocol; a client that
// never reads holds up nothing: the process runs to its end, its output in the journal.
func TestTerminalStreamHostile(t *testing.T) {
	a := start(t)
	p := startShell(t, a)
	plain, err := a.c.StartProcess(ctx(t), sandbox.ProcessSpec{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.c.Signal(context.Background(), plain.PID, "KILL")
	defer a.c.Signal(context.Background(), p.PID, "KILL")
	for _, tc := range []struct {
		pid   int
		after int64
		want  error
	}{
		{1, 0, sandbox.ErrNotFound},
		{a.pid, 0, sandbox.ErrNotFound},
		{plain.PID, 0, sandbox.ErrUnsupportedCapability},
		{p.PID, 1 << 40, sandbox.ErrInvalidRequest},
		{p.PID, -1, sandbox.ErrInvalidRequest},
	} {
		if st, err := a.c.AttachTerminal(ctx(t), tc.pid, tc.after, time.Second); !errors.Is(err, tc.want) {
			if err == nil {
				st.Close()
			}
			t.Errorf("stream of %d from %d: %v, want %v", tc.pid, tc.after, err, tc.want)
		}
	}
	pid := strconv.Itoa(p.PID)
	for _, q := range []struct{ query, upgrade string }{
		{"pid=" + pid + "&after=0&beatMs=1000", "sandboxd-terminal-2"},
		{"pid=" + pid + "&after=0&beatMs=1000", "websocket"},
		{"pid=" + pid + "&after=0&beatMs=1", protocol.UpgradeTerminal},
		{"pid=" + pid + "&after=0&beatMs=99999999", protocol.UpgradeTerminal},
		{"pid=" + pid + "&after=x&beatMs=1000", protocol.UpgradeTerminal},
		{"pid=-3&after=0&beatMs=1000", protocol.UpgradeTerminal},
	} {
		if status, _, _ := rawTerminal(t, a, q.query, q.upgrade); status != http.StatusBadRequest {
			t.Errorf("%s, Upgrade %s: status %d, want 400", q.query, q.upgrade, status)
		}
	}
	query := "pid=" + pid + "&after=0&beatMs=1000"
	for name, frame := range map[string][]byte{
		"unknown type":   protocol.AppendFrame(nil, 'z', []byte("x")),
		"past its bound": {protocol.FrameStdin, 0x7f, 0xff, 0xff, 0xff},
		"empty stdin":    protocol.AppendFrame(nil, protocol.FrameStdin),
		"resize to 0":    {protocol.FrameResize, 0, 0, 0, 4, 0, 0, 0, 80},
		"the agent's":    protocol.OutputFrame(nil, 0, []byte("x")),
		"bad signal":     protocol.AppendFrame(nil, protocol.FrameSignal, []byte{0xff}),
	} {
		_, conn, br := rawTerminal(t, a, query, protocol.UpgradeTerminal)
		if conn == nil {
			t.Fatalf("%s: no stream", name)
		}
		conn.Write(frame)
		if e := lastFrame(t, conn, br); e.Reason != protocol.TerminalProtocol {
			t.Errorf("%s: end %+v", name, e)
		}
		conn.Close()
	}

	// A client that never reads: the process writes 8 MiB on its terminal and exits, all of it kept.
	const n = 8 << 20
	loud := startShell(t, a, "sh", "-c", fmt.Sprintf("stty raw -echo; head -c %d /dev/zero | tr '\\0' x; exit 3", n))
	_, conn, _ := rawTerminal(t, a, "pid="+strconv.Itoa(loud.PID)+"&after=0&beatMs=100", protocol.UpgradeTerminal)
	if conn == nil {
		t.Fatal("no stream")
	}
	done, err := a.c.Process(ctx(t), loud.PID, 25*time.Second)
	if err != nil || done.Running || done.ExitCode == nil || *done.ExitCode != 3 || done.OutputEnd != n {
		t.Fatalf("process under a stream that is never read: %+v, %v", done, err)
	}
	// The stream is still there for whoever reads it: the output from its start, then the end.
	var got int64
	fr := protocol.NewFrameReader(bufio.NewReader(conn))
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		f, err := fr.Read()
		if err != nil {
			t.Fatalf("after %d bytes: %v", got, err)
		}
		if f.Type == protocol.FrameOutput {
			start, data := protocol.DecodeOutput(f.Payload)
			if start != got || !bytes.Equal(data, bytes.Repeat([]byte("x"), len(data))) {
				t.Fatalf("output of %d bytes from %d, want from %d", len(data), start, got)
			}
			got += int64(len(data))
		}
		if f.Type == protocol.FrameEnd {
			break
		}
	}
	if got != n {
		t.Fatalf("read %d bytes, want %d", got, n)
	}
}
