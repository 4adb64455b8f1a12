package sandbox_test

import (
	"slices"
	"testing"

	"github.com/sandboxd/sandbox"
)

// TestReactionTable checks every (record state, observed state) pair against the reactions written out
// here independently of the table in reaction.go: where recording the observation leaves the record, and
// what reconcile does instead when nothing is in flight.
func TestReactionTable(t *testing.T) {
	const alloc, rel, pause, resume = sandbox.RepairAllocate, sandbox.RepairRelease, sandbox.RepairPause, sandbox.RepairResume
	type cell struct {
		to     sandbox.State  // where recording leaves the record; "" when it changes nothing
		repair sandbox.Repair // what reconcile does instead
	}
	stay := cell{}
	to := func(s sandbox.State) cell { return cell{to: s} }
	fix := func(r sandbox.Repair) cell { return cell{repair: r} }
	// Columns in the order of sandbox.ObservedStates: absent, starting, ready, paused, failed.
	want := map[sandbox.State][5]cell{
		R:  {fix(alloc), to(S), to(Y), stay, {F, alloc}},
		S:  {to(F), stay, to(Y), stay, to(F)},
		Y:  {to(F), stay, stay, stay, to(F)},
		PG: {to(F), stay, fix(pause), to(P), to(F)},
		P:  {to(F), stay, stay, stay, to(F)},
		RG: {to(F), stay, to(Y), fix(resume), to(F)},
		TG: {to(T), fix(rel), fix(rel), fix(rel), fix(rel)},
		T:  {stay, stay, stay, stay, stay},
		F:  {stay, stay, stay, stay, stay},
	}
	if len(want) != len(sandbox.States) || len(sandbox.ObservedStates) != 5 {
		t.Fatalf("test covers %d states and 5 observations, the domain has %d and %d", len(want), len(sandbox.States), len(sandbox.ObservedStates))
	}
	for _, s := range sandbox.States {
		for i, seen := range sandbox.ObservedStates {
			r := sandbox.React(s, seen)
			got := cell{to: recorded(t, s, seen, r.Record), repair: r.Repair}
			if w := want[s][i]; got != w {
				t.Errorf("%s observed %s: recorded to %q, repair %q; want %q, %q", s, seen, got.to, got.repair, w.to, w.repair)
			}
		}
	}
}

// recorded walks the steps from s along the transition table and returns where they end, "" when there
// are none. Every step must move the sandbox: the table never records a step that does not apply, nor
// one whose target already holds.
func recorded(t *testing.T, s sandbox.State, seen sandbox.ObservedState, steps []sandbox.Step) sandbox.State {
	t.Helper()
	if len(steps) == 0 {
		return ""
	}
	at := s
	for _, st := range steps {
		tr, err := sandbox.Next(at, st.Action)
		if err != nil || tr.Outcome != sandbox.Move {
			t.Errorf("%s observed %s: step %s from %s is %+v, %v; want a move", s, seen, st.Action, at, tr, err)
			return ""
		}
		at = tr.To
	}
	return at
}

// TestReactionTableIsTotal: every record state has a row and every row a cell for every observed state,
// so that no pair calls for nothing without the table saying so.
func TestReactionTableIsTotal(t *testing.T) {
	if len(sandbox.ReactionTable) != len(sandbox.States) {
		t.Errorf("the table has %d rows, there are %d states", len(sandbox.ReactionTable), len(sandbox.States))
	}
	for _, s := range sandbox.States {
		row, ok := sandbox.ReactionTable[s]
		if !ok {
			t.Errorf("no row for %s", s)
			continue
		}
		if len(row) != len(sandbox.ObservedStates) {
			t.Errorf("row %s has %d cells, there are %d observed states", s, len(row), len(sandbox.ObservedStates))
		}
		for _, seen := range sandbox.ObservedStates {
			if _, ok := row[seen]; !ok {
				t.Errorf("row %s has no cell for %s", s, seen)
			}
		}
	}
}

// TestReactionsTakeOnlyRuntimeActions: an observation records provider progress, never a client's decision
// (pause, resume, terminate, recreate), and every step says why in its event.
func TestReactionsTakeOnlyRuntimeActions(t *testing.T) {
	client := []sandbox.Action{sandbox.ActionPause, sandbox.ActionResume, sandbox.ActionTerminate, sandbox.ActionRecreate}
	for _, s := range sandbox.States {
		for _, seen := range sandbox.ObservedStates {
			for _, st := range sandbox.React(s, seen).Record {
				if slices.Contains(client, st.Action) {
					t.Errorf("%s observed %s records the client action %s", s, seen, st.Action)
				}
				if st.Reason == "" && st.Action != sandbox.ActionFail {
					t.Errorf("%s observed %s records %s without a reason", s, seen, st.Action)
				}
			}
		}
	}
}

// TestTerminalStatesStayTerminal: no observation moves a terminated or failed sandbox, nor has reconcile
// repair it; only a client's terminate or recreate does.
func TestTerminalStatesStayTerminal(t *testing.T) {
	for _, s := range []sandbox.State{sandbox.StateTerminated, sandbox.StateFailed} {
		for _, seen := range sandbox.ObservedStates {
			if r := sandbox.React(s, seen); len(r.Record) != 0 || r.Repair != sandbox.RepairNone {
				t.Errorf("%s observed %s: %+v", s, seen, r)
			}
		}
	}
}

// TestRepairsFinishTheirOwnTransition: reconcile repairs only a transitional state, with the operation whose
// completion leaves it (the transition table says the completion moves the sandbox on).
func TestRepairsFinishTheirOwnTransition(t *testing.T) {
	completion := map[sandbox.Repair]sandbox.Action{
		sandbox.RepairAllocate: sandbox.ActionAllocated,
		sandbox.RepairRelease:  sandbox.ActionTerminated,
		sandbox.RepairPause:    sandbox.ActionPaused,
		sandbox.RepairResume:   sandbox.ActionResumed,
	}
	for _, s := range sandbox.States {
		for _, seen := range sandbox.ObservedStates {
			r := sandbox.React(s, seen).Repair
			if r == sandbox.RepairNone {
				continue
			}
			a, ok := completion[r]
			if !ok {
				t.Errorf("%s observed %s: unknown repair %q", s, seen, r)
				continue
			}
			if !s.Transitional() {
				t.Errorf("%s observed %s: repair %s of a state that is not transitional", s, seen, r)
			}
			if tr, err := sandbox.Next(s, a); err != nil || tr.Outcome != sandbox.Move {
				t.Errorf("%s observed %s: repair %s ends with %s, which does not move it: %+v %v", s, seen, r, a, tr, err)
			}
		}
	}
}

func TestObservationFailure(t *testing.T) {
	ref := sandbox.Ref{ID: "sbx_a", Generation: 2}
	lost := sandbox.Observation{Ref: ref, State: sandbox.ObservedAbsent}.Failure()
	if lost.Code != sandbox.ReasonResourceLost || lost.Message != "the provider holds no resource for sbx_a-g2" {
		t.Errorf("absent: %+v", lost)
	}
	broken := sandbox.Observation{Ref: ref, State: sandbox.ObservedFailed, Reason: "exited", Message: "agent exited"}.Failure()
	if broken != (sandbox.Failure{Code: "exited", Message: "agent exited"}) {
		t.Errorf("failed: %+v", broken)
	}
}
