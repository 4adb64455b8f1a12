package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// Two one-shot modes beside the agent itself, for sandboxes whose only way in is running a program
// inside them (a Kubernetes Pod reached through pods/exec):
//
//	agent relay -socket PATH     connects stdin and stdout to the agent's unix socket, so that the
//	                             daemon's client (agentclient) can speak HTTP to the agent over any
//	                             byte stream into the sandbox;
//	agent install -to PATH       copies the running binary to PATH (atomically, mode 0755), so that an
//	                             init container can place the static agent into a volume shared with
//	                             the sandbox's own image.

// subcommand runs a one-shot mode named by args[0], if it is one.
func subcommand(ctx context.Context, args []string) (bool, error) {
	if len(args) == 0 {
		return false, nil
	}
	switch args[0] {
	case "relay":
		fs := flag.NewFlagSet("agent relay", flag.ContinueOnError)
		socket := fs.String("socket", "", "the agent's unix socket")
		if err := fs.Parse(args[1:]); err != nil {
			return true, err
		}
		if *socket == "" || fs.NArg() != 0 {
			return true, errors.New("agent: usage: agent relay -socket PATH")
		}
		return true, Relay(ctx, *socket, os.Stdin, os.Stdout)
	case "hold":
		// Holds the namespaces it was started in until its standard input closes: the oci provider
		// starts it in a new user namespace for the runtime to join.
		_, err := io.Copy(io.Discard, os.Stdin)
		return true, err
	case "install":
		fs := flag.NewFlagSet("agent install", flag.ContinueOnError)
		to := fs.String("to", "", "where to copy the agent binary")
		if err := fs.Parse(args[1:]); err != nil {
			return true, err
		}
		if *to == "" || fs.NArg() != 0 {
			return true, errors.New("agent: usage: agent install -to PATH")
		}
		return true, Install("/proc/self/exe", *to)
	}
	return false, nil
}

// Relay copies in to the agent listening on socket and the agent's answers to out, until either side
// ends or ctx does. Closing in (the caller went away) closes the connection, which cancels the
// agent's running request as a dropped client would.
func Relay(ctx context.Context, socket string, in io.Reader, out io.Writer) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("agent relay: %w", err)
	}
	defer conn.Close()
	if fin, ok := in.(*os.File); ok {
		if fout, ok := out.(*os.File); ok {
			return relayHandedOver(ctx, conn.(*net.UnixConn), fin, fout)
		}
	}
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(conn, in)
		done <- err
	}()
	go func() {
		_, err := io.Copy(out, conn)
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
	}
	// The caller going away closes its ends: a write to them then fails with a closed pipe. That is the
	// relay's normal end, as a clean EOF is.
	if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrClosedPipe) && !errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("agent relay: %w", err)
	}
	return nil
}

// relayHandedOver hands in and out over to the agent on conn (handover.go) and waits until the agent
// is done with them, or ctx ends.
func relayHandedOver(ctx context.Context, conn *net.UnixConn, in, out *os.File) error {
	if err := handOver(conn, in, out); err != nil {
		return fmt.Errorf("agent relay: hand over: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, conn) // the agent closes the socket when the connection ends
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// Install copies the file at src to dst through a temporary file in dst's directory and a rename, so
// that dst is either absent or complete, with mode 0755.
func Install(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("agent install: %w", err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".agent-*")
	if err != nil {
		return fmt.Errorf("agent install: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, in)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return fmt.Errorf("agent install: %w", err)
	}
	return nil
}
