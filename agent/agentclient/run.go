package agentclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// Run runs cmd through the agent and returns its result, checked by Exec. The call may take slack
// longer than the command's own timeout. When ctx ends first, the command is cancelled by its run id and
// its cancelled result collected, waiting at most cancelWait before dropping the connection (the agent
// then kills the command as it does for any caller that goes away).
//
// Errors: ErrProviderUnavailable (agent unreachable, silent, or no answer after a cancel),
// ErrProviderProtocol (a malformed answer), ErrInvalidRequest (cmd out of its bounds, or as the agent
// says) and ErrInvalidState as the agent says.
func (c *Client) Run(ctx context.Context, cmd sandbox.Command, slack, cancelWait time.Duration) (sandbox.CommandResult, error) {
	// The core hands over normalised commands; other callers of a provider may leave the defaults out.
	cmd, err := cmd.Normalize()
	if err != nil {
		return sandbox.CommandResult{}, err
	}
	req := protocol.NewExecRequest(runID(), cmd)
	// The call outlives a cancelled caller just long enough to collect the cancelled result: when ctx
	// ends, the run is cancelled by its id, and the call dropped if no answer follows within cancelWait.
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmd.Timeout+slack)
	defer cancel()
	answered := make(chan struct{})
	var gaveUp atomic.Pointer[error] // the cancel's own error, once the call was dropped
	stop := context.AfterFunc(ctx, func() {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), cancelWait)
		cerr := c.Cancel(cctx, req.ID)
		ccancel()
		select {
		case <-answered:
		case <-time.After(cancelWait):
			gaveUp.Store(&cerr)
			cancel() // drops the connection: the agent kills the command when it sees that
		}
	})
	type answer struct {
		res protocol.ExecOutput
		err error
	}
	var a answer
	a.res, a.err = c.Exec(callCtx, req)
	close(answered)
	stop()
	if cerr := gaveUp.Load(); cerr != nil {
		return sandbox.CommandResult{}, fmt.Errorf("cancelled, no answer after cancel (%v): %w", *cerr, sandbox.ErrProviderUnavailable)
	}
	if a.err != nil {
		return sandbox.CommandResult{}, a.err
	}
	return a.res.Result(), nil
}

// runID names one command run, so that it can be cancelled.
func runID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
