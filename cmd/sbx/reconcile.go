package main

import (
	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

func (a *app) reconcileCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "reconcile ID",
		Short: "Ask the provider for a fresh observation of a sandbox and apply it",
		Long: `Ask the provider for a fresh observation of the sandbox's current generation and apply it.
It changes no desired state and takes no generation.`,
		Example:           `  sbx reconcile sbx_abc`,
		Args:              exactArgs(1, "a sandbox id"),
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			sb, err := a.c.Reconcile(a.ctx, sandbox.ID(args[0]))
			if err != nil {
				return err
			}
			return a.showAction(sb)
		},
	}
}
