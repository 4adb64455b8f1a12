package linearizability

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/sandboxd/sandbox"
)

// Kind is one kind of call.
type Kind string

// The calls the clients make.
const (
	Get       Kind = "get"
	Pause     Kind = "pause"
	Resume    Kind = "resume"
	Terminate Kind = "terminate"
	Recreate  Kind = "recreate"
	Exec      Kind = "exec"
	Write     Kind = "write"
	Read      Kind = "read"
)

// Input is one call: a kind, the sandbox (by index), the expectedGeneration sent and, for a write, the
// content written.
type Input struct {
	Kind    Kind
	Sandbox int
	Gen     sandbox.Generation
	Value   string
}

// Output is what came back: the status (0 when no answer arrived), the error code, and the sandbox's
// generation and state (actions and get) or the file content (read).
type Output struct {
	Status  int
	Code    sandbox.ErrorCode
	Message string
	Gen     sandbox.Generation
	State   sandbox.State
	Content string
}

// State is the model of one sandbox: its generation, state, and the one file the clients write, which
// belongs to the generation (a recreate starts without it).
type State struct {
	Gen     sandbox.Generation
	State   sandbox.State
	HasFile bool
	Content string
}

// settle lists the states s can reach without a client call: a transitional state that its own call
// completes after the call's decisive step (pausing -> paused, resuming -> ready, requested -> starting ->
// ready, terminating -> terminated). A client call is linearized at its decisive step, the fenced store
// update that checks the generation and the transition table; the completion is then one of these moves,
// which may be observed later. A move to failed is not among them: with the host provider nothing fails, so
// a failed sandbox is a violation.
func settle(s State) []State {
	out := []State{s}
	for {
		next := s
		switch s.State {
		case sandbox.StatePausing:
			next.State = sandbox.StatePaused
		case sandbox.StateResuming:
			next.State = sandbox.StateReady
		case sandbox.StateRequested:
			next.State = sandbox.StateStarting
		case sandbox.StateStarting:
			next.State = sandbox.StateReady
		case sandbox.StateTerminating:
			next.State = sandbox.StateTerminated
		default:
			return out
		}
		out = append(out, next)
		s = next
	}
}

// ambiguous reports whether an output says nothing certain about the call's effect: no answer, a provider
// error (502, 503), or a not_found raised by the provider after the runtime's checks passed (the
// generation was released under the call). Such a call may or may not have taken its decisive step.
func (o Output) ambiguous(in Input) bool {
	switch {
	case o.Status == 0 || o.Status >= 500:
		return true
	case o.Status == 404:
		// A read's 404 for a missing file is a certain answer; the provider's "not allocated" is not.
		return in.Kind != Read || strings.Contains(o.Message, "not allocated")
	}
	return false
}

var clientActions = map[Kind]sandbox.Action{
	Pause: sandbox.ActionPause, Resume: sandbox.ActionResume, Terminate: sandbox.ActionTerminate,
	Recreate: sandbox.ActionRecreate,
}

// step applies one call to one settled model state and returns the states it may lead to, none when the
// output is impossible from s.
func step(s State, in Input, out Output) []State {
	if in.Kind == Get {
		if out.Status != 200 {
			return []State{s} // a read that failed tells nothing
		}
		if out.Gen == s.Gen && out.State == s.State {
			return []State{s}
		}
		return nil
	}
	// The fence comes first: a stale generation is a conflict whatever the state.
	if out.Code == sandbox.CodeGenerationConflict {
		if s.Gen != in.Gen {
			return []State{s}
		}
		return nil
	}
	if s.Gen != in.Gen {
		if out.ambiguous(in) {
			return []State{s}
		}
		return nil
	}
	if a, ok := clientActions[in.Kind]; ok {
		t, err := sandbox.Next(s.State, a)
		moved := s
		if err == nil && t.Outcome == sandbox.Move {
			moved.State = t.To
			if in.Kind == Recreate {
				moved = State{Gen: s.Gen + 1, State: t.To}
			}
		}
		switch {
		case out.Code == sandbox.CodeInvalidState:
			if err != nil {
				return []State{s}
			}
			return nil
		case out.Status == 200:
			if err != nil || out.Gen < in.Gen || (in.Kind == Recreate && out.Gen != in.Gen+1) {
				return nil
			}
			return []State{moved}
		case out.ambiguous(in):
			if err != nil {
				return []State{s}
			}
			return []State{s, moved}
		}
		return nil
	}
	// Commands and file calls: the runtime checks the generation, then that the sandbox is ready.
	ready := s.State == sandbox.StateReady
	switch {
	case out.Code == sandbox.CodeInvalidState:
		if !ready {
			return []State{s}
		}
		return nil
	case !ready:
		return nil
	case out.ambiguous(in):
		if in.Kind == Write {
			w := s
			w.HasFile, w.Content = true, in.Value
			return []State{s, w}
		}
		return []State{s}
	}
	switch in.Kind {
	case Exec:
		if out.Status == 200 {
			return []State{s}
		}
	case Write:
		if out.Status == 200 {
			s.HasFile, s.Content = true, in.Value
			return []State{s}
		}
	case Read:
		if out.Status == 200 && s.HasFile && out.Content == s.Content {
			return []State{s}
		}
		if out.Status == 404 && !s.HasFile {
			return []State{s}
		}
	}
	return nil
}

// Model is the sequential specification the history is checked against, partitioned by sandbox (calls
// on different sandboxes never interact). It is nondeterministic: a state may settle before each call,
// and an ambiguous output leads both to the state with the call's effect and to the state without.
func Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[int][]porcupine.Operation{}
			var keys []int
			for _, op := range h {
				k := op.Input.(Input).Sandbox
				if _, ok := by[k]; !ok {
					keys = append(keys, k)
				}
				by[k] = append(by[k], op)
			}
			var parts [][]porcupine.Operation
			for _, k := range keys {
				parts = append(parts, by[k])
			}
			return parts
		},
		Init: func() []any {
			// Every sandbox starts the same way: ready at generation 1, without the file.
			return []any{State{Gen: 1, State: sandbox.StateReady}}
		},
		Step: func(state, input, output any) []any {
			var next []any
			for _, s := range settle(state.(State)) {
				for _, n := range step(s, input.(Input), output.(Output)) {
					next = append(next, n)
				}
			}
			return next
		},
		Equal: func(a, b any) bool { return a.(State) == b.(State) },
		DescribeOperation: func(input, output any) string {
			in, out := input.(Input), output.(Output)
			res := fmt.Sprintf("%d %s", out.Status, out.Code)
			switch {
			case out.Status == 200 && (in.Kind == Read):
				res = fmt.Sprintf("200 %q", out.Content)
			case out.Status == 200 && in.Kind != Exec && in.Kind != Write:
				res = fmt.Sprintf("200 g%d %s", out.Gen, out.State)
			}
			v := ""
			if in.Kind == Write {
				v = fmt.Sprintf(" %q", in.Value)
			}
			return fmt.Sprintf("sbx%d %s(g%d%s) -> %s", in.Sandbox, in.Kind, in.Gen, v, res)
		},
		DescribeState: func(state any) string {
			s := state.(State)
			if s.HasFile {
				return fmt.Sprintf("g%d %s file=%q", s.Gen, s.State, s.Content)
			}
			return fmt.Sprintf("g%d %s no file", s.Gen, s.State)
		},
	}
	return nm.ToModel()
}
