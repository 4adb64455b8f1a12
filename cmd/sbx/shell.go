package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
)

// loginShell starts the image's shell ($SHELL as the sandbox's environment has it, else /bin/sh) as a
// login shell.
var loginShell = []string{"/bin/sh", "-c", `exec "${SHELL:-/bin/sh}" -l`}

// shellCmd is `sbx shell`: a login shell on a pseudo-terminal, attached.
func (a *app) shellCmd() *cobra.Command {
	var gen int64
	var cwd string
	cmd := &cobra.Command{
		Use:   "shell ID",
		Short: "Open an interactive shell in a sandbox",
		Long: `Start a login shell ($SHELL of the sandbox's environment, else /bin/sh) on a pseudo-terminal
in a ready sandbox and attach this terminal to it: raw mode, the window's size followed,
^C and the other keys going to the sandbox. sbx exits with the shell's status. The shell is
a background process: "sbx proc ls" lists it, and a dropped connection reattaches where it was.`,
		Example: `  sbx shell sbx_abc
  sbx exec -it sbx_abc -- python3`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("want a sandbox id")
			}
			return nil
		},
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			id := sandbox.ID(args[0])
			g, err := a.current(id, gen)
			if err != nil {
				return err
			}
			return a.interact(id, g, sandbox.ProcessSpec{Argv: loginShell, Cwd: cwd}, true)
		},
	}
	cmd.Flags().Int64Var(&gen, "generation", 0, "the generation expected (default: the current one)")
	cmd.Flags().StringVar(&cwd, "cwd", "", "working directory, relative to the sandbox's")
	return cmd
}

// interact starts spec on a pty the size of this terminal (24×80 when it is none) and attaches to it
// until it exits: its output to stdout, stdin to its keys when keys. The exit code is sbx's.
func (a *app) interact(id sandbox.ID, gen sandbox.Generation, spec sandbox.ProcessSpec, keys bool) error {
	in, _ := a.stdin.(*os.File)
	out, _ := a.stdout.(*os.File)
	size := sandbox.TerminalSize{Rows: 24, Cols: 80}
	sizeOf := func() (sandbox.TerminalSize, bool) {
		for _, f := range []*os.File{out, in} {
			if f != nil && term.IsTerminal(int(f.Fd())) {
				if w, h, err := term.GetSize(int(f.Fd())); err == nil && w > 0 && h > 0 {
					return sandbox.TerminalSize{Rows: h, Cols: w}, true
				}
			}
		}
		return sandbox.TerminalSize{}, false
	}
	if s, ok := sizeOf(); ok {
		size = s
	}
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	if _, ok := spec.Env["TERM"]; !ok {
		spec.Env["TERM"] = "xterm-256color"
		if t := os.Getenv("TERM"); t != "" && t != "dumb" {
			spec.Env["TERM"] = t
		}
	}
	spec.PTY = &size
	p, err := a.c.StartProcess(a.ctx, id, gen, spec)
	if err != nil {
		return err
	}
	// The attach outlives the interrupt signal: in raw mode ^C is a key for the sandbox.
	ctx, cancel := context.WithCancel(context.WithoutCancel(a.ctx))
	defer cancel()
	t, err := a.c.Terminal(ctx, id, gen, p.PID, client.TerminalOptions{})
	if err != nil {
		return err
	}
	defer t.Close()
	if keys && in != nil && term.IsTerminal(int(in.Fd())) {
		old, err := term.MakeRaw(int(in.Fd()))
		if err != nil {
			return fmt.Errorf("raw mode: %w", err)
		}
		defer term.Restore(int(in.Fd()), old)
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
				if s, ok := sizeOf(); ok {
					_ = t.Resize(ctx, s)
				}
			}
		}
	}()
	if keys {
		go func() {
			// Ends with the process (Write fails once the terminal is closed) or with stdin.
			_, _ = io.Copy(t, a.stdin)
		}()
	}
	_, err = io.Copy(a.stdout, t)
	if err == nil {
		code := t.ExitCode()
		if code != nil && *code != 0 {
			return &exitStatus{code: *code}
		}
		return nil
	}
	var end *client.EndError
	if errors.As(err, &end) {
		return &exitStatus{code: 1, msg: fmt.Sprintf("\r\nthe terminal ended: %s; process %d may go on (sbx proc ls)", end.Reason, p.PID)}
	}
	return err
}
