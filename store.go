package sandbox

import "context"

// Intent is a recorded create intent: the clientRequestId that made a generation, with its spec in
// canonical JSON.
type Intent struct {
	Key        string
	SandboxID  ID
	Generation Generation
	Spec       []byte // canonical JSON
}

// Change is what a store update writes besides the sandbox itself, in the same transaction.
type Change struct {
	Events []Event // appended to the log; the store assigns their cursors
	Intent *Intent // a new create intent, for a recreate
}

// UpdateFunc changes sb in place inside a store transaction and says what else to write. Returning an
// error aborts the transaction and nothing is written.
type UpdateFunc func(sb *Sandbox) (Change, error)

// Store keeps sandboxes, create intents and the event log durably. Every method is safe for concurrent use.
type Store interface {
	// Create records sb with its create intent and events in one transaction. When the intent's key is
	// already recorded, nothing is written: if the recorded intent has the same canonical spec and is the
	// sandbox's current generation, Create returns that sandbox as it is now and created=false; otherwise
	// it returns ErrIdempotencyConflict.
	Create(ctx context.Context, sb *Sandbox, intent Intent, events []Event) (got *Sandbox, created bool, err error)
	// Get returns one sandbox, or ErrNotFound.
	Get(ctx context.Context, id ID) (*Sandbox, error)
	// List returns every sandbox, oldest first.
	List(ctx context.Context) ([]*Sandbox, error)
	// Update reads the sandbox, applies fn and writes the result, its events and intent atomically: no
	// other update of the same sandbox interleaves. It returns the sandbox as written and the events with
	// their cursors; ErrNotFound for an unknown id; ErrIdempotencyConflict when the intent's key is taken;
	// and fn's error as it is. A result that changes nothing (the same sandbox, no event, no intent)
	// need not be written.
	Update(ctx context.Context, id ID, fn UpdateFunc) (*Sandbox, []Event, error)
	// AppendEvents appends events that change no sandbox (commands, file writes) and returns them with
	// their cursors.
	AppendEvents(ctx context.Context, events []Event) ([]Event, error)
	// Events returns events after q.After, oldest first. It returns ErrEventHistoryUnavailable when
	// q.After is older than the retained history (q.After < oldest retained cursor - 1).
	Events(ctx context.Context, q EventQuery) ([]Event, error)
	// LastCursor is the cursor of the newest event ever appended (0 if none).
	LastCursor(ctx context.Context) (int64, error)
	// LastEventOf is the cursor of the newest event of sandbox id (0 if none): of any appended since
	// the store was opened, pruned or not, else of the newest one it retains. A reader filtered to id
	// that is past it has missed nothing of id up to LastCursor, however much history went meanwhile.
	LastEventOf(ctx context.Context, id ID) (int64, error)
	// Close releases the store.
	Close() error
}
