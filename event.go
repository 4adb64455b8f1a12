package sandbox

import (
	"encoding/json"
	"time"
)

// EventType names what an event reports.
type EventType string

// The event types.
const (
	EventCreated          EventType = "sandbox.created"
	EventStateChanged     EventType = "sandbox.state_changed"
	EventCommandCompleted EventType = "sandbox.command_completed"
	EventFileWritten      EventType = "sandbox.file_written"
)

// Event is one entry of the durable event log. Cursor comes from one global, strictly increasing
// sequence that is never reused, also across restarts; the store assigns it.
type Event struct {
	Cursor     int64           `json:"cursor"`
	Type       EventType       `json:"type"`
	SandboxID  ID              `json:"sandboxId"`
	Generation Generation      `json:"generation"`
	Timestamp  time.Time       `json:"timestamp"`
	Data       json.RawMessage `json:"data"`
}

// CreatedData is the data of EventCreated.
type CreatedData struct {
	ClientRequestID string `json:"clientRequestId"`
	Spec            Spec   `json:"spec"`
}

// StateChangedData is the data of EventStateChanged.
type StateChangedData struct {
	From   State  `json:"from"`
	To     State  `json:"to"`
	Reason string `json:"reason,omitempty"`
}

// CommandCompletedData is the data of EventCommandCompleted. It holds no argv or env: they may hold secrets.
type CommandCompletedData struct {
	ExitCode   *int  `json:"exitCode"`
	TimedOut   bool  `json:"timedOut"`
	Cancelled  bool  `json:"cancelled"`
	Truncated  bool  `json:"truncated"`
	DurationMs int64 `json:"durationMs"`
}

// FileWrittenData is the data of EventFileWritten.
type FileWrittenData struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// NewEvent builds an event for ref with data marshalled to JSON. The store assigns the cursor.
func NewEvent(typ EventType, ref Ref, at time.Time, data any) Event {
	raw, err := json.Marshal(data)
	if err != nil {
		// The data types above always marshal; anything else is a programming error.
		panic("sandbox: event data does not marshal: " + err.Error())
	}
	return Event{Type: typ, SandboxID: ref.ID, Generation: ref.Generation, Timestamp: at.UTC(), Data: raw}
}

// EventQuery selects events from the log.
type EventQuery struct {
	After     int64 // cursors greater than this
	SandboxID ID    // only this sandbox, if set
	Limit     int   // at most this many; 0 means the store's page size
}

// MaxEventPage is the most events one page of the log holds.
const MaxEventPage = 1000
