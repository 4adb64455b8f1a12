package httpapi_test

import (
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	"github.com/sandboxd/sandbox/internal/schema/plain"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/host"
	"github.com/sandboxd/sandbox/store/sqlite"
)

func newHost(t *testing.T) sandbox.Provider {
	p, err := host.New(host.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHostProvider runs the HTTP conformance suite over the host provider; once every stack of it is
// closed, none of its event streams, their Runtime.Watch or anything else it started is left running.
func TestHostProvider(t *testing.T) {
	testenv.NoLeaks(t)
	apitest.Run(t, newHost)
}

// TestHostProviderPlain runs it again with every fast path on its plain path (docs/design): the JSON
// Schema library validating requests, encoding/json parsing their bodies, and the store without its
// tail of the newest events.
func TestHostProviderPlain(t *testing.T) {
	apitest.Run(t, newHost,
		stack.API(func(c *httpapi.Config) { c.Schemas, c.PlainJSON = plain.Compile, true }),
		stack.StoreConfig(func(c *sqlite.Config) { c.NoTail = true }))
}
