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
	processtest.RunTerminal(t, processtest.Provider{New: func(t *testing.T) sandbox.Provider { return releasedProvider(t) }})
}

// releasedProvider is a host provider whose sandboxes are released when the test ends.
func releasedProvider(t *testing.T) *host.Provider {
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
}

// callsOnly is a host provider without terminal streams: its field of the method's name hides the
// provider's AttachTerminal, as an agent of a build without the stream has none.
type callsOnly struct {
	*host.Provider
	AttachTerminal struct{}
}

// TestTerminalsByCalls runs the same tests where the provider has no terminal streams: the attach
// writes the keys and polls the output by the provider's process calls, as it did before the streams.
func TestTerminalsByCalls(t *testing.T) {
	var _ sandbox.TerminalManager = callsOnly{}
	if _, ok := sandbox.Provider(callsOnly{}).(sandbox.TerminalStreamer); ok {
		t.Fatal("the provider still has its terminal streams")
	}
	processtest.RunTerminal(t, processtest.Provider{New: func(t *testing.T) sandbox.Provider { return callsOnly{Provider: releasedProvider(t)} }})
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

// BenchmarkTerminalEchoCalls is BenchmarkTerminalEcho without the provider's terminal streams: each
// key a stdin call, each echo the answer to a waiting output poll, as an agent without the stream
// is driven.
func BenchmarkTerminalEchoCalls(b *testing.B) {
	processtest.BenchmarkEcho(b, callsOnly{Provider: benchProvider(b)})
}

// BenchmarkProcessFirstByte: a started process's first output byte through the API, beside an exec
// of true.
func BenchmarkProcessFirstByte(b *testing.B) {
	processtest.BenchmarkFirstByte(b, benchProvider(b))
}
