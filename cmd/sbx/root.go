package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
)

// app is what every subcommand shares: the client, the streams and the output settings.
type app struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer

	url    string
	output string // table or json
	color  string // auto, always or never

	c *client.Client
}

func newRoot(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	a := &app{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "sbx",
		Short: "Create and drive sandboxes through sandboxd",
		Long: `sbx creates, inspects and drives sandboxes through the sandboxd HTTP API.

The daemon is found at $SANDBOXD_URL (default ` + client.DefaultURL + `); when it wants a
bearer token, sbx sends $SANDBOXD_TOKEN (never a flag: a command line is visible to others).
Every command prints a table by default and JSON with -o json. Colour is used only
on a terminal, and never when NO_COLOR is set.

Exit statuses: exec and run exit with the command's own status; 124 when the command
timed out, 125 when it was cancelled, 130 when sbx was interrupted, 2 for a usage
error, and 1 for any other error, printed as "sbx: <error code>: <message>".`,
		Example: `  sbx create --wait
  sbx exec sbx_abc -- uname -a
  sbx run -- sh -c 'echo hello from a sandbox'
  sbx cp ./src sbx_abc:src
  sbx events --follow`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		PersistentPreRunE: a.setup,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	pf.StringVar(&a.color, "color", "auto", "colour: auto (on a terminal), always or never; NO_COLOR turns it off")
	pf.StringVar(&a.url, "url", "", "sandboxd URL (default $SANDBOXD_URL or "+client.DefaultURL+")")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
	_ = root.RegisterFlagCompletionFunc("color", cobra.FixedCompletions([]string{"auto", "always", "never"}, cobra.ShellCompDirectiveNoFileComp))

	root.AddCommand(
		a.createCmd(), a.lsCmd(), a.getCmd(), a.runtimeCmd(), a.execCmd(), a.runCmd(),
		a.cpCmd(), a.catCmd(), a.filesCmd(),
		a.pauseCmd(), a.resumeCmd(), a.terminateCmd(), a.recreateCmd(), a.reconcileCmd(),
		a.eventsCmd(), a.statsCmd(), a.topCmd(), a.volumeCmd(), a.networkCmd(), a.checkpointCmd(), a.checkpointsCmd(),
		a.imageCmd(), a.snapshotCmd(), a.forkCmd(), a.templateCmd(), a.procCmd(), a.shellCmd(),
		a.portForwardCmd(), a.previewCmd(),
	)
	return root
}

// setup checks the global flags and makes the client.
func (a *app) setup(cmd *cobra.Command, _ []string) error {
	if a.output != "table" && a.output != "json" {
		return usagef("-o %q: want table or json", a.output)
	}
	if a.color != "auto" && a.color != "always" && a.color != "never" {
		return usagef("--color %q: want auto, always or never", a.color)
	}
	u := a.url
	if u == "" {
		u = os.Getenv("SANDBOXD_URL")
	}
	var opts []client.Option
	if tok := os.Getenv("SANDBOXD_TOKEN"); tok != "" {
		opts = append(opts, client.WithToken(tok))
	}
	c, err := client.New(u, opts...)
	if err != nil {
		return usagef("%v", err)
	}
	a.c = c
	return nil
}

// isFlagError reports whether err is cobra's complaint about the command line.
func isFlagError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "invalid argument"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// exactArgs is cobra.ExactArgs as a usage error, naming what is missing.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("want %s, got %d arguments", what, len(args))
		}
		return nil
	}
}

// completeIDs completes sandbox ids for the first argument.
func (a *app) completeIDs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	if err := a.setup(cmd, args); err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	list, err := a.c.List(a.ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var ids []string
	for _, sb := range list {
		ids = append(ids, string(sb.ID)+"\t"+string(sb.State))
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}

// current returns the sandbox's generation: gen when given (> 0), else the one the daemon holds now.
func (a *app) current(id sandbox.ID, gen int64) (sandbox.Generation, error) {
	if gen > 0 {
		return sandbox.Generation(gen), nil
	}
	if gen < 0 {
		return 0, usagef("--generation %d: a generation is at least 1", gen)
	}
	sb, err := a.c.Get(a.ctx, id)
	if err != nil {
		return 0, err
	}
	return sb.Generation, nil
}

// json reports whether output is JSON.
func (a *app) json() bool { return a.output == "json" }

func (a *app) printf(format string, args ...any) { fmt.Fprintf(a.stdout, format, args...) }
