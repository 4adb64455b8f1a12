package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

func (a *app) getCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "get ID",
		Short:             "Show one sandbox",
		Example:           `  sbx get sbx_abc` + "\n" + `  sbx get sbx_abc -o json`,
		Args:              exactArgs(1, "a sandbox id"),
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			sb, err := a.c.Get(a.ctx, sandbox.ID(args[0]))
			if err != nil {
				return err
			}
			return a.showSandbox(sb)
		},
	}
}

// showSandbox prints a sandbox as JSON or as "field: value" lines.
func (a *app) showSandbox(sb *sandbox.Sandbox) error {
	if a.json() {
		return a.writeJSON(sb)
	}
	t := a.table()
	t.row("id:", string(sb.ID))
	t.row("generation:", fmt.Sprint(sb.Generation))
	t.row("state:", a.state(sb.State))
	if sb.Failure != nil {
		t.row("failure:", sb.Failure.Code+": "+sb.Failure.Message)
	}
	t.row("provider:", sb.Provider)
	t.row("request id:", sb.Spec.ClientRequestID)
	if sb.Spec.Image != "" {
		t.row("image:", sb.Spec.Image)
	}
	if sb.Spec.Template != "" {
		t.row("template:", sb.Spec.Template)
	}
	if r := sb.Spec.Resources; r != nil {
		t.row("resources:", fmt.Sprintf("cpu %dm, memory %d MiB, disk %d MiB", r.CPUMillis, r.MemoryMiB, r.DiskMiB))
	}
	if len(sb.Spec.RequiredCapabilities) > 0 {
		var cs []string
		for _, c := range sb.Spec.RequiredCapabilities {
			cs = append(cs, string(c))
		}
		t.row("requires:", strings.Join(cs, ", "))
	}
	for _, k := range sortedKeys(sb.Spec.Extensions) {
		t.row("extension:", k+"="+string(sb.Spec.Extensions[k]))
	}
	if sb.Endpoint != nil {
		t.row("endpoint:", sb.Endpoint.BaseURL)
	}
	t.row("created:", sb.CreatedAt.Local().Format(time.RFC3339))
	t.row("updated:", sb.UpdatedAt.Local().Format(time.RFC3339))
	return t.flush()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
