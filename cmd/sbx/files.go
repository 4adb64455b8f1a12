package main

import (
	"strconv"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

func (a *app) filesCmd() *cobra.Command {
	var gen int64
	cmd := &cobra.Command{
		Use:   "files ID [PATH]",
		Short: "List one directory of a sandbox",
		Long:  "List one directory of a sandbox; PATH defaults to its working directory. Paths print as cat and cp take them.",
		Example: `  sbx files sbx_abc
  sbx files sbx_abc src -o json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usagef("want a sandbox id and an optional path")
			}
			return nil
		},
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			id := sandbox.ID(args[0])
			p := "."
			if len(args) == 2 {
				p = args[1]
			}
			g, err := a.current(id, gen)
			if err != nil {
				return err
			}
			entries, err := a.c.ListFiles(a.ctx, id, g, p)
			if err != nil {
				return err
			}
			if a.json() {
				if entries == nil {
					entries = []sandbox.FileEntry{}
				}
				return a.writeJSON(entries)
			}
			t := a.table("kind", "size", "path")
			for _, e := range entries {
				name := e.Path
				if e.Kind == sandbox.KindDirectory {
					name = a.paint("34", name+"/")
				}
				t.row(string(e.Kind), strconv.FormatInt(e.Size, 10), name)
			}
			return t.flush()
		},
	}
	cmd.Flags().Int64Var(&gen, "generation", 0, "the generation expected (default: the current one)")
	return cmd
}
