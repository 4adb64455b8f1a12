package main

import (
	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
)

func (a *app) recreateCmd() *cobra.Command {
	var sf specFlags
	var cmd *cobra.Command
	cmd = a.actionCmd("recreate", "Start a new generation of a terminated sandbox",
		`Start generation N+1 of a terminated sandbox. Without create flags, the new generation
gets the spec of the current one with a fresh request id; with any of them, the spec
is built from the flags alone.`,
		`  sbx recreate sbx_abc --wait
  sbx recreate sbx_abc --generation 1 --memory 512`,
		func(id sandbox.ID, gen sandbox.Generation) (*sandbox.Sandbox, error) {
			spec, err := sf.spec()
			if err != nil {
				return nil, err
			}
			if !specFlagsChanged(cmd) {
				sb, err := a.c.Get(a.ctx, id)
				if err != nil {
					return nil, err
				}
				spec = sb.Spec
				spec.ClientRequestID = client.NewRequestID()
			}
			return a.c.Recreate(a.ctx, id, gen, spec)
		})
	sf.bind(cmd.Flags())
	return cmd
}

// specFlagsChanged reports whether any flag describing the spec was given (the request id alone is not
// a spec).
func specFlagsChanged(cmd *cobra.Command) bool {
	for _, name := range []string{"image", "template", "cpu", "memory", "disk", "require", "extension", "from-checkpoint"} {
		if cmd.Flags().Changed(name) {
			return true
		}
	}
	return false
}
