package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

// procCmd is `sbx proc`: background processes, whose output the sandbox keeps and sbx reads by offset.
func (a *app) procCmd() *cobra.Command {
	var gen int64
	cmd := &cobra.Command{
		Use:   "proc",
		Short: "Start, list and follow background processes in a sandbox",
		Long: `A background process runs in its sandbox on its own: sbx, or the daemon, may go away and
come back. Its stdout and stderr, combined, are kept in the sandbox (the last 64 MiB) and read
from any byte offset, so "proc logs" resumes where it was, across dropped connections and
restarts of the daemon.`,
		Example: `  sbx proc start sbx_abc --tag server -- python3 -m http.server
  sbx proc ls sbx_abc
  sbx proc logs sbx_abc 42
  sbx proc kill sbx_abc 42 --signal INT
  sbx proc wait sbx_abc 42`,
	}
	cmd.PersistentFlags().Int64Var(&gen, "generation", 0, "the generation expected (default: the current one)")
	// target reads the sandbox id, and the pid when want says so, from args.
	target := func(args []string, withPID bool) (sandbox.ID, sandbox.Generation, int, error) {
		id := sandbox.ID(args[0])
		pid := 0
		if withPID {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return "", 0, 0, usagef("pid %q: want a positive integer", args[1])
			}
			pid = n
		}
		g, err := a.current(id, gen)
		return id, g, pid, err
	}
	// onPID is a command of one process: "NAME ID PID".
	onPID := func(use, short string, run func(id sandbox.ID, g sandbox.Generation, pid int) error) *cobra.Command {
		return &cobra.Command{
			Use:   use + " ID PID",
			Short: short,
			Args: func(_ *cobra.Command, args []string) error {
				if len(args) != 2 {
					return usagef("want a sandbox id and a pid")
				}
				return nil
			},
			ValidArgsFunction: a.completeIDs,
			RunE: func(_ *cobra.Command, args []string) error {
				id, g, pid, err := target(args, true)
				if err != nil {
					return err
				}
				return run(id, g, pid)
			},
		}
	}

	var f execFlags
	var tag string
	start := &cobra.Command{
		Use:               "start ID [flags] -- ARGV...",
		Short:             "Start a process in the background and print its pid",
		Args:              idAndCommand,
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			c, err := f.command(args[1:])
			if err != nil {
				return err
			}
			id, g, _, err := target(args, false)
			if err != nil {
				return err
			}
			p, err := a.c.StartProcess(a.ctx, id, g, sandbox.ProcessSpec{Argv: c.Argv, Cwd: c.Cwd, Env: c.Env, Tag: tag})
			if err != nil {
				return err
			}
			if a.json() {
				return a.writeJSON(p)
			}
			a.printf("%d\n", p.PID)
			return nil
		},
	}
	f.bind(start.Flags())
	start.Flags().StringVar(&tag, "tag", "", "a name for the process, shown by ls")

	ls := &cobra.Command{
		Use:               "ls ID",
		Short:             "List a sandbox's background processes",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			id, g, _, err := target(args, false)
			if err != nil {
				return err
			}
			list, err := a.c.ListProcesses(a.ctx, id, g)
			if err != nil {
				return err
			}
			if a.json() {
				return a.writeJSON(list)
			}
			t := a.table("pid", "state", "tag", "output", "started", "command")
			for _, p := range list {
				state := "running"
				if !p.Running {
					state = fmt.Sprintf("exited %d", *p.ExitCode)
				}
				t.row(strconv.Itoa(p.PID), state, p.Tag, strconv.FormatInt(p.OutputEnd, 10), p.StartedAt.Local().Format(time.DateTime), strings.Join(p.Argv, " "))
			}
			return t.flush()
		},
	}

	var from int64
	logs := onPID("logs", "Print a process's output from an offset, following it until the process exits",
		func(id sandbox.ID, g sandbox.Generation, pid int) error {
			r := a.c.NewOutputReader(a.ctx, id, g, pid, from)
			defer r.Close()
			_, err := io.Copy(a.stdout, r)
			if r.Dropped() > 0 {
				fmt.Fprintf(a.stderr, "sbx: %d bytes of output were no longer kept\n", r.Dropped())
			}
			if err != nil {
				return fmt.Errorf("%w (resume with --from %d)", err, r.Offset())
			}
			if code := r.ExitCode(); code != nil && *code != 0 {
				return &exitStatus{code: *code}
			}
			return nil
		})
	logs.Long = `Print a process's output from byte offset --from (default 0), following it until the
process exits; sbx then exits with the process's status. Bytes the sandbox no longer kept are
said on stderr. While the sandbox is paused, logs waits for its resume; when it is terminated,
logs says so and where to resume.`
	logs.Flags().Int64Var(&from, "from", 0, "the byte offset to start from")

	var timeout time.Duration
	wait := onPID("wait", "Wait for a process to exit and exit with its status",
		func(id sandbox.ID, g sandbox.Generation, pid int) error {
			p, err := a.c.WaitProcess(a.ctx, id, g, pid, timeout)
			if err != nil {
				return err
			}
			if a.json() {
				if err := a.writeJSON(p); err != nil {
					return err
				}
			}
			switch {
			case p.Running:
				return &exitStatus{exitTimedOut, fmt.Sprintf("process %d still runs after %s", pid, timeout)}
			case *p.ExitCode != 0:
				return &exitStatus{code: *p.ExitCode}
			}
			return nil
		})
	wait.Flags().DurationVar(&timeout, "timeout", time.Hour, "how long to wait (at most 1h)")

	var signal string
	kill := onPID("kill", "Send a signal to a process's group", func(id sandbox.ID, g sandbox.Generation, pid int) error {
		return a.c.SignalProcess(a.ctx, id, g, pid, strings.TrimPrefix(strings.ToUpper(signal), "SIG"))
	})
	kill.Flags().StringVarP(&signal, "signal", "s", "TERM", "the signal: "+strings.Join(sandbox.ProcessSignals, ", "))

	var closeIt bool
	stdin := onPID("stdin", "Send sbx's stdin to a process's stdin", func(id sandbox.ID, g sandbox.Generation, pid int) error {
		buf := make([]byte, sandbox.MaxProcessStdinBytes)
		for {
			n, rerr := io.ReadFull(a.stdin, buf)
			last := rerr != nil
			if n > 0 || (last && closeIt) {
				if err := a.c.WriteStdin(a.ctx, id, g, pid, buf[:n], last && closeIt); err != nil {
					return err
				}
			}
			if last {
				if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
					return nil
				}
				return rerr
			}
		}
	})
	stdin.Flags().BoolVar(&closeIt, "close", false, "close the process's stdin after sbx's ends")

	cmd.AddCommand(start, ls, logs, wait, kill, stdin)
	return cmd
}
