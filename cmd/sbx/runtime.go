package main

import (
	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

func (a *app) runtimeCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "runtime",
		Short:   "Show the protocol version and the provider with its capabilities",
		Example: `  sbx runtime` + "\n" + `  sbx runtime -o json`,
		Args:    exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			info, err := a.c.Runtime(a.ctx)
			if err != nil {
				return err
			}
			if a.json() {
				return a.writeJSON(info)
			}
			t := a.table()
			t.row("protocol:", info.ProtocolVersion)
			t.row("provider:", info.Provider.Name+" "+info.Provider.Version)
			t.row("runtime class:", info.Provider.RuntimeClass)
			if err := t.flush(); err != nil {
				return err
			}
			a.printf("\n")
			t = a.table("capability", "supported")
			for _, c := range capabilityNames {
				yes := a.paint("2", "no")
				if info.Provider.Capabilities.Has(sandbox.Capability(c)) {
					yes = a.paint("32", "yes")
				}
				t.row(c, yes)
			}
			return t.flush()
		},
	}
}
