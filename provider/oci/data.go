package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
)

// execSlack is how much longer than a command's timeout the provider waits for its result: the agent
// needs time to kill the group and answer.
const execSlack = 5 * time.Second

// gvisorExecSlack is execSlack on gVisor, whose kernel takes seconds more to end a large process group:
// a command that timed out with a fork bomb's thousands of processes in it was answered after more
// than 5 s about once in eight runs on a loaded machine.
const gvisorExecSlack = 30 * time.Second

// cancelWait bounds how long a cancelled Exec waits for the agent's cancelled result.
const cancelWait = 3 * time.Second

// usable returns the box of ref when it can take data calls. Errors: ErrNotFound when the provider
// holds nothing for ref, ErrInvalidState when it is paused.
func (p *Provider) usable(ctx context.Context, ref sandbox.Ref) (*box, error) {
	b := p.box(ref)
	if !b.known.Load() {
		b.mu.Lock()
		if !b.known.Load() {
			st, err := p.runc.state(ctx, b.container())
			switch {
			case errors.Is(err, errNoContainer):
				b.mu.Unlock()
				if _, serr := os.Stat(b.l.dir); os.IsNotExist(serr) {
					p.forget(b)
				}
				return nil, fmt.Errorf("sandbox %s: %w", ref, sandbox.ErrNotFound)
			case err != nil:
				b.mu.Unlock()
				return nil, fmt.Errorf("sandbox %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
			}
			b.saw(st.Status)
		}
		b.mu.Unlock()
	}
	if b.paused.Load() {
		return nil, fmt.Errorf("sandbox %s is paused: %w", ref, sandbox.ErrInvalidState)
	}
	return b, nil
}

// agents finds the agents of the provider's sandboxes for its DataPlane.
type agents struct{ p *Provider }

// Agent is the agent client of a sandbox that can take data calls (see usable).
func (a agents) Agent(ctx context.Context, ref sandbox.Ref) (*agentclient.Client, error) {
	b, err := a.p.usable(ctx, ref)
	if err != nil {
		return nil, err
	}
	return b.client, nil
}
