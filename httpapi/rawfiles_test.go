package httpapi_test

import (
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv/filetest"
)

// TestHostFiles runs the suite of streamed files over the host provider.
func TestHostFiles(t *testing.T) {
	filetest.Run(t, func(t *testing.T) sandbox.Provider { return newHost(t) }, nil)
}
