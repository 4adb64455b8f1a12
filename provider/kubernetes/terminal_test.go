package kubernetes_test

import (
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv/processtest"
	"github.com/sandboxd/sandbox/provider/kubernetes"
)

// TestTerminals runs the tests of processes on a pty and their WebSocket attach on Pods: the agent's
// pty calls cross pods/exec and its relay as every other call does. There is no pause here; the agent
// is killed as in TestProcesses.
func TestTerminals(t *testing.T) {
	// The connections to the API server are made before the suite counts goroutines.
	newProvider(t)
	processtest.RunTerminal(t, processtest.Provider{New: func(t *testing.T) sandbox.Provider { return newProvider(t) }, KillAgent: killAgent})
}

// BenchmarkTerminalEcho: a keystroke's echo through the terminal attach, over pods/exec, beside a
// local pty's.
func BenchmarkTerminalEcho(b *testing.B) {
	processtest.BenchmarkEcho(b, newProvider(b))
}

// BenchmarkTerminalEchoCalls is BenchmarkTerminalEcho without the provider's terminal streams: each
// key a stdin call, each echo the answer to a waiting output poll, as an agent without the stream
// is driven.
func BenchmarkTerminalEchoCalls(b *testing.B) {
	processtest.BenchmarkEcho(b, struct {
		*kubernetes.Provider
		AttachTerminal struct{} // hides the provider's
	}{Provider: newProvider(b)})
}
