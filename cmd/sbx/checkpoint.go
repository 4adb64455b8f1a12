package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

func (a *app) checkpointCmd() *cobra.Command {
	var gen int64
	var leaveRunning bool
	cmd := &cobra.Command{
		Use:   "checkpoint ID",
		Short: "Write a sandbox's memory and processes to a checkpoint",
		Long: `checkpoint writes the ready sandbox's memory, processes and /workspace to a checkpoint and
prints its id. The sandbox is paused at it (sbx resume restores it from there), unless
--leave-running. sbx create --from-checkpoint ID/CHECKPOINT starts a new sandbox from it.
Needs the memorySnapshot capability (the oci provider on gVisor).`,
		Example: `  sbx checkpoint sbx_abc
  sbx checkpoint sbx_abc --leave-running
  sbx create --wait --from-checkpoint sbx_abc/ckpt_0123456789abcdef`,
		Args:              exactArgs(1, "a sandbox id"),
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			id := sandbox.ID(args[0])
			g, err := a.current(id, gen)
			if err != nil {
				return err
			}
			s := a.spin("writing a checkpoint of " + string(id))
			res, err := a.c.Checkpoint(a.ctx, id, g, leaveRunning)
			s.Stop()
			if err != nil {
				return err
			}
			if a.json() {
				return a.writeJSON(res)
			}
			fmt.Fprintln(a.stdout, res.Checkpoint.ID)
			return nil
		},
	}
	cmd.Flags().Int64Var(&gen, "generation", 0, "the generation expected; a stale one fails with generation_conflict (default: the current one)")
	cmd.Flags().BoolVar(&leaveRunning, "leave-running", false, "keep the sandbox running after the checkpoint")
	return cmd
}

func (a *app) checkpointsCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "checkpoints ID",
		Short:             "List the checkpoints of a sandbox",
		Example:           `  sbx checkpoints sbx_abc`,
		Args:              exactArgs(1, "a sandbox id"),
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			list, err := a.c.Checkpoints(a.ctx, sandbox.ID(args[0]))
			if err != nil {
				return err
			}
			if a.json() {
				return a.writeJSON(list)
			}
			t := a.table("id", "generation", "created", "running", "size")
			for _, c := range list {
				t.row(c.ID, fmt.Sprint(c.Generation), c.CreatedAt.Local().Format(time.DateTime), fmt.Sprint(c.LeftRunning), bytesOf(&c.SizeBytes))
			}
			return t.flush()
		},
	}
}
