package host_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv/processtest"
	"github.com/sandboxd/sandbox/provider/host"
)

// TestTerminals runs the tests of processes on a pty and their WebSocket attach on the host provider.
func TestTerminals(t *testing.T) {
	processtest.RunTerminal(t, processtest.Provider{New: func(t *testing.T) sandbox.Provider {
		p := newProvider(t)
		t.Cleanup(func() {
			refs, _ := p.Resources(context.Background())
			for _, ref := range refs {
				if err := p.Release(context.Background(), ref); err != nil {
					t.Error(err)
				}
			}
		})
		return p
	}})
}

// benchProvider is a host provider whose sandboxes are released when the benchmark ends.
func benchProvider(b *testing.B) *host.Provider {
	p, err := host.New(host.Config{Dir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		refs, _ := p.Resources(context.Background())
		for _, ref := range refs {
			p.Release(context.Background(), ref)
		}
	})
	return p
}

// BenchmarkTerminalEcho: a keystroke's echo through the terminal attach, beside a local pty's.
func BenchmarkTerminalEcho(b *testing.B) {
	processtest.BenchmarkEcho(b, benchProvider(b))
}

// BenchmarkProcessFirstByte: a started process's first output byte through the API, beside an exec
// of true.
func BenchmarkProcessFirstByte(b *testing.B) {
	processtest.BenchmarkFirstByte(b, benchProvider(b))
}
