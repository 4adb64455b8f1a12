package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

func (a *app) volumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "Make, list and remove persistent volumes",
		Long: `Persistent volumes outlive the sandboxes that mount them: sbx create -v NAME:PATH mounts
one (NAME:PATH:ro read-only). A volume that is not --shared has one writer at a time.`,
		Example: `  sbx volume create cache --size 1024
  sbx create --wait -v cache:/data
  sbx volume ls
  sbx volume rm cache`,
	}
	var size int64
	var shared bool
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Make an empty volume",
		Args:  exactArgs(1, "a volume name"),
		RunE: func(_ *cobra.Command, args []string) error {
			v, err := a.c.CreateVolume(a.ctx, args[0], size, shared)
			if err != nil {
				return err
			}
			if a.json() {
				return a.writeJSON(v)
			}
			fmt.Fprintln(a.stdout, v.Name)
			return nil
		},
	}
	create.Flags().Int64Var(&size, "size", 1024, "size in MiB")
	create.Flags().BoolVar(&shared, "shared", false, "let more than one sandbox mount it writable at once")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the volumes",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			list, err := a.c.Volumes(a.ctx)
			if err != nil {
				return err
			}
			if a.json() {
				return a.writeJSON(list)
			}
			t := a.table("name", "size", "used", "shared", "mounted by", "created")
			for _, v := range list {
				t.row(v.Name, fmt.Sprintf("%d MiB", v.SizeMiB), bytesOf(v.UsedBytes), yesNo(v.Shared),
					idList(v.AttachedTo), v.CreatedAt.Local().Format(time.RFC3339))
			}
			return t.flush()
		},
	}
	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one volume",
		Args:  exactArgs(1, "a volume name"),
		RunE: func(_ *cobra.Command, args []string) error {
			v, err := a.c.Volume(a.ctx, args[0])
			if err != nil {
				return err
			}
			if a.json() {
				return a.writeJSON(v)
			}
			t := a.table()
			t.row("name:", v.Name)
			t.row("size:", fmt.Sprintf("%d MiB", v.SizeMiB))
			t.row("used:", bytesOf(v.UsedBytes))
			t.row("shared:", yesNo(v.Shared))
			t.row("mounted by:", idList(v.AttachedTo))
			t.row("created:", v.CreatedAt.Local().Format(time.RFC3339))
			return t.flush()
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove volumes and their data (refused while a sandbox mounts one)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			for _, name := range args {
				if err := a.c.DeleteVolume(a.ctx, name); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.AddCommand(create, ls, get, rm)
	return cmd
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func idList(ids []sandbox.ID) string {
	if len(ids) == 0 {
		return "-"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	return strings.Join(s, ",")
}

// parseVolumeFlag reads -v NAME:PATH[:ro].
func parseVolumeFlag(v string) (sandbox.VolumeMount, error) {
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" || (len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw") {
		return sandbox.VolumeMount{}, usagef("-v %q: want NAME:PATH or NAME:PATH:ro", v)
	}
	return sandbox.VolumeMount{Name: parts[0], MountPath: parts[1], ReadOnly: len(parts) == 3 && parts[2] == "ro"}, nil
}
