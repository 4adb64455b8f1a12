package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
)

func (a *app) networkCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "network",
		Short: "Show or change a sandbox's network policy",
	}
	get := &cobra.Command{
		Use:               "get ID",
		Short:             "Show a sandbox's network policy, its counters and its recent denials",
		Example:           "  sbx network get sbx_abc\n  sbx network get sbx_abc -o json",
		Args:              exactArgs(1, "a sandbox id"),
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			n, err := a.c.Network(a.ctx, sandbox.ID(args[0]))
			if err != nil {
				return err
			}
			return a.showNetwork(n)
		},
	}
	var p client.NetworkPolicy
	var gen int64
	set := &cobra.Command{
		Use:   "set ID",
		Short: "Replace a running sandbox's network policy, for every new connection",
		Long: "Replace the policy: egress (deny or allow) for what no rule names, and the rules, CIDRs,\n" +
			"addresses or names (\"*.example.com\" for its subdomains). Deny beats allow. An IPv6 allow rule is\n" +
			"refused (422) where sandboxes have no IPv6.",
		Example: "  sbx network set sbx_abc --egress deny --allow pypi.org --allow '*.pythonhosted.org'\n" +
			"  sbx network set sbx_abc --egress allow --deny 203.0.113.0/24",
		Args:              exactArgs(1, "a sandbox id"),
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			if p.Egress != "" && p.Egress != "deny" && p.Egress != "allow" {
				return usagef("--egress %q: want deny or allow", p.Egress)
			}
			id := sandbox.ID(args[0])
			g, err := a.current(id, gen)
			if err != nil {
				return err
			}
			n, err := a.c.SetNetwork(a.ctx, id, g, p)
			if err != nil {
				return err
			}
			return a.showNetwork(n)
		},
	}
	set.Flags().StringVar(&p.Egress, "egress", "", "deny or allow: what a destination no rule names gets (default: the daemon's)")
	set.Flags().StringArrayVar(&p.Allow, "allow", nil, "a destination to allow (repeatable)")
	set.Flags().StringArrayVar(&p.Deny, "deny", nil, "a destination to deny (repeatable)")
	set.Flags().Int64Var(&gen, "generation", 0, "the generation to change (default: the current one)")
	watch := &cobra.Command{
		Use:               "denials ID",
		Short:             "Print a sandbox's denials as they happen, until it ends",
		Example:           "  sbx network denials sbx_abc\n  sbx network denials sbx_abc -o json",
		Args:              exactArgs(1, "a sandbox id"),
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			end, err := a.c.StreamNetworkDenials(a.ctx, sandbox.ID(args[0]), func(d sandbox.NetworkDenial) bool {
				if a.json() {
					return a.jsonLine(d) == nil
				}
				a.printf("%s\t%s\t%s\n", d.Time.Local().Format(time.RFC3339), d.Destination, d.Name)
				return true
			})
			if err == nil && end != nil && !a.json() {
				a.printf("ended: %s\n", end.Message)
			}
			return err
		},
	}
	cmd.AddCommand(get, set, watch)
	return cmd
}

// showNetwork prints a sandbox's network as JSON or as "field: value" lines and a table of denials.
func (a *app) showNetwork(n *client.Network) error {
	if a.json() {
		return a.writeJSON(n)
	}
	t := a.table()
	t.row("generation:", fmt.Sprint(n.Generation))
	t.row("egress:", n.Policy.Egress)
	t.row("allow:", strings.Join(n.Policy.Allow, ", "))
	t.row("deny:", strings.Join(n.Policy.Deny, ", "))
	t.row("allowed:", fmt.Sprint(n.AllowedConnections))
	t.row("denied:", fmt.Sprint(n.DeniedConnections))
	if err := t.flush(); err != nil {
		return err
	}
	if len(n.Denials) == 0 {
		return nil
	}
	d := a.table("TIME", "DESTINATION", "NAME")
	for _, x := range n.Denials {
		d.row(x.Time.Local().Format(time.RFC3339), x.Destination, x.Name)
	}
	return d.flush()
}
