package main

import (
	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

func (a *app) pauseCmd() *cobra.Command {
	return a.actionCmd("pause", "Pause a ready sandbox (freeze its processes)", "",
		`  sbx pause sbx_abc
  sbx pause sbx_abc --generation 2 --wait`,
		func(id sandbox.ID, gen sandbox.Generation) (*sandbox.Sandbox, error) {
			return a.c.Pause(a.ctx, id, gen)
		})
}
