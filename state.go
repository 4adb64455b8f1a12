package sandbox

import "fmt"

// State is the lifecycle state of a sandbox generation.
type State string

// The portable states.
const (
	StateRequested   State = "requested"
	StateStarting    State = "starting"
	StateReady       State = "ready"
	StatePausing     State = "pausing"
	StatePaused      State = "paused"
	StateResuming    State = "resuming"
	StateTerminating State = "terminating"
	StateTerminated  State = "terminated"
	StateFailed      State = "failed"
)

// States lists every state, in lifecycle order.
var States = []State{
	StateRequested, StateStarting, StateReady, StatePausing, StatePaused,
	StateResuming, StateTerminating, StateTerminated, StateFailed,
}

// Valid reports whether s is one of the portable states.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Transitional reports whether s is a state the runtime is expected to leave by itself.
func (s State) Transitional() bool {
	switch s {
	case StateRequested, StateStarting, StatePausing, StateResuming, StateTerminating:
		return true
	}
	return false
}

// Action is something that moves a sandbox between states: a client's request or a provider's observation.
type Action string

// Client actions.
const (
	ActionPause     Action = "pause"
	ActionResume    Action = "resume"
	ActionTerminate Action = "terminate"
	ActionRecreate  Action = "recreate"
)

// Runtime actions, taken when the provider reports progress.
const (
	ActionAllocated  Action = "allocated"  // the provider holds a resource, or prepares one (Preparer): requested -> starting
	ActionReady      Action = "ready"      // the agent answers: starting -> ready
	ActionPaused     Action = "paused"     // pausing -> paused
	ActionResumed    Action = "resumed"    // resuming -> ready
	ActionTerminated Action = "terminated" // terminating -> terminated
	ActionFail       Action = "fail"       // provider failure -> failed
)

// Outcome is what the transition table says of an (action, state) pair.
type Outcome int

const (
	// Invalid means the action does not apply to the state: ErrInvalidState.
	Invalid Outcome = iota
	// Move means the action moves the sandbox to Transition.To.
	Move
	// Already means the action's target already holds or is under way: nothing changes, the caller
	// answers with the resource as it is, so a client that lost a response can retry.
	Already
)

// Transition is one cell of the state machine.
type Transition struct {
	Outcome Outcome
	To      State
}

func mv(to State) Transition { return Transition{Outcome: Move, To: to} }

var already = Transition{Outcome: Already}

// transitions is the whole state machine, as one table. Missing cells are Invalid.
var transitions = map[Action]map[State]Transition{
	ActionPause: {
		StateReady:   mv(StatePausing),
		StatePausing: already,
		StatePaused:  already,
	},
	ActionResume: {
		StatePaused:   mv(StateResuming),
		StateResuming: already,
		StateReady:    already,
	},
	ActionTerminate: {
		StateRequested:   mv(StateTerminating),
		StateStarting:    mv(StateTerminating),
		StateReady:       mv(StateTerminating),
		StatePausing:     mv(StateTerminating),
		StatePaused:      mv(StateTerminating),
		StateResuming:    mv(StateTerminating),
		StateFailed:      mv(StateTerminating),
		StateTerminating: already,
		StateTerminated:  already,
	},
	ActionRecreate: {
		StateTerminated: mv(StateRequested), // with generation + 1
	},
	ActionAllocated: {
		StateRequested: mv(StateStarting),
		StateStarting:  already,
	},
	ActionReady: {
		StateStarting: mv(StateReady),
		StateReady:    already,
	},
	ActionPaused: {
		StatePausing: mv(StatePaused),
		StatePaused:  already,
	},
	ActionResumed: {
		StateResuming: mv(StateReady),
		StateReady:    already,
	},
	ActionTerminated: {
		StateTerminating: mv(StateTerminated),
		StateTerminated:  already,
	},
	ActionFail: {
		StateRequested: mv(StateFailed),
		StateStarting:  mv(StateFailed),
		StateReady:     mv(StateFailed),
		StatePausing:   mv(StateFailed),
		StatePaused:    mv(StateFailed),
		StateResuming:  mv(StateFailed),
		StateFailed:    already,
	},
}

// Actions lists every action of the table, clients' first.
var Actions = []Action{
	ActionPause, ActionResume, ActionTerminate, ActionRecreate,
	ActionAllocated, ActionReady, ActionPaused, ActionResumed, ActionTerminated, ActionFail,
}

// Next looks up the transition table. It returns ErrInvalidState, wrapped with the pair, when the action
// does not apply to the state.
func Next(from State, a Action) (Transition, error) {
	t, ok := transitions[a][from]
	if !ok || t.Outcome == Invalid {
		return Transition{}, fmt.Errorf("cannot %s a sandbox that is %s: %w", a, from, ErrInvalidState)
	}
	return t, nil
}
