package main

import (
	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

// actionCmd builds a lifecycle subcommand fenced by a generation: the current one unless --generation is
// given, so that scripts that pass it keep the fencing meaningful.
func (a *app) actionCmd(use, short, long, example string, do func(id sandbox.ID, gen sandbox.Generation) (*sandbox.Sandbox, error)) *cobra.Command {
	var gen int64
	var wait bool
	cmd := &cobra.Command{
		Use:               use + " ID",
		Short:             short,
		Long:              long,
		Example:           example,
		Args:              exactArgs(1, "a sandbox id"),
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			id := sandbox.ID(args[0])
			g, err := a.current(id, gen)
			if err != nil {
				return err
			}
			sb, err := do(id, g)
			if err != nil {
				return err
			}
			if wait && sb.State.Transitional() {
				s := a.spin("waiting for " + string(id) + " to settle")
				sb, err = a.settle(sb)
				s.Stop()
				if err != nil {
					return err
				}
			}
			return a.showAction(sb)
		},
	}
	cmd.Flags().Int64Var(&gen, "generation", 0, "the generation expected; a stale one fails with generation_conflict (default: the current one)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the sandbox leaves its transitional state")
	return cmd
}

// settle waits until sb is no longer in a transitional state.
func (a *app) settle(sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
	target := map[sandbox.State]sandbox.State{
		sandbox.StateRequested:   sandbox.StateReady,
		sandbox.StateStarting:    sandbox.StateReady,
		sandbox.StateResuming:    sandbox.StateReady,
		sandbox.StatePausing:     sandbox.StatePaused,
		sandbox.StateTerminating: sandbox.StateTerminated,
	}[sb.State]
	return a.c.WaitState(a.ctx, sb.ID, target)
}

// showAction prints "ID GENERATION STATE", or the sandbox as JSON.
func (a *app) showAction(sb *sandbox.Sandbox) error {
	if a.json() {
		return a.writeJSON(sb)
	}
	a.printf("%s generation %d %s\n", sb.ID, sb.Generation, a.state(sb.State))
	return nil
}
