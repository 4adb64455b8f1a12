package main

import (
	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

func (a *app) terminateCmd() *cobra.Command {
	return a.actionCmd("terminate", "Terminate a sandbox and release its resources", "",
		`  sbx terminate sbx_abc
  sbx terminate sbx_abc --generation 2 --wait`,
		func(id sandbox.ID, gen sandbox.Generation) (*sandbox.Sandbox, error) {
			return a.c.Terminate(a.ctx, id, gen)
		})
}
