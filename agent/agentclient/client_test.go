package agentclient_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/internal/agentwire"
)

// fake serves h on a unix socket and returns a client of it on wire.
func fake(t *testing.T, wire agentclient.Wire, h http.HandlerFunc) *agentclient.Client {
	t.Helper()
	c, _ := counted(t, wire, &http.Server{Handler: h})
	return c
}

func TestClientDistrustsTheAgent(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		req := protocol.ExecRequest{Argv: []string{"true"}, TimeoutMs: 1000, MaxOutputBytes: 4}
		for _, tc := range []struct {
			name   string
			status int
			body   string
			want   error
		}{
			{"not json", 200, "<html>", sandbox.ErrProviderProtocol},
			{"unknown field", 200, `{"exitCode":0,"startedAt":"2024-01-01T00:00:00Z","finishedAt":"2024-01-01T00:00:01Z","extra":1}`, sandbox.ErrProviderProtocol},
			{"no exit code", 200, `{"startedAt":"2024-01-01T00:00:00Z","finishedAt":"2024-01-01T00:00:01Z"}`, sandbox.ErrProviderProtocol},
			{"exit code out of range", 200, `{"exitCode":300,"startedAt":"2024-01-01T00:00:00Z","finishedAt":"2024-01-01T00:00:01Z"}`, sandbox.ErrProviderProtocol},
			{"output past the cap", 200, `{"exitCode":0,"stdout":"aGVsbG8gd29ybGQ=","startedAt":"2024-01-01T00:00:00Z","finishedAt":"2024-01-01T00:00:01Z"}`, sandbox.ErrProviderProtocol},
			{"time runs backwards", 200, `{"exitCode":0,"startedAt":"2024-01-01T00:00:02Z","finishedAt":"2024-01-01T00:00:01Z"}`, sandbox.ErrProviderProtocol},
			{"trailing data", 200, `{"exitCode":0,"startedAt":"2024-01-01T00:00:00Z","finishedAt":"2024-01-01T00:00:01Z"} {}`, sandbox.ErrProviderProtocol},
			{"huge answer", 200, `{"stdout":"` + strings.Repeat("A", 30<<20) + `"}`, sandbox.ErrProviderProtocol},
			{"malformed error", 500, "boom", sandbox.ErrProviderProtocol},
			{"unknown error code", 409, `{"code":"generation_conflict","message":"x"}`, sandbox.ErrProviderProtocol},
			{"not found keeps its class", 404, `{"code":"not_found","message":"x"}`, sandbox.ErrNotFound},
			{"past the deadline", 504, `{"code":"deadline_exceeded","message":"x"}`, sandbox.ErrProviderUnavailable},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := fake(t, wire, func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Length", strconv.Itoa(len(tc.body)))
					w.WriteHeader(tc.status)
					w.Write([]byte(tc.body))
				})
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := c.Exec(ctx, req); !errors.Is(err, tc.want) {
					t.Fatalf("got %v, want %v", err, tc.want)
				}
			})
		}
	})
}

// TestClientReadsBothAnswerForms: the client asks for the compact exec answer and takes it, checks its
// lengths and head like any answer, and still takes the JSON answer of an agent that does not know the
// compact form.
func TestClientReadsBothAnswerForms(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		req := protocol.ExecRequest{Argv: []string{"true"}, TimeoutMs: 1000, MaxOutputBytes: 16}
		const head = `{"exitCode":3,"stdoutBytes":5,"stderrBytes":2,"timedOut":false,"cancelled":false,"truncated":false,` +
			`"startedAt":"2024-01-01T00:00:00Z","finishedAt":"2024-01-01T00:00:01Z"}`
		for _, tc := range []struct {
			name, contentType, body string
			want                    error
		}{
			{"compact", agentwire.MediaType, head + "\nhello\x00\n", nil},
			{"json of an older agent", "application/json", `{"exitCode":3,"stdout":"aGVsbG8=","stderr":"AAo=",` +
				`"startedAt":"2024-01-01T00:00:00Z","finishedAt":"2024-01-01T00:00:01Z"}`, nil},
			{"compact, short", agentwire.MediaType, head + "\nhello", sandbox.ErrProviderProtocol},
			{"compact, long", agentwire.MediaType, head + "\nhello\x00\n!", sandbox.ErrProviderProtocol},
			{"compact, no head line", agentwire.MediaType, head, sandbox.ErrProviderProtocol},
			{"compact, unknown field", agentwire.MediaType, `{"exitCode":0,"extra":1}` + "\n", sandbox.ErrProviderProtocol},
			{"compact, negative length", agentwire.MediaType, `{"exitCode":0,"stdoutBytes":-1,"stderrBytes":1,` +
				`"startedAt":"2024-01-01T00:00:00Z","finishedAt":"2024-01-01T00:00:01Z"}` + "\n", sandbox.ErrProviderProtocol},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := fake(t, wire, func(w http.ResponseWriter, r *http.Request) {
					if got := r.Header.Get("Accept"); got != agentwire.MediaType {
						t.Errorf("Accept %q, want %q", got, agentwire.MediaType)
					}
					w.Header().Set("Content-Type", tc.contentType)
					w.Write([]byte(tc.body))
				})
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				res, err := c.Exec(ctx, req)
				if !errors.Is(err, tc.want) {
					t.Fatalf("got %v, want %v", err, tc.want)
				}
				if err == nil && (string(res.Stdout) != "hello" || string(res.Stderr) != "\x00\n" || res.ExitCode == nil || *res.ExitCode != 3) {
					t.Fatalf("result %+v", res)
				}
			})
		}
	})
}

func TestClientTimesOutOnSilence(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		release := make(chan struct{})
		c := fake(t, wire, func(w http.ResponseWriter, r *http.Request) { <-release })
		defer close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if _, err := c.Health(ctx); !errors.Is(err, sandbox.ErrProviderUnavailable) {
			t.Fatalf("silent agent: %v", err)
		}
		if _, err := agentclient.NewUnix("/nonexistent/sock").Health(context.Background()); !errors.Is(err, sandbox.ErrProviderUnavailable) {
			t.Fatalf("no agent: %v", err)
		}
	})
}

// TestPlainExecAsksForJSON: on the plain path the client does not ask for the compact answer, and
// takes the agent's JSON one.
func TestPlainExecAsksForJSON(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		wire.PlainExec = true
		c := fake(t, wire, func(w http.ResponseWriter, r *http.Request) {
			if got := r.Header.Get("Accept"); got != "" {
				t.Errorf("Accept %q on the plain path", got)
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"exitCode":3,"stdout":"aGVsbG8=","stderr":"AAo=","startedAt":"2024-01-01T00:00:00Z","finishedAt":"2024-01-01T00:00:01Z"}`))
		})
		res, err := c.Exec(bounded(t), protocol.ExecRequest{Argv: []string{"true"}, TimeoutMs: 1000, MaxOutputBytes: 16})
		if err != nil || res.Stdout != "hello" || res.Stderr != "\x00\n" || res.ExitCode == nil || *res.ExitCode != 3 {
			t.Fatalf("result %+v, %v", res, err)
		}
	})
}

func TestParseWire(t *testing.T) {
	for in, want := range map[string]agentclient.Wire{
		"":                  {},
		"transport":         {PlainTransport: true},
		"exec":              {PlainExec: true},
		" exec , transport": {PlainTransport: true, PlainExec: true},
	} {
		if got, err := agentclient.ParseWire(in); err != nil || got != want {
			t.Errorf("ParseWire(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	if _, err := agentclient.ParseWire("transport,json"); err == nil {
		t.Error(`ParseWire("transport,json"): no error`)
	}
}
