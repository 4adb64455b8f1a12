// Command sbx is the command line of sandboxd: it creates, inspects and drives sandboxes through the
// HTTP API at $SANDBOXD_URL (default http://127.0.0.1:4311).
//
// Its invariant: sbx talks to the daemon only through the client package and the domain types, never
// through the daemon's internals (a test checks its imports), so it works against any sandboxd.
//
// Exit statuses: 0 on success; for exec and run, the command's own exit status; 124 when the command
// timed out, 125 when it was cancelled, 130 when sbx itself was interrupted; 2 for a usage error; 1 for
// any other error, printed on stderr as one line "sbx: <error code>: <message>".
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandboxd/sandbox/client"
)

// The exit statuses of sbx itself.
const (
	exitError       = 1
	exitUsage       = 2
	exitTimedOut    = 124
	exitCancelled   = 125
	exitInterrupted = 130
)

func main() {
	os.Exit(Main())
}

// Main runs sbx with the process's arguments and streams and returns its exit status.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
}

// exitStatus is an error that ends sbx with a given status, after printing its message if it has one.
type exitStatus struct {
	code int
	msg  string
}

func (e *exitStatus) Error() string { return e.msg }

// usageError is a wrong invocation: exit status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return &usageError{fmt.Errorf(format, args...)} }

// run executes one invocation and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(ctx, stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var es *exitStatus
	if errors.As(err, &es) {
		if es.msg != "" {
			fmt.Fprintln(stderr, "sbx:", es.msg)
		}
		return es.code
	}
	fmt.Fprintln(stderr, "sbx:", describe(err))
	var ue *usageError
	switch {
	case errors.As(err, &ue) || isFlagError(err):
		fmt.Fprintln(stderr, "Run 'sbx --help' for usage.")
		return exitUsage
	case ctx.Err() != nil:
		return exitInterrupted
	}
	return exitError
}

// describe renders err on one line, leading with the API's error code when there is one.
func describe(err error) string {
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		return fmt.Sprintf("%s: %s", apiErr.Code, apiErr.Message)
	}
	var se *client.StateError
	if errors.As(err, &se) {
		return se.Error()
	}
	if errors.Is(err, context.Canceled) {
		return "interrupted"
	}
	return err.Error()
}
