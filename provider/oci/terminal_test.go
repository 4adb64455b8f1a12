package oci_test

import (
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv/processtest"
)

// TestTerminals runs the tests of processes on a pty and their WebSocket attach over real containers.
func TestTerminals(t *testing.T) {
	processtest.RunTerminal(t, processtest.Provider{New: func(t *testing.T) sandbox.Provider { return newProvider(t) }})
}
