package protocol

// The agent's route of background processes on a pseudo-terminal (ProcessStart.PTY): a resize sets
// the terminal's size, which the kernel says to its foreground group with SIGWINCH. An agent without
// the route answers 404 with no error body, which its client takes as a protocol error.
const (
	PathProcessResize = "/v1/process/resize" // POST ProcessResize
)

// ProcessResize asks the agent to set the size of the terminal of PID.
type ProcessResize struct {
	PID  int `json:"pid"`
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}
