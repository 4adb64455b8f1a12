package oci_test

import (
	"syscall"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv/processtest"
	"github.com/sandboxd/sandbox/provider/oci"
)

// TestProcesses runs the tests of background processes and their streams over real runc containers;
// a sandbox's agent is killed by its host pid.
func TestProcesses(t *testing.T) {
	processtest.Run(t, processtest.Provider{New: func(t *testing.T) sandbox.Provider { return newProvider(t) }, KillAgent: killAgent})
}

// killAgent kills a sandbox's agent with SIGKILL by its host pid.
func killAgent(t *testing.T, p sandbox.Provider, ref sandbox.Ref) {
	if err := syscall.Kill(agentPid(t, p.(*oci.Provider), ref), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}
