package kubernetes_test

import (
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv/filetest"
)

// TestFiles runs the suite of streamed files (raw transfers, ranges, resumed uploads, archives,
// watches and the attacks on their confinement) on Pods, through their agents over pods/exec.
func TestFiles(t *testing.T) {
	// The connections to the API server are made before the suite counts goroutines.
	newProvider(t)
	filetest.Run(t, func(t *testing.T) sandbox.Provider { return newProvider(t) }, killAgent)
}
