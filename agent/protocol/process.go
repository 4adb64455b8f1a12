package protocol

import (
	"time"

	"github.com/sandboxd/sandbox"
)

// The agent's routes of background processes (protocol 2). A process started through PathProcesses
// runs until it exits or is signalled, detached from the request that started it; its stdout and
// stderr go, combined, to a journal the agent keeps on the sandbox's disk: the last JournalBytes of
// them, addressed by the byte offset from the process's first byte of output. The agent keeps the
// table and the journals, so a client that goes away, the daemon included, loses nothing it comes back
// for within the journal.
const (
	PathProcesses     = "/v1/processes"      // POST starts one (ProcessStart), GET lists them
	PathProcess       = "/v1/process"        // GET one: ?pid=&waitMs= (waits for its end that long)
	PathProcessOutput = "/v1/process/output" // GET ?pid=&after=&max=&waitMs=: an OutputHead line, then bytes
	PathProcessStdin  = "/v1/process/stdin"  // POST ?pid=&close=1: the body goes to its stdin
	PathProcessSignal = "/v1/process/signal" // POST ProcessSignal
)

// OutputMediaType is the type of an answer to PathProcessOutput: one line of JSON (OutputHead), then
// Length bytes of output.
const OutputMediaType = "application/vnd.sandboxd.output"

// Bounds of the process calls, which the agent refuses past and the client holds the agent's answers to.
const (
	// JournalBytes is how much of a process's output the agent keeps; older bytes are dropped, and
	// a read from before the oldest kept byte starts at it (OutputHead.Start says where).
	JournalBytes = 64 << 20
	// MaxProcesses bounds the table; when it is full, the oldest exited process is forgotten, its
	// journal removed, and a start with every process still running is refused.
	MaxProcesses = 256
	// MaxOutputChunk bounds the bytes of one answer to PathProcessOutput.
	MaxOutputChunk = 1 << 20
	// MaxOutputHeadBytes bounds its head line.
	MaxOutputHeadBytes = 512
	// MaxWait bounds waitMs of PathProcess and PathProcessOutput.
	MaxWait = 30 * time.Second
	// MaxStdinBytes bounds one write to a process's stdin, and ProcessStart.Stdin.
	MaxStdinBytes = sandbox.MaxProcessStdinBytes
	// MaxTagBytes bounds ProcessStart.Tag.
	MaxTagBytes = sandbox.MaxProcessTagBytes
	// MaxProcessInfoBytes bounds the JSON of one ProcessInfo in an answer; a listing is at most
	// MaxProcesses of them.
	MaxProcessInfoBytes = 2 * MaxExecRequestBytes
)

// ProcessStart asks the agent to start a process in the background: the domain's spec as it is.
type ProcessStart = sandbox.ProcessSpec

// ProcessInfo is what the agent knows of one process: the domain's Process as it is.
type ProcessInfo = sandbox.Process

// OutputHead heads an answer to PathProcessOutput: Length bytes follow, from offset Start (later than
// the asked one when older bytes were dropped) to Start+Length; End is the end of the journal when
// the answer was made, Done that no byte will follow End (the process exited and its output closed).
type OutputHead struct {
	Start  int64 `json:"start"`
	Length int   `json:"length"`
	End    int64 `json:"end"`
	Oldest int64 `json:"oldest"`
	Done   bool  `json:"done"`
}

// ProcessSignal asks the agent to send Signal to the process group of PID.
type ProcessSignal struct {
	PID    int    `json:"pid"`
	Signal string `json:"signal"`
}

// Signals are the signals a ProcessSignal may name.
var Signals = sandbox.ProcessSignals
