package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
)

// snapshotCmd is `sbx snapshot ID`: capture a sandbox's filesystem; and its ls, inspect and rm.
func (a *app) snapshotCmd() *cobra.Command {
	var name string
	var gen int64
	cmd := &cobra.Command{
		Use:   "snapshot ID",
		Short: "Snapshot a sandbox's filesystem (frozen for the instant it takes); list, inspect and remove snapshots",
		Long: `sbx snapshot ID captures the filesystem of a ready or paused sandbox on an image or a
template as a snapshot, which sbx fork, sbx create --template SNAPSHOT and spec.template run.
With --name it is also that template's newest version.`,
		Example: `  sbx snapshot sbx_abc
  sbx snapshot sbx_abc --name python-ready
  sbx snapshot ls
  sbx snapshot rm sha256:...`,
		Args:              exactArgs(1, "a sandbox id"),
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			id := sandbox.ID(args[0])
			g, err := a.current(id, gen)
			if err != nil {
				return err
			}
			s := a.spin("snapshotting " + args[0])
			info, err := a.c.Snapshot(a.ctx, id, g, name)
			s.Stop()
			return a.printSnapshot(info, err)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "make the snapshot the newest version of this template")
	cmd.Flags().Int64Var(&gen, "generation", 0, "the generation expected (default: the current one)")
	cmd.AddCommand(
		&cobra.Command{
			Use:     "ls",
			Aliases: []string{"list"},
			Short:   "List the snapshots",
			Args:    exactArgs(0, "no arguments"),
			RunE: func(*cobra.Command, []string) error {
				list, err := a.c.Snapshots(a.ctx)
				if err != nil {
					return err
				}
				if a.json() {
					if list == nil {
						list = []sandbox.SnapshotInfo{}
					}
					return a.writeJSON(list)
				}
				t := a.table("snapshot", "sandbox", "created", "sandboxes", "templates")
				for _, sn := range list {
					t.row(shortDigest(sn.Digest), fmt.Sprintf("%s g%d", sn.SandboxID, sn.Generation), sn.CreatedAt.Format("2006-01-02 15:04:05"),
						strconv.Itoa(sn.Users), strings.Join(sn.Templates, ", "))
				}
				return t.flush()
			},
		},
		&cobra.Command{
			Use:   "inspect SNAPSHOT",
			Short: "Show one snapshot",
			Args:  exactArgs(1, "a snapshot id (sha256:...)"),
			RunE: func(_ *cobra.Command, args []string) error {
				info, err := a.c.GetSnapshot(a.ctx, args[0])
				return a.printSnapshot(info, err)
			},
		},
		&cobra.Command{
			Use:     "rm SNAPSHOT",
			Aliases: []string{"remove"},
			Short:   "Remove a snapshot and the template versions that are it (refused while a sandbox runs on it)",
			Args:    exactArgs(1, "a snapshot id (sha256:...)"),
			RunE: func(_ *cobra.Command, args []string) error {
				if err := a.c.DeleteSnapshot(a.ctx, args[0]); err != nil {
					return err
				}
				if a.json() {
					return a.writeJSON(map[string]string{"id": args[0]})
				}
				a.printf("removed %s\n", args[0])
				return nil
			},
		},
	)
	return cmd
}

func (a *app) printSnapshot(info *sandbox.SnapshotInfo, err error) error {
	if err != nil {
		return err
	}
	if a.json() {
		return a.writeJSON(info)
	}
	t := a.table()
	t.row("id:", info.ID)
	t.row("sandbox:", fmt.Sprintf("%s generation %d", info.SandboxID, info.Generation))
	t.row("base:", info.BaseDigest)
	t.row("layers:", strconv.Itoa(info.Layers))
	t.row("sandboxes:", strconv.Itoa(info.Users))
	if len(info.Templates) > 0 {
		t.row("templates:", strings.Join(info.Templates, ", "))
	}
	return t.flush()
}

// forkCmd is `sbx fork SNAPSHOT -n N`.
func (a *app) forkCmd() *cobra.Command {
	var n int
	var key string
	var wait bool
	cmd := &cobra.Command{
		Use:   "fork SNAPSHOT",
		Short: "Create sandboxes of a snapshot, each with its own copy-on-write filesystem",
		Example: `  sbx fork sha256:... -n 3
  sbx fork sha256:... -n 10 --client-request-id batch-7 --wait`,
		Args: exactArgs(1, "a snapshot id (sha256:...)"),
		RunE: func(_ *cobra.Command, args []string) error {
			s := a.spin(fmt.Sprintf("forking %d sandboxes", n))
			ids, err := a.c.Fork(a.ctx, args[0], n, client.ForkOptions{ClientRequestID: key})
			s.Stop()
			if err != nil {
				return err
			}
			if wait {
				for i, id := range ids {
					s := a.spin(fmt.Sprintf("waiting for %s (%d of %d) to be ready", id, i+1, len(ids)))
					_, err := a.c.WaitReady(a.ctx, id)
					s.Stop()
					if err != nil {
						return err
					}
				}
			}
			if a.json() {
				return a.writeJSON(map[string]any{"sandboxIds": ids})
			}
			for _, id := range ids {
				a.printf("%s\n", id)
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&n, "count", "n", 1, "how many sandboxes (1 to 32)")
	cmd.Flags().StringVar(&key, "client-request-id", "", "makes a repeated fork make no more sandboxes")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until every sandbox is ready")
	return cmd
}
