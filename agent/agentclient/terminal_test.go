package agentclient_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// TestAttachTerminalDistrustsTheAgent: an agent without the route (an earlier build) and a process
// without a terminal are ErrUnsupportedCapability, so that the daemon goes on with its calls; an
// agent that switches to another framing, or never answers, is a clear error, never a hang.
func TestAttachTerminalDistrustsTheAgent(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
		want error
	}{
		{"no such route", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, sandbox.ErrUnsupportedCapability},
		{"no terminal", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"code":"` + protocol.CodeNotTerminal + `","message":"no terminal"}`))
		}, sandbox.ErrUnsupportedCapability},
		{"no process", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"code":"not_found","message":"no process 7"}`))
		}, sandbox.ErrNotFound},
		{"another framing", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Upgrade", "sandboxd-terminal-2")
			w.Header().Set("Connection", "Upgrade")
			w.WriteHeader(http.StatusSwitchingProtocols)
		}, sandbox.ErrProviderProtocol},
		{"silent", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, sandbox.ErrProviderUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake(t, agentclient.Wire{}, tc.h)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			st, err := c.AttachTerminal(ctx, 7, 0, time.Second)
			if err == nil {
				st.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestTerminalStreamDistrustsTheAgent: on a stream, output that goes back, an end that is not where
// the output stands, a frame past its bound or of the client's kind are ErrProviderProtocol; a
// stream silent for a beat and its slack is ErrProviderUnavailable, never a hang.
func TestTerminalStreamDistrustsTheAgent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frames []byte
		want   error
	}{
		{"output going back", append(protocol.OutputFrame(nil, 10, []byte("ab")), protocol.OutputFrame(nil, 11, []byte("c"))...), sandbox.ErrProviderProtocol},
		{"output before the offset", protocol.OutputFrame(nil, 3, []byte("a")), sandbox.ErrProviderProtocol},
		{"end elsewhere", protocol.EndFrame(protocol.TerminalEnd{Reason: protocol.TerminalExited, Offset: 99}), sandbox.ErrProviderProtocol},
		{"oversized", []byte{protocol.FrameOutput, 0x7f, 0xff, 0xff, 0xff}, sandbox.ErrProviderProtocol},
		{"the client's frame", protocol.AppendFrame(nil, protocol.FrameStdin, []byte("x")), sandbox.ErrProviderProtocol},
		{"unknown", protocol.AppendFrame(nil, 'z', []byte("x")), sandbox.ErrProviderProtocol},
		{"cut short", protocol.OutputFrame(nil, 10, []byte("abc"))[:8], sandbox.ErrProviderUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agent, daemon := net.Pipe()
			defer agent.Close()
			st := agentclient.NewTerminalStream(daemon, bufio.NewReader(daemon), 10, protocol.MinTerminalBeat)
			defer st.Close()
			go func() {
				agent.Write(tc.frames)
				agent.Close()
			}()
			var err error
			for err == nil {
				_, err = st.Recv()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("silent", func(t *testing.T) {
		agent, daemon := net.Pipe()
		defer agent.Close()
		go io.Copy(io.Discard, agent)
		st := agentclient.NewTerminalStream(daemon, bufio.NewReader(daemon), 0, protocol.MinTerminalBeat)
		defer st.Close()
		start := time.Now()
		if _, err := st.Recv(); !errors.Is(err, sandbox.ErrProviderUnavailable) {
			t.Fatalf("a silent agent: %v", err)
		}
		if d := time.Since(start); d < protocol.MinTerminalBeat+protocol.TerminalSlack {
			t.Fatalf("given up after %v, before the beat and its slack", d)
		}
	})
	t.Run("a write that is never read", func(t *testing.T) {
		agent, daemon := net.Pipe()
		defer agent.Close()
		st := agentclient.NewTerminalStream(daemon, bufio.NewReader(daemon), 0, protocol.MinTerminalBeat)
		defer st.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := st.Stdin(ctx, []byte("x")); !errors.Is(err, sandbox.ErrProviderUnavailable) {
			t.Fatalf("a write nobody reads: %v", err)
		}
	})
}
