package protocol_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// TestExecRequestCarriesTheCommand: the command the agent runs is the one the client sent.
func TestExecRequestCarriesTheCommand(t *testing.T) {
	cmd, err := sandbox.Command{Argv: []string{"sh", "-c", "true"}, Cwd: "src", Env: map[string]string{"A": "1"},
		Timeout: 1500 * time.Millisecond, MaxOutputBytes: 64}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	req := protocol.NewExecRequest("run-1", cmd)
	if got := req.Command(); req.ID != "run-1" || !reflect.DeepEqual(got, cmd) {
		t.Fatalf("%+v carries %+v, want %+v", req, got, cmd)
	}
}
