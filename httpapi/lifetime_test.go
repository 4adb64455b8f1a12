package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
)

// TestIdleWithAnOpenOutputStream: a sandbox with an idle bound is not idle while a client holds a
// process's output stream open through the API, even with no process running and no other call: the
// injected clock passes an hour and the sandbox stays ready. Once the client closes the stream, the
// bound runs from that moment, and the sandbox is paused for idleness when it passes, not before.
//
// The stream is held open as a slow client holds one: the process (ended) wrote more output than the
// connection's buffers take, and the client reads only the stream's first line, so the server's
// handler waits on its write (well within its write timeout) until the client closes.
func TestIdleWithAnOpenOutputStream(t *testing.T) {
	clk := testenv.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const outputOp = "GET /v1/sandboxes/{sandboxId}/processes/{pid}/output"
	streamDone := make(chan int, 1)
	st := stack.New(t, newHost(t),
		stack.Core(func(c *core.Config) {
			c.Now, c.ReconcileInterval = clk.Now, -1
			c.Lifetimes = core.LifetimeConfig{Interval: 5 * time.Millisecond}
		}),
		stack.API(func(c *httpapi.Config) {
			c.ObserveRequest = func(op string, status int, _ time.Duration) {
				if op == outputOp {
					streamDone <- status
				}
			}
		}))
	c, err := client.New(st.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// state reads the store through the runtime: a GET of the sandbox through the API would be use.
	state := func(id sandbox.ID) sandbox.State {
		t.Helper()
		sb, err := st.Runtime.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return sb.State
	}
	// still checks that the sandbox stays ready while the checker runs a dozen times.
	still := func(id sandbox.ID) {
		t.Helper()
		time.Sleep(60 * time.Millisecond)
		if s := state(id); s != sandbox.StateReady {
			t.Fatalf("sandbox %s is %s, want still ready", id, s)
		}
	}

	spec := sandbox.Spec{ClientRequestID: "idle", Extensions: map[string]json.RawMessage{
		core.LifetimeKey: json.RawMessage(`{"idleSeconds": 10, "onIdle": "pause"}`)}}
	created, err := c.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.WaitReady(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	// 16 MiB of output, some 22 MB of stream: more than a loopback connection buffers.
	proc, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: []string{"head", "-c", "16777216", "/dev/zero"}})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := c.WaitProcess(ctx, sb.ID, sb.Generation, proc.PID, 30*time.Second); err != nil || p.Running {
		t.Fatalf("the writer: %+v %v, want ended", p, err)
	}

	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/sandboxes/%s/processes/%d/output?expectedGeneration=%d",
		st.URL, sb.ID, proc.PID, sb.Generation), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if first, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || resp.StatusCode != 200 || !strings.HasPrefix(first, ":") {
		t.Fatalf("the stream: %d %q %v", resp.StatusCode, first, err)
	}
	clk.Add(time.Hour)
	still(sb.ID)
	clk.Add(time.Hour)
	still(sb.ID)
	select {
	case <-streamDone:
		t.Fatal("the output stream ended while its client held it")
	default:
	}

	resp.Body.Close()
	<-streamDone // the handler returned: the sandbox's last use is now
	clk.Add(9 * time.Second)
	still(sb.ID)
	clk.Add(2 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for state(sb.ID) != sandbox.StatePaused {
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s eleven seconds after its stream closed, want paused", sb.ID, state(sb.ID))
		}
		time.Sleep(5 * time.Millisecond)
	}
	evs, err := c.Events(ctx, sandbox.EventQuery{SandboxID: sb.ID})
	if err != nil {
		t.Fatal(err)
	}
	var idle int
	for _, ev := range evs {
		var d sandbox.StateChangedData
		if ev.Type == sandbox.EventStateChanged && json.Unmarshal(ev.Data, &d) == nil && d.To == sandbox.StatePausing && d.Reason == core.ReasonIdle {
			idle++
		}
	}
	if idle != 1 {
		t.Errorf("%d pauses for idleness, want 1", idle)
	}
}
