package agent_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// cmdConn is a net.Conn over a process's stdin and stdout.
type cmdConn struct {
	net.Conn // nil: only Read, Write and Close are used by the HTTP client
	cmd      *exec.Cmd
	in       io.WriteCloser
	out      io.ReadCloser
}

func (c *cmdConn) Read(b []byte) (int, error)  { return c.out.Read(b) }
func (c *cmdConn) Write(b []byte) (int, error) { return c.in.Write(b) }
func (c *cmdConn) Close() error {
	c.in.Close()
	err := c.cmd.Wait()
	return err
}

// TestRelayProcess speaks to the agent through `agent relay` processes, one per connection, as the
// kubernetes provider does through pods/exec.
func TestRelayProcess(t *testing.T) {
	a := start(t)
	bin := testenv.BuildAgent(t)
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		cmd := exec.Command(bin, "agent", "relay", "-socket", a.socket)
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		return &cmdConn{cmd: cmd, in: in, out: out}, nil
	})
	defer c.Close()
	h, err := c.Health(ctx(t))
	if err != nil || h.PID != a.pid {
		t.Fatalf("health through the relay: %+v, %v; want the agent's pid %d", h, err, a.pid)
	}
	res, err := c.Exec(ctx(t), protocol.ExecRequest{ID: "r1", Argv: []string{"sh", "-c", "echo relayed"}, TimeoutMs: 10000, MaxOutputBytes: 100})
	if err != nil || res.ExitCode == nil || *res.ExitCode != 0 || string(res.Stdout) != "relayed\n" {
		t.Fatalf("exec through the relay: %+v, %v", res, err)
	}
	p, err := c.StartProcess(ctx(t), sandbox.ProcessSpec{Argv: []string{"sh", "-c", "echo started"}})
	if err != nil {
		t.Fatalf("start a process through the relay: %v", err)
	}
	if out, err := c.Output(ctx(t), p.PID, 0, 100, 5*time.Second); err != nil || !strings.HasPrefix(string(out.Data), "started") {
		t.Fatalf("its output through the relay: %+v, %v", out, err)
	}
	data := bytes.Repeat([]byte{0, 1, 2, 255}, 1<<18) // 1 MiB of binary data
	if err := c.WriteFile(ctx(t), "bin.dat", data); err != nil {
		t.Fatalf("write through the relay: %v", err)
	}
	got, err := c.ReadFile(ctx(t), "bin.dat")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read through the relay: %d bytes, %v", len(got), err)
	}
}

// TestRelayEndsWithItsInput checks that a relay whose caller went away ends instead of lingering.
func TestRelayEndsWithItsInput(t *testing.T) {
	a := start(t)
	client, server := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- agent.Relay(context.Background(), a.socket, server, server) }()
	if _, err := client.Write([]byte("GET /v1/healthz HTTP/1.1\r\nHost: agent\r\nSandbox-Deadline: 0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 12)
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "HTTP/1.1 200" {
		t.Fatalf("answer through the relay: %q, %v", buf, err)
	}
	client.Close()
	if err := <-done; err != nil {
		t.Fatalf("relay after its input closed: %v", err)
	}
	if err := agent.Relay(context.Background(), filepath.Join(t.TempDir(), "none.sock"), server, server); err == nil {
		t.Fatal("relay to a missing socket succeeded")
	}
}

func TestInstall(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho installed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "shared", "sandboxd")
	if err := os.Mkdir(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // a second install replaces the first
		if err := agent.Install(src, dst); err != nil {
			t.Fatalf("install %d: %v", i+1, err)
		}
	}
	out, err := exec.Command(dst).Output()
	if err != nil || string(out) != "installed\n" {
		t.Fatalf("running the installed copy: %q, %v", out, err)
	}
	ents, _ := os.ReadDir(filepath.Dir(dst))
	if len(ents) != 1 {
		t.Fatalf("install left %d entries, want only the binary", len(ents))
	}
	if err := agent.Install(filepath.Join(dir, "missing"), dst); err == nil {
		t.Fatal("install of a missing file succeeded")
	}
}
