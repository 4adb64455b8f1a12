package sandbox

import (
	"context"
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
