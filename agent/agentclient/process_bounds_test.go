package agentclient_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// TestClientBoundsProcessAnswers: the answers of a hostile agent to the process calls are refused as
// protocol errors: output heads whose lengths or offsets lie, output past what was asked for, a
// process that cannot be, a listing past the table's bound; none makes the client allocate much more
// than the largest chunk it may get.
func TestClientBoundsProcessAnswers(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		// Each answer is made before the call, so that the call's allocations are the client's.
		output := func(head string, data string) func(io.Writer, *http.Request) error {
			body := head + "\n" + data
			answer := fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", protocol.OutputMediaType, len(body), body)
			return func(w io.Writer, _ *http.Request) error {
				_, err := w.Write(answer) // from bytes: a string would be copied first
				return err
			}
		}
		jsonAnswer := func(body string) func(io.Writer, *http.Request) error {
			return func(w io.Writer, _ *http.Request) error {
				_, err := fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				return err
			}
		}
		// Reads of up to 10 bytes from offset 100.
		read := func(ctx context.Context, c *agentclient.Client) error {
			_, err := c.Output(ctx, 7, 100, 10, 0)
			return err
		}
		get := func(ctx context.Context, c *agentclient.Client) error { _, err := c.Process(ctx, 7, 0); return err }
		list := func(ctx context.Context, c *agentclient.Client) error { _, err := c.Processes(ctx); return err }
		proc := `{"pid":7,"argv":["x"],"cwd":"/","running":true,"exitCode":null,"startedAt":"2024-01-01T00:00:00Z","outputOldest":0,"outputEnd":%d}`
		cases := []boundCase{
			{"a valid chunk", output(`{"start":100,"length":3,"end":103,"oldest":0,"done":true}`, "abc"), read, nil},
			{"length is not the bytes", output(`{"start":100,"length":5,"end":105,"oldest":0}`, "abc"), read, sandbox.ErrProviderProtocol},
			{"more than asked", output(`{"start":100,"length":11,"end":111,"oldest":0}`, "abcdefghijk"), read, sandbox.ErrProviderProtocol},
			{"before the offset", output(`{"start":99,"length":1,"end":100,"oldest":0}`, "a"), read, sandbox.ErrProviderProtocol},
			{"a skip that is no drop", output(`{"start":150,"length":1,"end":151,"oldest":0}`, "a"), read, sandbox.ErrProviderProtocol},
			{"past its end", output(`{"start":100,"length":3,"end":101,"oldest":0}`, "abc"), read, sandbox.ErrProviderProtocol},
			{"done before the end", output(`{"start":100,"length":1,"end":105,"oldest":0,"done":true}`, "a"), read, sandbox.ErrProviderProtocol},
			{"no head line", output(strings.Repeat("x", 600), ""), read, sandbox.ErrProviderProtocol},
			{"unknown head field", output(`{"start":100,"length":0,"end":100,"oldest":0,"more":1}`, ""), read, sandbox.ErrProviderProtocol},
			{"chunk past its bound", output(`{"start":100,"length":10,"end":110,"oldest":0}`, strings.Repeat("x", 4<<20)), read, sandbox.ErrProviderProtocol},
			{"a valid process", jsonAnswer(fmt.Sprintf(proc, 5)), get, nil},
			{"another pid", jsonAnswer(strings.Replace(fmt.Sprintf(proc, 5), `"pid":7`, `"pid":8`, 1)), get, sandbox.ErrProviderProtocol},
			{"output past the journal", jsonAnswer(fmt.Sprintf(proc, protocol.JournalBytes+1)), get, sandbox.ErrProviderProtocol},
			{"running with an exit code", jsonAnswer(strings.Replace(fmt.Sprintf(proc, 5), `"exitCode":null`, `"exitCode":0`, 1)), get, sandbox.ErrProviderProtocol},
			{"listing past the table", jsonAnswer("[" + strings.Repeat(fmt.Sprintf(proc, 1)+",", protocol.MaxProcesses) + fmt.Sprintf(proc, 1) + "]"), list, sandbox.ErrProviderProtocol},
		}
		runBounds(t, wire, cases, 2<<20)
	})
}

// TestClientProcessCallsEndByTheirDeadline: an agent that never answers a long poll does not hold its
// caller past the call's context.
func TestClientProcessCallsEndByTheirDeadline(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		release := make(chan struct{})
		c, _ := hostile(t, wire, func(io.Writer, *http.Request) error { <-release; return io.EOF })
		t.Cleanup(func() { close(release) }) // before hostile's own cleanup, which waits for the answer
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		go func() { _, err := c.Output(ctx, 7, 0, 10, 10*time.Second); done <- err }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a silent agent answered")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the call outlived its context")
		}
	})
}
