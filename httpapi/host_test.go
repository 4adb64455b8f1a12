package httpapi_test

import (
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	"github.com/sandboxd/sandbox/provider/host"
)

// TestHostProvider runs the HTTP conformance suite over the host provider.
func TestHostProvider(t *testing.T) {
	apitest.Run(t, func(t *testing.T) sandbox.Provider {
		p, err := host.New(host.Config{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}
