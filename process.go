package sandbox

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// ProcessSpec is a process to start in the background in a sandbox: it runs until it exits or is
// signalled, and its combined stdout and stderr are kept in the sandbox, addressed by byte offset.
type ProcessSpec struct {
	Argv       []string          `json:"argv"`
	Cwd        string            `json:"cwd,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Stdin      []byte            `json:"stdin,omitempty"`      // written to its stdin first
	CloseStdin bool              `json:"closeStdin,omitempty"` // then its stdin is closed
	Tag        string            `json:"tag,omitempty"`        // the client's name for it
	PTY        *TerminalSize     `json:"pty,omitempty"`        // run it on a pseudo-terminal of that size
}

// Process is what a sandbox knows of one background process. Its output is kept from OutputOldest to
// OutputEnd (byte offsets from its first byte); OutputError says why nothing past OutputEnd was kept.
type Process struct {
	PID          int        `json:"pid"`
	Tag          string     `json:"tag,omitempty"`
	Argv         []string   `json:"argv"`
	Cwd          string     `json:"cwd"`
	Running      bool       `json:"running"`
	ExitCode     *int       `json:"exitCode"`
	StartedAt    time.Time  `json:"startedAt"`
	FinishedAt   *time.Time `json:"finishedAt,omitempty"`
	OutputOldest int64      `json:"outputOldest"`
	OutputEnd    int64      `json:"outputEnd"`
	OutputError  string     `json:"outputError,omitempty"`
	PTY          bool       `json:"pty,omitempty"` // it runs on a pseudo-terminal
}

// OutputChunk is a part of a process's output: Data from offset Start. End is the end of the output
// when it was read, Oldest the oldest offset kept (Start > the offset asked for when older bytes were
// dropped), Done that nothing follows End.
type OutputChunk struct {
	Start  int64
	Data   []byte
	End    int64
	Oldest int64
	Done   bool
}

// ProcessManager is the optional interface of a provider whose sandboxes run background processes.
// Errors: ErrNotFound (the sandbox or the process), ErrInvalidRequest, ErrInvalidState (a process that
// exited, a stdin that is closed, a paused sandbox), ErrProviderUnavailable, ErrProviderProtocol.
type ProcessManager interface {
	StartProcess(ctx context.Context, ref Ref, spec ProcessSpec) (Process, error)
	ListProcesses(ctx context.Context, ref Ref) ([]Process, error)
	// GetProcess waits up to wait for the process to end before it answers.
	GetProcess(ctx context.Context, ref Ref, pid int, wait time.Duration) (Process, error)
	// ReadOutput returns up to max bytes from offset after, waiting up to wait for one when there is
	// none yet.
	ReadOutput(ctx context.Context, ref Ref, pid int, after int64, max int, wait time.Duration) (OutputChunk, error)
	WriteStdin(ctx context.Context, ref Ref, pid int, data []byte, closeStdin bool) error
	SignalProcess(ctx context.Context, ref Ref, pid int, signal string) error
}

// Bounds of a ProcessSpec and of the calls on a process.
const (
	MaxProcessTagBytes   = 256
	MaxProcessStdinBytes = 1 << 20
	// MaxProcessWait bounds a wait for a process to end in one call.
	MaxProcessWait = MaxCommandTimeout
)

// ProcessSignals are the signals a process may be sent, by name.
var ProcessSignals = []string{"HUP", "INT", "QUIT", "KILL", "USR1", "USR2", "TERM", "CONT", "STOP", "WINCH"}

// Validate refuses a spec no process can be started from (ErrInvalidRequest).
func (s ProcessSpec) Validate() error {
	if len(s.Tag) > MaxProcessTagBytes {
		return fmt.Errorf("process tag of %d bytes past %d: %w", len(s.Tag), MaxProcessTagBytes, ErrInvalidRequest)
	}
	if len(s.Stdin) > MaxProcessStdinBytes {
		return fmt.Errorf("process stdin of %d bytes past %d: %w", len(s.Stdin), MaxProcessStdinBytes, ErrInvalidRequest)
	}
	if strings.IndexByte(s.Cwd, 0) >= 0 {
		return fmt.Errorf("process cwd with a NUL byte: %w", ErrInvalidRequest)
	}
	if s.PTY != nil {
		if err := s.PTY.Validate(); err != nil {
			return err
		}
	}
	_, err := Command{Argv: s.Argv, Cwd: s.Cwd, Env: s.Env}.Normalize()
	return err
}
