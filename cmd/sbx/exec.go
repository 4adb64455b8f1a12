package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sandboxd/sandbox"
)

// execFlags are the flags of a command, shared by exec and run.
type execFlags struct {
	cwd       string
	env       []string
	timeout   float64
	maxOutput int
}

func (f *execFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.cwd, "cwd", "", "working directory, relative to the sandbox's")
	fs.StringArrayVarP(&f.env, "env", "e", nil, "an environment variable as K=V (repeatable)")
	fs.Float64Var(&f.timeout, "timeout", 0, "seconds before the command's process group is killed (default: the server's, 60)")
	fs.IntVar(&f.maxOutput, "max-output", 0, "bytes of stdout and of stderr kept (default: the server's, 1 MiB)")
}

func (f *execFlags) command(argv []string) (sandbox.Command, error) {
	if len(argv) == 0 {
		return sandbox.Command{}, usagef("no command: put it after --, e.g. -- ls -la")
	}
	if f.timeout < 0 || f.timeout > sandbox.MaxCommandTimeout.Seconds() {
		return sandbox.Command{}, usagef("--timeout %g: want 0 < seconds <= %g", f.timeout, sandbox.MaxCommandTimeout.Seconds())
	}
	cmd := sandbox.Command{Argv: argv, Cwd: f.cwd, Timeout: time.Duration(f.timeout * float64(time.Second)), MaxOutputBytes: f.maxOutput}
	for _, kv := range f.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return sandbox.Command{}, usagef("--env %q: want K=V", kv)
		}
		if cmd.Env == nil {
			cmd.Env = map[string]string{}
		}
		cmd.Env[k] = v
	}
	return cmd, nil
}

// idAndCommand checks the arguments of a command run in a sandbox: its id, then the argv.
func idAndCommand(_ *cobra.Command, args []string) error {
	if len(args) < 1 {
		return usagef("want a sandbox id and a command after --")
	}
	return nil
}

func (a *app) execCmd() *cobra.Command {
	var f execFlags
	var gen int64
	var interactive, tty bool
	cmd := &cobra.Command{
		Use:   "exec ID [flags] -- ARGV...",
		Short: "Run a command in a sandbox",
		Long: `Run a command in a ready sandbox. The argv is executed directly, not through a shell.
Its stdout and stderr go to sbx's, and its exit status becomes sbx's. A command that
timed out exits 124 and one that was cancelled exits 125, each saying so on stderr.
With -o json, the whole result is printed as JSON instead, and the status still passes through.
With -t the command runs on a pseudo-terminal instead (a background process, attached as
"sbx shell" is), and -i sends it this terminal's keys; --timeout and --max-output do not apply.`,
		Example: `  sbx exec sbx_abc -- uname -a
  sbx exec -it sbx_abc -- python3
  sbx exec sbx_abc --cwd src --env GOFLAGS=-v -- go build ./...
  sbx exec sbx_abc --timeout 5 -- sh -c 'sleep 10'   # exits 124`,
		Args:              idAndCommand,
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			c, err := f.command(args[1:])
			if err != nil {
				return err
			}
			if interactive && !tty {
				return usagef("-i needs -t: keys go to a terminal")
			}
			id := sandbox.ID(args[0])
			g, err := a.current(id, gen)
			if err != nil {
				return err
			}
			if tty {
				return a.interact(id, g, sandbox.ProcessSpec{Argv: c.Argv, Cwd: c.Cwd, Env: c.Env}, interactive)
			}
			return a.exec(id, g, c)
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().Int64Var(&gen, "generation", 0, "the generation expected (default: the current one)")
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "send this terminal's keys to the command (with -t)")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "run the command on a pseudo-terminal, attached")
	return cmd
}

// exec runs c and passes its output and status on.
func (a *app) exec(id sandbox.ID, gen sandbox.Generation, c sandbox.Command) error {
	res, err := a.c.Exec(a.ctx, id, gen, c)
	if err != nil {
		return err
	}
	if a.json() {
		if err := a.writeJSON(res); err != nil {
			return err
		}
	} else {
		_, _ = io.WriteString(a.stdout, res.Stdout)
		_, _ = io.WriteString(a.stderr, res.Stderr)
		if res.Truncated {
			fmt.Fprintln(a.stderr, "sbx: output truncated to the first bytes of each stream (--max-output)")
		}
	}
	switch {
	case res.TimedOut:
		return &exitStatus{exitTimedOut, fmt.Sprintf("command timed out after %s", res.FinishedAt.Sub(res.StartedAt).Round(time.Millisecond))}
	case res.Cancelled:
		return &exitStatus{exitCancelled, "command was cancelled (the sandbox was paused or terminated under it)"}
	case res.ExitCode != nil && *res.ExitCode != 0:
		return &exitStatus{code: *res.ExitCode}
	}
	return nil
}
