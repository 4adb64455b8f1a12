package sandbox_test

import (
	"errors"
	"testing"

	"github.com/sandboxd/sandbox"
)

// The states, short, for the tables the tests write out.
const (
	R, S, Y, PG, P, RG, TG, T, F = sandbox.StateRequested, sandbox.StateStarting, sandbox.StateReady,
		sandbox.StatePausing, sandbox.StatePaused, sandbox.StateResuming, sandbox.StateTerminating,
		sandbox.StateTerminated, sandbox.StateFailed
)

// TestTransitionTable checks every (state, action) pair against the state machine of the contract, written
// out here independently of the table in state.go.
func TestTransitionTable(t *testing.T) {
	type cell struct {
		outcome sandbox.Outcome
		to      sandbox.State
	}
	inv := cell{outcome: sandbox.Invalid}
	alr := cell{outcome: sandbox.Already}
	to := func(s sandbox.State) cell { return cell{sandbox.Move, s} }
	// Columns in the order of sandbox.States: requested, starting, ready, pausing, paused, resuming,
	// terminating, terminated, failed.
	want := map[sandbox.Action][9]cell{
		sandbox.ActionPause:      {inv, inv, to(PG), alr, alr, inv, inv, inv, inv},
		sandbox.ActionResume:     {inv, inv, alr, inv, to(RG), alr, inv, inv, inv},
		sandbox.ActionTerminate:  {to(TG), to(TG), to(TG), to(TG), to(TG), to(TG), alr, alr, to(TG)},
		sandbox.ActionRecreate:   {inv, inv, inv, inv, inv, inv, inv, to(R), inv},
		sandbox.ActionAllocated:  {to(S), alr, inv, inv, inv, inv, inv, inv, inv},
		sandbox.ActionReady:      {inv, to(Y), alr, inv, inv, inv, inv, inv, inv},
		sandbox.ActionPaused:     {inv, inv, inv, to(P), alr, inv, inv, inv, inv},
		sandbox.ActionResumed:    {inv, inv, alr, inv, inv, to(Y), inv, inv, inv},
		sandbox.ActionTerminated: {inv, inv, inv, inv, inv, inv, to(T), alr, inv},
		sandbox.ActionFail:       {to(F), to(F), to(F), to(F), to(F), to(F), inv, inv, alr},
	}
	if len(want) != len(sandbox.Actions) {
		t.Fatalf("test covers %d actions, the domain has %d", len(want), len(sandbox.Actions))
	}
	for _, a := range sandbox.Actions {
		row, ok := want[a]
		if !ok {
			t.Fatalf("action %s not covered", a)
		}
		for i, from := range sandbox.States {
			got, err := sandbox.Next(from, a)
			w := row[i]
			if w.outcome == sandbox.Invalid {
				if !errors.Is(err, sandbox.ErrInvalidState) {
					t.Errorf("%s from %s: got %+v, %v; want ErrInvalidState", a, from, got, err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s from %s: unexpected error %v", a, from, err)
				continue
			}
			if got.Outcome != w.outcome || (w.outcome == sandbox.Move && got.To != w.to) {
				t.Errorf("%s from %s: got %+v, want %+v", a, from, got, w)
			}
		}
	}
}

func TestTerminalAndTransitional(t *testing.T) {
	for _, s := range sandbox.States {
		if !s.Valid() {
			t.Errorf("%s not valid", s)
		}
		_, err := sandbox.Next(s, sandbox.ActionTerminate)
		if err != nil {
			t.Errorf("terminate must apply to every state, not to %s: %v", s, err)
		}
	}
	if sandbox.State("running").Valid() {
		t.Error("unknown state reported valid")
	}
	for s, want := range map[sandbox.State]bool{
		sandbox.StateRequested: true, sandbox.StateStarting: true, sandbox.StatePausing: true,
		sandbox.StateResuming: true, sandbox.StateTerminating: true, sandbox.StateReady: false,
		sandbox.StatePaused: false, sandbox.StateTerminated: false, sandbox.StateFailed: false,
	} {
		if s.Transitional() != want {
			t.Errorf("%s transitional = %v, want %v", s, !want, want)
		}
	}
}
