package oci_test

import (
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv/processtest"
	"github.com/sandboxd/sandbox/provider/oci"
)

// TestTerminals runs the tests of processes on a pty and their WebSocket attach over real containers;
// a sandbox's agent is killed by its host pid.
func TestTerminals(t *testing.T) {
	processtest.RunTerminal(t, processtest.Provider{New: func(t *testing.T) sandbox.Provider { return newProvider(t) }, KillAgent: killAgent})
}

// BenchmarkTerminalEcho: a keystroke's echo through the terminal attach, beside a local pty's.
func BenchmarkTerminalEcho(b *testing.B) {
	processtest.BenchmarkEcho(b, newProvider(b))
}

// BenchmarkTerminalEchoCalls is BenchmarkTerminalEcho without the provider's terminal streams: each
// key a stdin call, each echo the answer to a waiting output poll, as an agent without the stream
// is driven.
func BenchmarkTerminalEchoCalls(b *testing.B) {
	processtest.BenchmarkEcho(b, struct {
		*oci.Provider
		AttachTerminal struct{} // hides the provider's
	}{Provider: newProvider(b)})
}

// BenchmarkProcessFirstByte: a started process's first output byte through the API, beside an exec
// of true.
func BenchmarkProcessFirstByte(b *testing.B) {
	processtest.BenchmarkFirstByte(b, newProvider(b))
}
