package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

func (a *app) runCmd() *cobra.Command {
	var sf specFlags
	var ef execFlags
	var keep bool
	cmd := &cobra.Command{
		Use:   "run [create flags] [exec flags] -- ARGV...",
		Short: "Create a sandbox, run one command in it and terminate it",
		Long: `Create a sandbox, wait until it is ready, run one command in it and terminate it,
for one-shot use. The exit status is the command's, as with exec. The sandbox is
terminated even when the command fails or sbx is interrupted, unless --keep is given.`,
		Example: `  sbx run -- sh -c 'echo hello from a sandbox'
  sbx run --memory 256 --timeout 30 -- python3 -c 'print(6*7)'`,
		RunE: func(_ *cobra.Command, args []string) error {
			spec, err := sf.spec()
			if err != nil {
				return err
			}
			c, err := ef.command(args)
			if err != nil {
				return err
			}
			sb, err := a.create(spec, false)
			if err != nil {
				return err
			}
			if !keep {
				defer a.cleanup(sb.ID)
			} else {
				defer fmt.Fprintf(a.stderr, "sbx: kept %s\n", sb.ID)
			}
			s := a.spin(fmt.Sprintf("waiting for %s to be ready", sb.ID))
			sb, err = a.c.WaitReady(a.ctx, sb.ID)
			s.Stop()
			if err != nil {
				return err
			}
			return a.exec(sb.ID, sb.Generation, c)
		},
	}
	sf.bind(cmd.Flags())
	ef.bind(cmd.Flags())
	cmd.Flags().BoolVar(&keep, "keep", false, "leave the sandbox running afterwards and print its id on stderr")
	return cmd
}

// cleanup terminates a sandbox of run, also after an interrupt, within a bounded time.
func (a *app) cleanup(id sandbox.ID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), 30*time.Second)
	defer cancel()
	sb, err := a.c.Get(ctx, id)
	if err == nil {
		_, err = a.c.Terminate(ctx, id, sb.Generation)
	}
	if err != nil {
		fmt.Fprintf(a.stderr, "sbx: terminating %s: %s\n", id, describe(err))
	}
}
