// Package processtest holds the tests of background processes and their output streams that every
// provider with a sandbox.ProcessManager passes, over the daemon's stack (stack.New) and the Go client,
// every answer checked against api/extensions.yaml. Only tests import it.
package processtest

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
func processStack(t *testing.T, p sandbox.Provider) (*stack.Stack, *client.Client, *sandbox.Sandbox) {
	t.Helper()
	s := stack.New(t, p, stack.API(func(c *httpapi.Config) { c.HeartbeatInterval = streamHeartbeat }))
	c, err := client.New(s.URL, client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}),
		client.WithRetry(20, 20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return s, c, readySandbox(t, c)
}

// readySandbox creates a sandbox and waits until it is ready.
func readySandbox(t *testing.T, c *client.Client) *sandbox.Sandbox {
	t.Helper()
	ctx := context.Background()
	sb, err := c.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if sb, err = c.WaitState(ctx, sb.ID, sandbox.StateReady); err != nil {
		t.Fatal(err)
	}
	return sb
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

// Provider is what the tests need of a provider: a fresh one for each test (released when the test
// ends), and a way to kill the agent of one of its sandboxes (nil: the provider has none apart from
// the daemon).
type Provider struct {
	New       func(t *testing.T) sandbox.Provider
	KillAgent func(t *testing.T, p sandbox.Provider, ref sandbox.Ref)
}

// Run runs every test of the package on pv. The tests check for goroutine leaks: they do not run in
// parallel with others.
func Run(t *testing.T, pv Provider) {
	t.Run("OutputResumes", func(t *testing.T) { outputResumes(t, pv) })
	t.Run("StreamsNeverHang", func(t *testing.T) { streamsNeverHang(t, pv) })
	t.Run("PauseHoldsStreams", func(t *testing.T) { pauseHoldsStreams(t, pv) })
	t.Run("RefusesMalformed", func(t *testing.T) { refusesMalformed(t, pv) })
}

// outputResumes: a process printing a line every 10 ms, read by a client that drops its
// connection at random points and reopens it at the offset it reached, and by an OutputReader, is read
// whole by both, every byte once and in order; no goroutine of a stream is left behind.
func outputResumes(t *testing.T, pv Provider) {
	testenv.NoLeaks(t)
	_, c, sb := processStack(t, pv.New(t))
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

// endBound is how long a stream may take to end once its sandbox or agent is gone: the heartbeat, the
// slack of a poll, and room for a loaded machine. A stream that takes longer hangs.
const endBound = streamHeartbeat + 3*time.Second + 10*time.Second

// openStreams opens the output streams of an idle process and of a ticking one in sb, and returns a
// function that waits for both to end and returns their end events.
func openStreams(t *testing.T, c *client.Client, sb *sandbox.Sandbox) (ticking int, ends func() []client.OutputEvent) {
	t.Helper()
	ctx := context.Background()
	var streams []*client.OutputStream
	for _, argv := range [][]string{{"sleep", "120"}, tickerArgv(12000)} {
		p, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: argv})
		if err != nil {
			t.Fatal(err)
		}
		ticking = p.PID
		s, err := c.OpenOutput(ctx, sb.ID, sb.Generation, p.PID, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		streams = append(streams, s)
	}
	// Both streams are open and past their first read before the test acts.
	for _, s := range streams[1:] {
		if ev, err := s.Next(); err != nil || ev.Kind != "output" {
			t.Fatalf("first event %+v, %v", ev, err)
		}
	}
	results := make(chan client.OutputEvent, len(streams))
	for _, s := range streams {
		go func() {
			for {
				ev, err := s.Next()
				if err != nil {
					results <- client.OutputEvent{Kind: "error", Message: err.Error()}
					return
				}
				if ev.Kind == "end" {
					results <- ev
					return
				}
			}
		}()
	}
	return ticking, func() []client.OutputEvent {
		t.Helper()
		var out []client.OutputEvent
		timeout := time.After(endBound)
		for range streams {
			select {
			case ev := <-results:
				out = append(out, ev)
			case <-timeout:
				t.Fatalf("a stream did not end within %v", endBound)
			}
		}
		return out
	}
}

func wantEnds(t *testing.T, what string, evs []client.OutputEvent, reasons ...string) {
	t.Helper()
	for _, ev := range evs {
		ok := false
		for _, r := range reasons {
			ok = ok || (ev.Kind == "end" && ev.Reason == r)
		}
		if !ok {
			t.Errorf("%s: stream ended with %+v, want an end event of %v", what, ev, reasons)
		}
	}
}

// streamsNeverHang: an idle process's output stream carries a heartbeat comment each interval; open
// output streams end with an end event saying why, within the heartbeat bound, when the sandbox's
// agent is killed, when it is terminated and when the daemon's API closes (both while the sandbox is
// paused, where the provider pauses: a pause alone holds streams, pauseHoldsStreams); no goroutine is
// left.
func streamsNeverHang(t *testing.T, pv Provider) {
	testenv.NoLeaks(t)
	p := pv.New(t)
	s, c, sb := processStack(t, p)
	ctx := context.Background()

	idle, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: []string{"sleep", "120"}})
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	testenv.SSEHeartbeat(t, &http.Client{Transport: apitest.Transport(t, tr)},
		fmt.Sprintf("%s/v1/sandboxes/%s/processes/%d/output?expectedGeneration=%d", s.URL, sb.ID, idle.PID, sb.Generation), endBound)

	m, err := p.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pv.KillAgent != nil {
		_, ends := openStreams(t, c, sb)
		pv.KillAgent(t, p, sb.Ref())
		wantEnds(t, "agent killed", ends(), client.ProcessEndAgent, client.ProcessEndTerminated)
	}

	// A terminate, and the API's close, end streams; where the provider pauses, streams a pause holds.
	pause := func(sb *sandbox.Sandbox) {
		t.Helper()
		if !m.Capabilities.PauseResume {
			return
		}
		if _, err := c.Pause(ctx, sb.ID, sb.Generation); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitState(ctx, sb.ID, sandbox.StatePaused); err != nil {
			t.Fatal(err)
		}
	}
	other := readySandbox(t, c)
	_, ends := openStreams(t, c, other)
	pause(other)
	if _, err := c.Terminate(ctx, other.ID, other.Generation); err != nil {
		t.Fatal(err)
	}
	wantEnds(t, "terminate", ends(), client.ProcessEndTerminated)

	third := readySandbox(t, c)
	_, ends = openStreams(t, c, third)
	pause(third)
	s.API.Close()
	wantEnds(t, "API closed", ends(), client.ProcessEndDaemonStopping)
}

// pauseHoldsStreams: a process printing a line every 10 ms is read by an output stream and an
// OutputReader while its sandbox is paused for a while: the stream's heartbeats say paused and carry
// no output until one says running after the resume, and both readers get every byte once, in order;
// a stream opened while paused is refused; a client that goes away during a pause leaves no goroutine.
func pauseHoldsStreams(t *testing.T, pv Provider) {
	testenv.NoLeaks(t)
	p := pv.New(t)
	_, c, sb := processStack(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := p.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Capabilities.PauseResume {
		if _, err := c.Pause(ctx, sb.ID, sb.Generation); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
			t.Fatalf("pause where the provider does not pause: %v", err)
		}
		return
	}
	const n = 400
	tick, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: tickerArgv(n)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.OpenOutput(ctx, sb.ID, sb.Generation, tick.PID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A second stream, whose client goes away during the pause.
	gone, err := c.OpenOutput(ctx, sb.ID, sb.Generation, tick.PID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	r := c.NewOutputReader(ctx, sb.ID, sb.Generation, tick.PID, 0)
	defer r.Close()
	whole := make(chan []byte, 1)
	reading := make(chan struct{}) // the reader's connection is open: it got its first byte
	go func() {
		b := make([]byte, 1)
		_, err := io.ReadFull(r, b)
		close(reading)
		if err == nil {
			var rest []byte
			rest, err = io.ReadAll(r)
			b = append(b, rest...)
		}
		if err != nil {
			t.Errorf("reader: %v", err)
		}
		whole <- b
	}()
	<-reading

	var got []byte
	next := func() client.OutputEvent {
		t.Helper()
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("stream at %d: %v", len(got), err)
		}
		if ev.Kind == "output" {
			if ev.Offset != int64(len(got)) {
				t.Fatalf("output at %d, want %d", ev.Offset, len(got))
			}
			got = append(got, ev.Data...)
		}
		return ev
	}
	for len(got) == 0 {
		next()
	}
	if _, err := c.Pause(ctx, sb.ID, sb.Generation); err != nil {
		t.Fatal(err)
	}
	// Output sent before the stream learnt of the pause may come first; none after its first
	// heartbeat saying paused.
	for ev := next(); ev.Kind != "heartbeat" || ev.State != client.StreamPaused; ev = next() {
		if ev.Kind != "output" {
			t.Fatalf("before the paused heartbeat: %+v", ev)
		}
	}
	at := len(got)
	if _, err := c.WaitState(ctx, sb.ID, sandbox.StatePaused); err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenOutput(ctx, sb.ID, sb.Generation, tick.PID, 0); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("open while paused: %v", err)
	}
	testenv.WaitFor(t, "the reader saying paused", r.Paused)
	// Three streams wait out the pause (the stream read here, the one closed now, the reader's); the
	// closed one's goroutine ends although its sandbox stays paused.
	testenv.WaitFor(t, "three streams waiting out the pause", func() bool { return testenv.GoroutinesIn(testenv.StreamPaused) == 3 })
	gone.Close()
	testenv.WaitFor(t, "the closed stream's end", func() bool { return testenv.GoroutinesIn(testenv.StreamPaused) == 2 })
	time.Sleep(2 * time.Second)
	// The paused heartbeats come each interval, with the offset reached and no output between them.
	for range 2 {
		if ev := next(); ev.Kind != "heartbeat" || ev.State != client.StreamPaused || ev.Offset != int64(at) {
			t.Fatalf("while paused: %+v, at %d", ev, at)
		}
	}
	if _, err := c.Resume(ctx, sb.ID, sb.Generation); err != nil {
		t.Fatal(err)
	}
	for ev := next(); ev.Kind != "heartbeat" || ev.State != client.StreamRunning; ev = next() {
		if ev.Kind != "heartbeat" || ev.State != client.StreamPaused {
			t.Fatalf("before the running heartbeat: %+v", ev)
		}
	}
	for {
		ev := next()
		if ev.Kind == "end" {
			if ev.Reason != client.ProcessEndExited || ev.Offset != int64(len(got)) {
				t.Fatalf("end %+v at %d", ev, len(got))
			}
			break
		}
		if ev.Kind != "output" && ev.Kind != "heartbeat" {
			t.Fatalf("after the resume: %+v", ev)
		}
	}
	if string(got) != tickerText(n) || at == len(got) {
		t.Fatalf("the stream got %d bytes (%d before the pause), not the %d printed", len(got), at, len(tickerText(n)))
	}
	if b := <-whole; string(b) != tickerText(n) || r.Paused() {
		t.Fatalf("the reader got %d bytes, not the %d printed (paused %v)", len(b), len(tickerText(n)), r.Paused())
	}
}

// refusesMalformed: requests a sandbox cannot honour are refused with the contract's errors before
// anything runs, and a process of one sandbox is not reachable through another.
func refusesMalformed(t *testing.T, pv Provider) {
	s, c, sb := processStack(t, pv.New(t))
	ctx := context.Background()
	p, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: []string{"sh", "-c", "echo hi; sleep 60"}})
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("%s/v1/sandboxes/%s/processes", s.URL, sb.ID)
	hc := &http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}
	status := func(method, url, body string, header ...string) int {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	pid := fmt.Sprint(p.PID)
	big := strings.Repeat("A", (sandbox.MaxProcessStdinBytes/3+2)*4)
	for _, tc := range []struct {
		name, method, url, body string
		header                  []string
		want                    int
	}{
		{"pid 0", "GET", base + "/0?expectedGeneration=1", "", nil, 400},
		{"pid not a number", "GET", base + "/x?expectedGeneration=1", "", nil, 400},
		{"no generation", "GET", base + "/" + pid, "", nil, 400},
		{"another generation", "GET", base + "/" + pid + "?expectedGeneration=2", "", nil, 409},
		{"unknown pid", "GET", base + "/999999?expectedGeneration=1", "", nil, 404},
		{"negative offset", "GET", base + "/" + pid + "/output?expectedGeneration=1&after=-1", "", nil, 400},
		{"offset past the end", "GET", base + "/" + pid + "/output?expectedGeneration=1&after=1000000", "", nil, 400},
		{"Last-Event-ID not an offset", "GET", base + "/" + pid + "/output?expectedGeneration=1", "", []string{"Last-Event-ID", "x"}, 400},
		{"empty argv", "POST", base, `{"expectedGeneration":1,"argv":[]}`, nil, 400},
		{"NUL in argv", "POST", base, `{"expectedGeneration":1,"argv":["a\u0000b"]}`, nil, 400},
		{"tag too long", "POST", base, `{"expectedGeneration":1,"argv":["true"],"tag":"` + strings.Repeat("t", 300) + `"}`, nil, 400},
		{"stdin not base64", "POST", base, `{"expectedGeneration":1,"argv":["true"],"stdinBase64":"!!"}`, nil, 400},
		{"stdin past its bound", "POST", base + "/" + pid + "/stdin", `{"expectedGeneration":1,"dataBase64":"` + big + `"}`, nil, 400},
		{"unknown signal", "POST", base + "/" + pid + "/signal", `{"expectedGeneration":1,"signal":"SEGV"}`, nil, 400},
		{"wait too long", "POST", base + "/" + pid + "/wait", `{"expectedGeneration":1,"timeoutMs":999999999}`, nil, 400},
	} {
		if got := status(tc.method, tc.url, tc.body, tc.header...); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	// Another sandbox does not know the process.
	other := readySandbox(t, c)
	if _, err := c.GetProcess(ctx, other.ID, other.Generation, p.PID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("the process through another sandbox: %v", err)
	}
	if err := c.SignalProcess(ctx, sb.ID, sb.Generation, p.PID, "KILL"); err != nil {
		t.Fatal(err)
	}
	if done, err := c.WaitProcess(ctx, sb.ID, sb.Generation, p.PID, 10*time.Second); err != nil || done.Running || *done.ExitCode != 137 {
		t.Fatalf("after KILL: %+v, %v", done, err)
	}
}
