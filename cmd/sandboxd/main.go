// Command sandboxd is the sandbox runtime daemon: `sandboxd serve` runs the HTTP API over the runtime
// core, a store and one provider; `sandboxd agent` is the agent inside each oci sandbox (the daemon binary
// is static so that it can be mounted into sandboxes as it is); `sandboxd version` prints the version.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandboxd/sandbox/agent"
	"github.com/sandboxd/sandbox/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "sandboxd:", err)
		}
		os.Exit(2)
	}
}

var errUsage = errors.New("usage")

const usage = `sandboxd runs isolated execution environments ("sandboxes") behind an HTTP API.

Usage:
  sandboxd serve [flags]    run the daemon (sandboxd serve -h for its flags)
  sandboxd version          print the version
  sandboxd agent [flags]    run as PID 1 inside an oci sandbox (the oci provider starts it)
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch args[0] {
	case "serve":
		m := NewMain(stderr)
		if err := m.ParseFlags(args[1:]); err != nil {
			if errors.Is(err, errHelp) {
				return nil
			}
			return err
		}
		if err := m.Run(ctx); err != nil {
			m.Close()
			return err
		}
		<-ctx.Done()
		return m.Close()
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "sandboxd", version.Version)
		return nil
	case "agent":
		return agent.Main(ctx, args[1:])
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "sandboxd: unknown command %q\n\n%s", args[0], usage)
	return errUsage
}
