package sandbox

import (
	"context"
	"fmt"
	"time"
)

// TerminalSize is the size of a pseudo-terminal, in character cells.
type TerminalSize struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// MaxTerminalCells bounds each of a terminal's rows and columns: the kernel keeps them in 16 bits.
const MaxTerminalCells = 1<<16 - 1

// Validate refuses a size no terminal can have (ErrInvalidRequest).
func (ts TerminalSize) Validate() error {
	if ts.Rows < 1 || ts.Rows > MaxTerminalCells || ts.Cols < 1 || ts.Cols > MaxTerminalCells {
		return fmt.Errorf("terminal of %d rows and %d columns, each must be 1..%d: %w", ts.Rows, ts.Cols, MaxTerminalCells, ErrInvalidRequest)
	}
	return nil
}

// TerminalManager is the optional interface of a ProcessManager whose processes may run on a
// pseudo-terminal (ProcessSpec.PTY). Errors: as ProcessManager's, and ErrInvalidState for a process
// that has no terminal or has exited.
type TerminalManager interface {
	ResizeProcess(ctx context.Context, ref Ref, pid int, size TerminalSize) error
}

// TerminalStreamer is the optional interface of a TerminalManager whose pty processes attach as one
// stream: keys, resizes and signals in, output out from an offset of the process's output, with no
// call per key and no poll. The output is still kept as ReadOutput reads it; the stream only tails it.
// Errors of AttachTerminal: as ProcessManager's, and ErrUnsupportedCapability when this sandbox, or
// this process (one without a terminal), has no stream: the caller goes on with the calls of
// ProcessManager.
type TerminalStreamer interface {
	// AttachTerminal opens the stream of process pid from offset after; the sandbox says it is there
	// at least every beat. ctx bounds the opening only.
	AttachTerminal(ctx context.Context, ref Ref, pid int, after int64, beat time.Duration) (TerminalStream, error)
}

// TerminalStream is one attach to a pty process. Recv is for one goroutine; the writes are for
// another, in the order they are to reach the process. Close ends both, and Recv returns at once.
type TerminalStream interface {
	// Recv returns what comes next: output, a refusal, or the end, after which it returns io.EOF. An
	// error is the stream's failure (ErrProviderUnavailable: the sandbox went silent for longer than
	// a beat and its slack, or its connection broke; ErrProviderProtocol).
	Recv() (TerminalEvent, error)
	Stdin(ctx context.Context, data []byte) error
	Resize(ctx context.Context, size TerminalSize) error
	Signal(ctx context.Context, signal string) error
	Close() error
}

// TerminalEvent is one thing a terminal stream says: output (Data from Start, a Start past the offset
// before it when older bytes were dropped), a frame the sandbox refused (Refused says why; the stream
// goes on), or its end.
type TerminalEvent struct {
	Output  OutputChunk
	Refused string
	End     *TerminalEnd
}

// TerminalEnd is why a terminal stream ended, and where its output stood: Reason is "exited" (ExitCode
// is the process's), or another that says the stream, not the process, ended (the agent stopping or
// suspending, a protocol or journal error).
type TerminalEnd struct {
	Reason   string
	ExitCode *int
	Offset   int64
	Message  string
}
