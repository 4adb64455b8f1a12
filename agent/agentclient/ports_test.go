package agentclient_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// TestDialPortDistrustsTheAgent: an agent without the relay (an earlier build), one that switches to
// something else, one whose answer never ends, and one that never answers are each a clear error,
// never a hang.
func TestDialPortDistrustsTheAgent(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
		want error
	}{
		{"no such route", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, sandbox.ErrProviderProtocol},
		{"another protocol", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Upgrade", "h2c")
			w.Header().Set("Connection", "Upgrade")
			w.WriteHeader(http.StatusSwitchingProtocols)
		}, sandbox.ErrProviderProtocol},
		{"an endless head", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Long", strings.Repeat("a", 16<<10))
			w.WriteHeader(http.StatusBadGateway)
		}, sandbox.ErrProviderProtocol},
		{"unreachable", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte(`{"code":"` + protocol.CodePortUnreachable + `","message":"refused"}`))
		}, sandbox.ErrPortUnreachable},
		{"silent", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, sandbox.ErrProviderUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake(t, agentclient.Wire{}, tc.h)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			conn, err := c.DialPort(ctx, 80)
			if err == nil {
				conn.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}
