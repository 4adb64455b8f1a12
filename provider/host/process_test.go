package host_test

import (
	"context"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv/processtest"
)

// TestProcesses runs the tests of background processes and their streams on the host provider, whose
// processes are the daemon's own (it has no agent to kill); every sandbox is released when a test
// ends, so that no process outlives it.
func TestProcesses(t *testing.T) {
	processtest.Run(t, processtest.Provider{New: func(t *testing.T) sandbox.Provider {
		p := newProvider(t)
		t.Cleanup(func() {
			refs, err := p.Resources(context.Background())
			if err != nil {
				t.Error(err)
			}
			for _, ref := range refs {
				if err := p.Release(context.Background(), ref); err != nil {
					t.Error(err)
				}
			}
		})
		return p
	}})
}
