package main

import (
	"github.com/spf13/cobra"
)

func (a *app) catCmd() *cobra.Command {
	var gen int64
	cmd := &cobra.Command{
		Use:     "cat ID:PATH",
		Short:   "Print a file of a sandbox",
		Example: `  sbx cat sbx_abc:out/report.txt`,
		Args:    exactArgs(1, "ID:PATH"),
		RunE: func(_ *cobra.Command, args []string) error {
			id, p, ok := remoteArg(args[0])
			if !ok {
				return usagef("%q: want ID:PATH", args[0])
			}
			g, err := a.current(id, gen)
			if err != nil {
				return err
			}
			data, err := a.c.ReadFile(a.ctx, id, g, p)
			if err != nil {
				return err
			}
			_, err = a.stdout.Write(data)
			return err
		},
	}
	cmd.Flags().Int64Var(&gen, "generation", 0, "the generation expected (default: the current one)")
	return cmd
}
