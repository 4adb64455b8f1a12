package protocol

// PathSuspend (POST SuspendRequest) asks an agent that listens on a socket it bound itself (gVisor's)
// to let go of its socket before its sandbox is checkpointed: gVisor cannot save a sandbox holding a
// socket bound on the host. The agent answers, then closes its listener and every connection (commands
// in flight are cancelled; background processes and their journals go on), and binds again, at
// SuspendRequest.Socket in the same directory, once it gets SIGUSR2: after the restore, or after a
// checkpoint that leaves the sandbox running. An agent on an inherited socket answers 400.
const PathSuspend = "/v1/suspend"

// SuspendRequest names the socket the agent binds when woken: a file name of at most MaxSocketName
// bytes, beginning "agent-", in the directory of its first socket.
type SuspendRequest struct {
	Socket string `json:"socket"`
}

// MaxSocketName bounds SuspendRequest.Socket.
const MaxSocketName = 64
