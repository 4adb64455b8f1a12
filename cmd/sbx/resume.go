package main

import (
	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

func (a *app) resumeCmd() *cobra.Command {
	return a.actionCmd("resume", "Resume a paused sandbox", "",
		`  sbx resume sbx_abc
  sbx resume sbx_abc --generation 2 --wait`,
		func(id sandbox.ID, gen sandbox.Generation) (*sandbox.Sandbox, error) {
			return a.c.Resume(a.ctx, id, gen)
		})
}
