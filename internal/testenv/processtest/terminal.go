package processtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
)

// RunTerminal runs the tests of processes on a pseudo-terminal and their WebSocket attach on pv, a
// provider that says interactiveTerminal. They check for goroutine leaks: they do not run in parallel
// with others.
func RunTerminal(t *testing.T, pv Provider) {
	t.Run("Session", func(t *testing.T) { terminalSession(t, pv) })
	t.Run("WatchAndControl", func(t *testing.T) { watchAndControl(t, pv) })
	t.Run("NeverHangs", func(t *testing.T) { terminalNeverHangs(t, pv) })
	t.Run("Hostile", func(t *testing.T) { terminalHostile(t, pv) })
	t.Run("Auth", func(t *testing.T) { terminalAuth(t, pv) })
	t.Run("Reconnects", func(t *testing.T) { terminalReconnects(t, pv) })
}

// terminalReconnects: a Terminal whose connections are cut under it, again and again, reconnects
// from the offset it reached and reads the output whole, every byte once and in order.
func terminalReconnects(t *testing.T, pv Provider) {
	testenv.NoLeaks(t)
	s, _, sb := processStack(t, pv.New(t))
	var mu sync.Mutex
	var conns []net.Conn
	dials := 0
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			conns = append(conns, conn)
			dials++
			mu.Unlock()
		}
		return conn, err
	}}
	defer tr.CloseIdleConnections()
	c, err := client.New(s.URL, client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, tr)}),
		client.WithRetry(20, 20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 300
	p := startShell(t, c, sb, tickerArgv(n)...)
	term := attach(t, ctx, c, sb, p.PID, client.TerminalOptions{Watch: true})
	scr := newScreen(term)
	cuts := 0
	for i := 0; i < n; i += 60 {
		scr.expect(t, 0, fmt.Sprintf("line %d\r\n", i))
		mu.Lock()
		for _, conn := range conns {
			conn.Close()
		}
		conns = nil
		mu.Unlock()
		cuts++
	}
	if err := scr.end(t); err != io.EOF {
		t.Fatalf("end after %d cuts: %v", cuts, err)
	}
	mu.Lock()
	if dials <= cuts {
		t.Errorf("%d connections for %d cuts: the terminal did not reconnect", dials, cuts)
	}
	mu.Unlock()
	if want := strings.ReplaceAll(tickerText(n), "\n", "\r\n"); scr.text() != want {
		t.Fatalf("after %d cuts: %d bytes, want the %d of the output:\n%q", cuts, len(scr.text()), len(want), scr.text())
	}
}

// terminalAuth: the attach takes the API's bearer token in the Authorization header, as every route
// does; without it, or with a wrong one, the upgrade is refused with a 401.
func terminalAuth(t *testing.T, pv Provider) {
	testenv.NoLeaks(t)
	tokens, err := httpapi.NewTokens("terminal-secret")
	if err != nil {
		t.Fatal(err)
	}
	s := stack.New(t, pv.New(t), stack.API(func(c *httpapi.Config) { c.HeartbeatInterval, c.Tokens = streamHeartbeat, tokens }))
	hc := &http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}
	newClient := func(token string) *client.Client {
		c, err := client.New(s.URL, client.WithHTTPClient(hc), client.WithToken(token))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := newClient("terminal-secret")
	sb := readySandbox(t, c)
	p := startShell(t, c, sb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, token := range []string{"", "wrong"} {
		if _, err := newClient(token).Terminal(ctx, sb.ID, sb.Generation, p.PID, client.TerminalOptions{}); !errors.Is(err, sandbox.ErrUnauthenticated) {
			t.Errorf("attach with token %q: %v", token, err)
		}
	}
	term := attach(t, ctx, c, sb, p.PID, client.TerminalOptions{})
	scr := newScreen(term)
	term.Write([]byte("echo auth-$((2*21))\n"))
	scr.expect(t, 0, "auth-42")
	term.Write([]byte("exit\n"))
	if err := scr.end(t); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

// screen reads a terminal into a buffer in the background, for a test to wait for text on it.
type screen struct {
	term *client.Terminal
	mu   sync.Mutex
	buf  bytes.Buffer
	err  error
	more chan struct{}
	done chan struct{}
}

func newScreen(term *client.Terminal) *screen {
	s := &screen{term: term, more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		b := make([]byte, 4096)
		for {
			n, err := term.Read(b)
			s.mu.Lock()
			s.buf.Write(b[:n])
			s.err = err
			s.mu.Unlock()
			select {
			case s.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return s
}

// expect waits up to 20 s for want on the screen after from, and returns the offset past it.
func (s *screen) expect(t *testing.T, from int, want string) int {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		s.mu.Lock()
		text, err := s.buf.String(), s.err
		s.mu.Unlock()
		if i := strings.Index(text[min(from, len(text)):], want); i >= 0 {
			return min(from, len(text)) + i + len(want)
		}
		if err != nil {
			t.Fatalf("waiting for %q: %v; screen %q", want, err, text)
		}
		select {
		case <-s.more:
		case <-deadline:
			t.Fatalf("no %q in 20 s; screen %q", want, text)
		}
	}
}

// end waits for the screen's reader to end, and returns its error.
func (s *screen) end(t *testing.T) error {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the terminal did not end in 20 s")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *screen) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// startShell starts sh on a pty of 24×80 in sb.
func startShell(t *testing.T, c *client.Client, sb *sandbox.Sandbox, argv ...string) *sandbox.Process {
	t.Helper()
	if len(argv) == 0 {
		argv = []string{"sh"}
	}
	p, err := c.StartProcess(context.Background(), sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: argv,
		Env: map[string]string{"PS1": "$ ", "TERM": "xterm"}, PTY: &sandbox.TerminalSize{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	if !p.PTY {
		t.Fatalf("started %+v: no pty", p)
	}
	return p
}

func attach(t *testing.T, ctx context.Context, c *client.Client, sb *sandbox.Sandbox, pid int, opts client.TerminalOptions) *client.Terminal {
	t.Helper()
	term, err := c.Terminal(ctx, sb.ID, sb.Generation, pid, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { term.Close() })
	return term
}

// terminalSession: a shell on a pty driven through the WebSocket sees the size it was started with
// and each new one (a resize frame, the resize route), a ^C reaches the program in the foreground,
// its exit is the last frame, and an attach from offset 0 replays everything.
func terminalSession(t *testing.T, pv Provider) {
	testenv.NoLeaks(t)
	_, c, sb := processStack(t, pv.New(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startShell(t, c, sb)
	term := attach(t, ctx, c, sb, p.PID, client.TerminalOptions{})
	scr := newScreen(term)
	if _, err := term.Write([]byte("stty size\n")); err != nil {
		t.Fatal(err)
	}
	at := scr.expect(t, 0, "24 80")

	if err := term.Resize(ctx, sandbox.TerminalSize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	// The resize frame and the keys after it go one connection, in order.
	term.Write([]byte("stty size\n"))
	at = scr.expect(t, at, "30 100")
	if err := c.ResizeProcess(ctx, sb.ID, sb.Generation, p.PID, sandbox.TerminalSize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	term.Write([]byte("stty size\n"))
	at = scr.expect(t, at, "50 132")

	// ^C from the keyboard: the terminal's line discipline signals the foreground group.
	term.Write([]byte("sh -c 'trap \"echo got-int; exit 0\" INT; echo wait-int; while :; do sleep 0.05; done'\n"))
	at = scr.expect(t, at, "wait-int\r\n")
	term.Write([]byte{0x03})
	at = scr.expect(t, at, "got-int")
	term.Write([]byte("echo back\n"))
	at = scr.expect(t, at, "back\r\n")
	term.Write([]byte("exit 7\n"))
	if err := scr.end(t); err != io.EOF {
		t.Fatalf("end: %v, want io.EOF", err)
	}
	if code := term.ExitCode(); code == nil || *code != 7 {
		t.Fatalf("exit code %v, want 7", code)
	}
	whole := scr.text()

	// A later attach from 0 replays the whole session, then the exit.
	again := attach(t, ctx, c, sb, p.PID, client.TerminalOptions{Watch: true})
	replay := newScreen(again)
	if err := replay.end(t); err != io.EOF {
		t.Fatalf("replay end: %v", err)
	}
	if replay.text() != whole || again.Offset() != int64(len(whole)) {
		t.Fatalf("replay of %d bytes (offset %d), want the %d of the session", len(replay.text()), again.Offset(), len(whole))
	}
	// From an offset: the rest only.
	tail := attach(t, ctx, c, sb, p.PID, client.TerminalOptions{After: int64(at), Watch: true})
	rest := newScreen(tail)
	rest.end(t)
	if rest.text() != whole[at:] {
		t.Fatalf("from %d: %q, want %q", at, rest.text(), whole[at:])
	}

	// A signal frame reaches the process's group, and the keys its foreground.
	trapper := startShell(t, c, sb, "sh", "-c", "trap 'echo got-int' INT; trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 0.05; done")
	term = attach(t, ctx, c, sb, trapper.PID, client.TerminalOptions{})
	scr = newScreen(term)
	at = scr.expect(t, 0, "ready")
	term.Write([]byte{0x03})
	at = scr.expect(t, at, "got-int")
	if err := term.Signal(ctx, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	scr.expect(t, at, "got-term")
	if err := scr.end(t); err != io.EOF || term.ExitCode() == nil || *term.ExitCode() != 3 {
		t.Fatalf("end %v, exit code %v, want 3", err, term.ExitCode())
	}
}

// watchAndControl: a watcher reads what the controller types and cannot type itself; a second
// control attach takes over, the first is told and becomes a watcher.
func watchAndControl(t *testing.T, pv Provider) {
	testenv.NoLeaks(t)
	_, c, sb := processStack(t, pv.New(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startShell(t, c, sb)
	first := attach(t, ctx, c, sb, p.PID, client.TerminalOptions{})
	one := newScreen(first)
	watcher := attach(t, ctx, c, sb, p.PID, client.TerminalOptions{Watch: true})
	seen := newScreen(watcher)

	first.Write([]byte("echo from-$((6*7))\n"))
	one.expect(t, 0, "from-42")
	seen.expect(t, 0, "from-42")

	watcher.Write([]byte("echo watcher-$((1+1))\n"))
	testenv.WaitFor(t, "the watcher's write refused", func() bool { return strings.Contains(watcher.LastError(), "watches") })
	if !watcher.Watching() {
		t.Fatal("watcher does not say it watches")
	}

	second := attach(t, ctx, c, sb, p.PID, client.TerminalOptions{})
	two := newScreen(second)
	testenv.WaitFor(t, "the first attach told of the takeover", first.Watching)
	first.Write([]byte("echo first-$((2+2))\n"))
	testenv.WaitFor(t, "the demoted attach's write refused", func() bool { return first.LastError() != "" })
	second.Write([]byte("echo second-$((3+3))\n"))
	two.expect(t, 0, "second-6")
	at := one.expect(t, 0, "second-6")
	seen.expect(t, 0, "second-6")
	for _, s := range []*screen{one, two, seen} {
		if strings.Contains(s.text(), "watcher-2") || strings.Contains(s.text(), "first-4") {
			t.Fatalf("a watcher's keys reached the shell: %q", s.text())
		}
	}
	_ = at
	second.Write([]byte("exit\n"))
	for _, s := range []*screen{one, two, seen} {
		if err := s.end(t); err != io.EOF {
			t.Fatalf("end: %v", err)
		}
	}
}

// dialTerminal opens the terminal WebSocket of pid in sb with a plain WebSocket client, its handshake
// checked against the document; the test's end closes it.
func dialTerminal(t *testing.T, ctx context.Context, s *stack.Stack, sb *sandbox.Sandbox, pid int, hc *http.Client) *websocket.Conn {
	t.Helper()
	u := s.URL + "/v1/sandboxes/" + string(sb.ID) + "/processes/" + strconv.Itoa(pid) + "/terminal?expectedGeneration=" + strconv.FormatInt(int64(sb.Generation), 10)
	conn, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	return conn
}

// textFrame reads an attach's frames until a text frame that want accepts, which it returns, and fails
// the test if none comes within endBound or the connection ends first.
func textFrame(t *testing.T, conn *websocket.Conn, what string, want func(f map[string]any) bool) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), endBound)
	defer cancel()
	for {
		mt, b, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("no %s within %v: %v", what, endBound, err)
		}
		var f map[string]any
		if mt == websocket.MessageText && json.Unmarshal(b, &f) == nil && want(f) {
			return f
		}
	}
}

// lastFrame reads an attach's frames until its end or exit frame, which it returns.
func lastFrame(t *testing.T, conn *websocket.Conn) map[string]any {
	t.Helper()
	return textFrame(t, conn, "end frame", func(f map[string]any) bool { return f["type"] == "end" || f["type"] == "exit" })
}

// terminalNeverHangs: an attach outlives a pause (where the provider pauses), its heartbeats saying
// paused, and goes on after the resume; a terminate, a killed agent (where the provider has one) and
// the API's close (its sandbox running, or paused) each end it with an end frame saying so within the
// heartbeat bound.
func terminalNeverHangs(t *testing.T, pv Provider) {
	testenv.NoLeaks(t)
	prov := pv.New(t)
	s, c, sb := processStack(t, prov)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := prov.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := startShell(t, c, sb)
	term := attach(t, ctx, c, sb, p.PID, client.TerminalOptions{})
	scr := newScreen(term)
	term.Write([]byte("echo before\n"))
	at := scr.expect(t, 0, "before\r\n")
	if m.Capabilities.PauseResume {
		if _, err := c.Pause(ctx, sb.ID, sb.Generation); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "a heartbeat saying paused", term.Paused)
		if _, err := c.Resume(ctx, sb.ID, sb.Generation); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "a heartbeat saying running", func() bool { return !term.Paused() })
		term.Write([]byte("echo after\n"))
		scr.expect(t, at, "after\r\n")
	}

	start := time.Now()
	if _, err := c.Terminate(ctx, sb.ID, sb.Generation); err != nil {
		t.Fatal(err)
	}
	var end *client.EndError
	if err := scr.end(t); !errors.As(err, &end) || end.Reason != client.ProcessEndTerminated {
		t.Fatalf("end after terminate: %v", err)
	}
	// Within the attach's heartbeat (the stack's, 300 ms) and the poll's slack.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("end frame %v after the terminate", d)
	}

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: apitest.Transport(t, tr)}
	if pv.KillAgent != nil {
		other := readySandbox(t, c)
		p := startShell(t, c, other)
		conn := dialTerminal(t, ctx, s, other, p.PID, hc)
		pv.KillAgent(t, prov, other.Ref())
		if f := lastFrame(t, conn); f["type"] != "end" || (f["reason"] != client.ProcessEndAgent && f["reason"] != client.ProcessEndTerminated) {
			t.Fatalf("after the agent was killed: %v", f)
		}
	}

	// The API's close ends an attach whose sandbox runs, and one whose sandbox is paused (where the
	// provider pauses).
	third := readySandbox(t, c)
	conns := []*websocket.Conn{dialTerminal(t, ctx, s, third, startShell(t, c, third).PID, hc)}
	if m.Capabilities.PauseResume {
		fourth := readySandbox(t, c)
		conn := dialTerminal(t, ctx, s, fourth, startShell(t, c, fourth).PID, hc)
		if _, err := c.Pause(ctx, fourth.ID, fourth.Generation); err != nil {
			t.Fatal(err)
		}
		textFrame(t, conn, "heartbeat saying paused", func(f map[string]any) bool { return f["type"] == "heartbeat" && f["state"] == "paused" })
		conns = append(conns, conn)
	}
	s.API.Close()
	for i, conn := range conns {
		if f := lastFrame(t, conn); f["type"] != "end" || f["reason"] != client.ProcessEndDaemonStopping {
			t.Fatalf("attach %d after the API closed: %v", i, f)
		}
	}
}

// terminalHostile: sizes out of 1..65535 are refused (400) at the start and at a resize; malformed
// control frames are answered with error frames and the attach goes on; a frame past the bound, or
// too many refused ones, closes it; an attach to another sandbox's pid is a 404.
func terminalHostile(t *testing.T, pv Provider) {
	testenv.NoLeaks(t)
	s, c, sb := processStack(t, pv.New(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, size := range []sandbox.TerminalSize{{Rows: 0, Cols: 80}, {Rows: 24, Cols: 0}, {Rows: 65536, Cols: 80}, {Rows: 24, Cols: 65536}, {Rows: -1, Cols: -1}} {
		_, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: []string{"true"}, PTY: &size})
		if !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("start on a pty of %+v: %v", size, err)
		}
	}
	p := startShell(t, c, sb)
	for _, size := range []sandbox.TerminalSize{{Rows: 0, Cols: 80}, {Rows: 65536, Cols: 80}, {Rows: 24, Cols: 65536}} {
		if err := c.ResizeProcess(ctx, sb.ID, sb.Generation, p.PID, size); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("resize to %+v: %v", size, err)
		}
	}
	if err := c.ResizeProcess(ctx, sb.ID, sb.Generation+1, p.PID, sandbox.TerminalSize{Rows: 1, Cols: 1}); !errors.Is(err, sandbox.ErrGenerationConflict) {
		t.Errorf("resize at another generation: %v", err)
	}
	plain, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ResizeProcess(ctx, sb.ID, sb.Generation, plain.PID, sandbox.TerminalSize{Rows: 1, Cols: 1}); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Errorf("resize of a process without a pty: %v", err)
	}
	other := readySandbox(t, c)
	if _, err := c.Terminal(ctx, other.ID, other.Generation, p.PID, client.TerminalOptions{}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("attach through another sandbox: %v", err)
	}
	if _, err := c.Terminal(ctx, sb.ID, sb.Generation, p.PID, client.TerminalOptions{After: 1 << 40}); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Errorf("attach past the end: %v", err)
	}

	hc := &http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}
	u := s.URL + "/v1/sandboxes/" + string(sb.ID) + "/processes/" + strconv.Itoa(p.PID) + "/terminal?expectedGeneration=" + strconv.FormatInt(int64(sb.Generation), 10)
	dial := func() *websocket.Conn { return dialTerminal(t, ctx, s, sb, p.PID, hc) }
	// readText reads frames up to the next text frame of type typ.
	readText := func(conn *websocket.Conn, typ string) string {
		t.Helper()
		for {
			mt, b, err := conn.Read(ctx)
			if err != nil {
				t.Fatalf("waiting for a %s frame: %v", typ, err)
			}
			if mt == websocket.MessageText && strings.Contains(string(b), `"type":"`+typ+`"`) {
				return string(b)
			}
		}
	}
	// A GET that is no WebSocket handshake is refused with an ErrorResponse, before anything is upgraded.
	resp, err := hc.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a plain GET of the terminal: status %d, want 400", resp.StatusCode)
	}
	conn := dial()
	for _, bad := range []string{`{`, `[]`, `{"type":"resize","rows":0,"cols":80}`, `{"type":"resize","rows":24,"cols":65536}`,
		`{"type":"signal","signal":"SIGSEGV"}`, `{"type":"launch"}`, `{"type":"resize","rows":24,"cols":80,"extra":1}`, "\xff"} {
		if err := conn.Write(ctx, websocket.MessageText, []byte(bad)); err != nil {
			t.Fatal(err)
		}
		readText(conn, "error")
	}
	// Still attached: keys reach the shell.
	conn.Write(ctx, websocket.MessageBinary, []byte("echo still-$((5*5))\n"))
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("still-25")) {
			break
		}
	}
	// A frame past 64 KiB closes the attach with 1009.
	big := dial()
	big.Write(ctx, websocket.MessageBinary, make([]byte, 1<<20))
	for {
		if _, _, err := big.Read(ctx); err != nil {
			if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
				t.Fatalf("after a 1 MiB frame: %v, want 1009", err)
			}
			break
		}
	}
	// Refused frames past the bound close it with 1008.
	spam := dial()
	go func() {
		for i := 0; i < 200; i++ {
			if spam.Write(ctx, websocket.MessageText, []byte("nonsense")) != nil {
				return
			}
		}
	}()
	for {
		if _, _, err := spam.Read(ctx); err != nil {
			if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
				t.Fatalf("after 200 bad frames: %v, want 1008", err)
			}
			break
		}
	}
	conn.Close(websocket.StatusNormalClosure, "")
	c.SignalProcess(ctx, sb.ID, sb.Generation, p.PID, "KILL")
	c.SignalProcess(ctx, sb.ID, sb.Generation, plain.PID, "KILL")
}
