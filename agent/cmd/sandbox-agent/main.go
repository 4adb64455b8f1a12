// Command sandbox-agent is the sandbox agent as a standalone static binary, for tests and benchmarks
// of the oci provider. `sandboxd agent` runs the same code. A leading "agent" argument is accepted, so
// the binary takes the daemon's argument list unchanged.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/sandboxd/sandbox/agent"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "agent" {
		args = args[1:]
	}
	if err := agent.Main(context.Background(), args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
