package main

import (
	"strconv"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

func (a *app) lsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sandboxes",
		Example: `  sbx ls
  sbx ls -o json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			list, err := a.c.List(a.ctx)
			if err != nil {
				return err
			}
			if a.json() {
				if list == nil {
					list = []*sandbox.Sandbox{}
				}
				return a.writeJSON(list)
			}
			// The coloured column is last: escape codes would upset the alignment of the ones after it.
			t := a.table("id", "gen", "provider", "created", "state")
			for _, sb := range list {
				t.row(string(sb.ID), strconv.FormatInt(int64(sb.Generation), 10), sb.Provider, since(sb.CreatedAt), a.state(sb.State))
			}
			return t.flush()
		},
	}
}
