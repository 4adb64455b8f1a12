package sandbox

import (
	"fmt"
	"sync"
)

// Step is one move the runtime records on an observation: a runtime action of the transition table and
// the reason its state_changed event gives. A step to failed takes its reason from the failure the
// observation reports (Observation.Failure).
type Step struct {
	Action Action
	Reason string
}

// Repair is a provider operation that reconcile carries out to finish a transition that was cut short.
// The operation records its own outcome, as when a client's call started it: an allocation records the
// provider's answer, a release moves to terminated, a pause to paused, a resume to ready.
type Repair string

// The repairs. RepairNone: reconcile records the observation.
const (
	RepairNone     Repair = ""
	RepairAllocate Repair = "allocate"
	RepairRelease  Repair = "release"
	RepairPause    Repair = "pause"
	RepairResume   Repair = "resume"
)

// Reaction is what the runtime does with an observation of a sandbox's current generation, by the state
// its record holds and the state observed.
type Reaction struct {
	// Record is what the observation records, whenever it arrives: moves of the transition table, in
	// order. It calls the provider for nothing, so it also holds while an operation is in flight and
	// the observation is that operation's answer (an allocation's, a readiness wait's).
	Record []Step
	// Repair is what reconcile does instead of recording, when nothing is in flight.
	Repair Repair
}

// ReasonResourceLost is the failure of a sandbox whose provider no longer holds its resource.
const ReasonResourceLost = "resource_lost"

// Failure is what the observation reports of a sandbox that fails on it: the provider's own reason and
// message, or resource_lost when it holds no resource.
func (o Observation) Failure() Failure {
	if o.State == ObservedAbsent {
		return Failure{Code: ReasonResourceLost, Message: fmt.Sprintf("the provider holds no resource for %s", o.Ref)}
	}
	return Failure{Code: o.Reason, Message: o.Message}
}

var (
	allocated = Step{ActionAllocated, "allocated"}
	ready     = Step{ActionReady, "ready"}
	paused    = Step{ActionPaused, "paused"}
	resumed   = Step{ActionResumed, "resumed"}
	released  = Step{ActionTerminated, "released"}
	fail      = Step{Action: ActionFail} // reason: the observation's failure
)

func record(steps ...Step) Reaction { return Reaction{Record: steps} }

func repair(r Repair, steps ...Step) Reaction { return Reaction{Record: steps, Repair: r} }

// nothing: the observation changes nothing. Where the record and the provider disagree (a ready record,
// a paused or starting sandbox), the record stands until a client acts or the provider reports a failure.
var nothing = Reaction{}

// reactions is the runtime's whole reaction to observations, as one table: every record state against
// every observed state. The transition table says which moves exist; this one says which the runtime
// makes of its own accord. It is made on first use: the domain allocates next to nothing when the
// daemon's binary starts as a sandbox's agent.
var reactions = sync.OnceValue(func() map[State]map[ObservedState]Reaction {
	return map[State]map[ObservedState]Reaction{
		StateRequested: {
			// Never allocated, or the allocation's answer was lost: allocation is idempotent, so do it
			// (again). One cut short half-way can leave part of a resource, which the provider reports
			// failed: a resource that truly failed is reported failed by the allocation once more.
			ObservedAbsent:   repair(RepairAllocate),
			ObservedStarting: record(allocated),
			ObservedReady:    record(allocated, ready),
			ObservedPaused:   nothing,
			ObservedFailed:   repair(RepairAllocate, fail),
		},
		StateStarting: {
			ObservedAbsent:   record(fail),
			ObservedStarting: nothing,
			ObservedReady:    record(ready),
			ObservedPaused:   nothing,
			ObservedFailed:   record(fail),
		},
		StateReady: {
			ObservedAbsent:   record(fail),
			ObservedStarting: nothing,
			ObservedReady:    nothing,
			ObservedPaused:   nothing,
			ObservedFailed:   record(fail),
		},
		StatePausing: {
			ObservedAbsent:   record(fail),
			ObservedStarting: nothing,
			ObservedReady:    repair(RepairPause), // the pause never reached the provider
			ObservedPaused:   record(paused),
			ObservedFailed:   record(fail),
		},
		StatePaused: {
			ObservedAbsent:   record(fail),
			ObservedStarting: nothing,
			ObservedReady:    nothing,
			ObservedPaused:   nothing,
			ObservedFailed:   record(fail),
		},
		StateResuming: {
			ObservedAbsent:   record(fail),
			ObservedStarting: nothing,
			ObservedReady:    record(resumed),
			ObservedPaused:   repair(RepairResume), // the resume never reached the provider
			ObservedFailed:   record(fail),
		},
		StateTerminating: {
			// Whatever the provider still holds is released; what it no longer holds is released already.
			ObservedAbsent:   record(released),
			ObservedStarting: repair(RepairRelease),
			ObservedReady:    repair(RepairRelease),
			ObservedPaused:   repair(RepairRelease),
			ObservedFailed:   repair(RepairRelease),
		},
		// Terminal for the runtime: only a client's terminate or recreate moves these.
		StateTerminated: {
			ObservedAbsent: nothing, ObservedStarting: nothing, ObservedReady: nothing, ObservedPaused: nothing, ObservedFailed: nothing,
		},
		StateFailed: {
			ObservedAbsent: nothing, ObservedStarting: nothing, ObservedReady: nothing, ObservedPaused: nothing, ObservedFailed: nothing,
		},
	}
})

// React looks up the reaction table: what the runtime does with an observation seen of a sandbox whose
// record is in state s.
func React(s State, seen ObservedState) Reaction {
	return reactions()[s][seen]
}
