package linearizability

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/sandboxd/sandbox"
)

// op builds a recorded call from call to ret.
func op(client int, call, ret int64, in Input, out Output) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func ok200(g sandbox.Generation, st sandbox.State) Output {
	return Output{Status: 200, Gen: g, State: st}
}

var conflict = Output{Status: 409, Code: sandbox.CodeGenerationConflict}
var invalid = Output{Status: 409, Code: sandbox.CodeInvalidState}

// TestModelRejects shows the checker fails the histories a broken runtime would produce.
func TestModelRejects(t *testing.T) {
	cases := map[string][]porcupine.Operation{
		"two recreates of one generation both succeed": {
			op(0, 0, 1, Input{Kind: Terminate, Gen: 1}, ok200(1, sandbox.StateTerminated)),
			op(0, 2, 5, Input{Kind: Recreate, Gen: 1}, ok200(2, sandbox.StateReady)),
			op(1, 3, 6, Input{Kind: Recreate, Gen: 1}, ok200(2, sandbox.StateReady)),
		},
		"a stale write succeeds": {
			op(0, 0, 1, Input{Kind: Terminate, Gen: 1}, ok200(1, sandbox.StateTerminated)),
			op(0, 2, 3, Input{Kind: Recreate, Gen: 1}, ok200(2, sandbox.StateReady)),
			op(1, 4, 5, Input{Kind: Write, Gen: 1, Value: "x"}, Output{Status: 200}),
		},
		"a file of the old generation is read in the new one": {
			op(0, 0, 1, Input{Kind: Write, Gen: 1, Value: "old"}, Output{Status: 200}),
			op(0, 2, 3, Input{Kind: Terminate, Gen: 1}, ok200(1, sandbox.StateTerminated)),
			op(0, 4, 5, Input{Kind: Recreate, Gen: 1}, ok200(2, sandbox.StateReady)),
			op(1, 6, 7, Input{Kind: Read, Gen: 2}, Output{Status: 200, Content: "old"}),
		},
		"a lost write": {
			op(0, 0, 1, Input{Kind: Write, Gen: 1, Value: "a"}, Output{Status: 200}),
			op(0, 2, 3, Input{Kind: Write, Gen: 1, Value: "b"}, Output{Status: 200}),
			op(1, 4, 5, Input{Kind: Read, Gen: 1}, Output{Status: 200, Content: "a"}),
		},
		"the current generation is refused as stale": {
			op(0, 0, 1, Input{Kind: Pause, Gen: 1}, conflict),
		},
		"a command runs in a paused sandbox": {
			op(0, 0, 1, Input{Kind: Pause, Gen: 1}, ok200(1, sandbox.StatePaused)),
			op(0, 2, 3, Input{Kind: Exec, Gen: 1}, Output{Status: 200}),
		},
		"a pause of a terminated sandbox succeeds": {
			op(0, 0, 1, Input{Kind: Terminate, Gen: 1}, ok200(1, sandbox.StateTerminated)),
			op(0, 2, 3, Input{Kind: Pause, Gen: 1}, ok200(1, sandbox.StatePaused)),
		},
		"a get goes back in time": {
			op(0, 0, 1, Input{Kind: Terminate, Gen: 1}, ok200(1, sandbox.StateTerminated)),
			op(1, 2, 3, Input{Kind: Get}, ok200(1, sandbox.StateReady)),
		},
	}
	for name, h := range cases {
		if res := porcupine.CheckOperationsTimeout(Model(), h, 0); res != porcupine.Illegal {
			t.Errorf("%s: %v, want illegal", name, res)
		}
	}
}

// TestModelAccepts: concurrency and lost answers the runtime may legitimately show.
func TestModelAccepts(t *testing.T) {
	cases := map[string][]porcupine.Operation{
		"a get sees a pause under way": {
			op(0, 0, 10, Input{Kind: Pause, Gen: 1}, ok200(1, sandbox.StatePaused)),
			op(1, 2, 3, Input{Kind: Get}, ok200(1, sandbox.StatePausing)),
			op(2, 4, 5, Input{Kind: Exec, Gen: 1}, invalid),
		},
		"a terminate overtakes a pause": {
			op(0, 0, 10, Input{Kind: Pause, Gen: 1}, ok200(1, sandbox.StateTerminated)),
			op(1, 2, 3, Input{Kind: Terminate, Gen: 1}, ok200(1, sandbox.StateTerminated)),
		},
		"one of two concurrent recreates wins": {
			op(0, 0, 1, Input{Kind: Terminate, Gen: 1}, ok200(1, sandbox.StateTerminated)),
			op(0, 2, 5, Input{Kind: Recreate, Gen: 1}, ok200(2, sandbox.StateReady)),
			op(1, 3, 6, Input{Kind: Recreate, Gen: 1}, conflict),
			op(1, 7, 8, Input{Kind: Read, Gen: 2}, Output{Status: 404, Code: sandbox.CodeNotFound}),
		},
		"an unanswered write may have landed": {
			op(0, 0, 1, Input{Kind: Write, Gen: 1, Value: "a"}, Output{}),
			op(0, 2, 3, Input{Kind: Read, Gen: 1}, Output{Status: 200, Content: "a"}),
		},
		"an unanswered terminate may not have happened": {
			op(0, 0, 1, Input{Kind: Terminate, Gen: 1}, Output{}),
			op(0, 2, 3, Input{Kind: Exec, Gen: 1}, Output{Status: 200}),
		},
	}
	for name, h := range cases {
		if res := porcupine.CheckOperationsTimeout(Model(), h, 0); res != porcupine.Ok {
			t.Errorf("%s: %v, want ok", name, res)
		}
	}
}
