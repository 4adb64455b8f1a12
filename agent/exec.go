package agent

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/proc"
)

// drainGrace is how long the agent keeps reading a command's output after its process group is gone;
// only a process that left the group (setsid) and kept the pipes can make it matter.
const drainGrace = 2 * time.Second

// killWait bounds how long the agent keeps killing a command's group until it is empty and reaped.
const killWait = 10 * time.Second

// childOOMScoreAdj makes a command, not the agent, the memory cgroup's choice when it runs out.
const childOOMScoreAdj = 500

// newRunner returns the runner of the agent's commands. Its waiter must be the agent's reaper: as PID 1
// (or a subreaper) the agent adopts every orphan, and only the reaper may wait for children.
func newRunner(reaper *proc.Reaper, cred *syscall.Credential) *proc.Runner {
	return &proc.Runner{
		Credential:  cred,
		Env:         commandEnv(os.Environ()),
		Waiter:      reaper,
		PipeGrace:   drainGrace,
		KillWait:    killWait,
		OOMScoreAdj: childOOMScoreAdj,
	}
}

// runtimeEnv are the variables that tune the agent's own Go runtime: the environment its commands
// start from is the agent's without them, so that a program in the sandbox is not tuned for the agent.
// A command gets them through its own env.
var runtimeEnv = []string{"GOMAXPROCS="}

// commandEnv is env without runtimeEnv.
func commandEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return slices.ContainsFunc(runtimeEnv, func(prefix string) bool { return strings.HasPrefix(kv, prefix) })
	})
}

// run executes req and always returns a result: a command that cannot start exits 127 with the reason
// on stderr. It returns early, with the process group killed, when ctx ends (cancelled): the caller
// went away, or the run was cancelled by its id.
func (a *Agent) run(ctx context.Context, req protocol.ExecRequest) protocol.ExecOutput {
	started := time.Now()
	cwd := req.Cwd
	if cwd == "" {
		cwd = a.workdir
	}
	dir, err := a.root.ResolveDir(cwd)
	if err != nil {
		return cannotStart(req, started, fmt.Sprintf("cwd %q: %v", req.Cwd, err))
	}
	res, err := a.runner.Run(ctx, dir, req.Command())
	if err != nil {
		// A command proc refuses (a NUL byte in argv or env, say) cannot start either.
		return cannotStart(req, started, err.Error())
	}
	return protocol.ExecOutput{
		ExecStatus: protocol.ExecStatus{ExitCode: res.ExitCode, TimedOut: res.TimedOut, Cancelled: res.Cancelled,
			Truncated: res.Truncated, StartedAt: res.StartedAt, FinishedAt: res.FinishedAt},
		Stdout: res.Stdout,
		Stderr: res.Stderr,
	}
}

func cannotStart(req protocol.ExecRequest, started time.Time, reason string) protocol.ExecOutput {
	code := proc.ExitCannotStart
	msg := reason + "\n"
	return protocol.ExecOutput{Stderr: sandbox.TruncateUTF8(msg, req.MaxOutputBytes), ExecStatus: protocol.ExecStatus{ExitCode: &code,
		Truncated: len(msg) > req.MaxOutputBytes, StartedAt: started, FinishedAt: time.Now()}}
}

// parseUser parses the -user flag, "UID:GID" and an optional ":G1,G2,..." of supplementary groups;
// empty is nil, the agent's own user.
func parseUser(s string) (*syscall.Credential, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return nil, fmt.Errorf("%q is not UID:GID[:GROUPS]", s)
	}
	id := func(v string) (uint32, error) {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%q is no uid or gid", v)
		}
		return uint32(n), nil
	}
	var c syscall.Credential
	var err error
	if c.Uid, err = id(parts[0]); err != nil {
		return nil, err
	}
	if c.Gid, err = id(parts[1]); err != nil {
		return nil, err
	}
	c.Groups = []uint32{}
	if len(parts) == 3 && parts[2] != "" {
		for _, g := range strings.Split(parts[2], ",") {
			n, err := id(g)
			if err != nil {
				return nil, err
			}
			c.Groups = append(c.Groups, n)
		}
	}
	return &c, nil
}
