package sandbox

import (
	"context"
	"fmt"
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
