package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// BenchmarkRunTrue is the exec round trip of true through an agent on the host: the client, the unix
// socket, the agent's handler and its runner. Compare with proc's BenchmarkOSExecTrue.
func BenchmarkRunTrue(b *testing.B) {
	a := start(b)
	ctx := context.Background()
	cmd := sandbox.Command{Argv: []string{"true"}, Timeout: 10 * time.Second}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := a.c.Run(ctx, cmd, time.Second, time.Second)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("%+v %v", res, err)
		}
	}
}

// BenchmarkHealth is the bare round trip of a request to the agent.
func BenchmarkHealth(b *testing.B) {
	a := start(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := a.c.Health(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStart is an agent's start as a cold create waits for it: from exec of the binary, with its
// listening socket inherited and a health request already queued on it, to the answer. The oci
// provider starts the agent with GOMAXPROCS=1 in its environment; "resized" is the same start without
// it, where Main sets one P after the runtime began with one per CPU.
func BenchmarkStart(b *testing.B) {
	b.Run("GOMAXPROCS=1", func(b *testing.B) { benchStart(b, []string{"GOMAXPROCS=1"}) })
	b.Run("resized", func(b *testing.B) { benchStart(b, nil) })
}

func benchStart(b *testing.B, env []string) {
	bin := testenv.BuildAgent(b)
	root := b.TempDir()
	if err := os.Mkdir(filepath.Join(root, "workspace"), 0o755); err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(b.TempDir(), "a.sock")
	req := "GET " + protocol.PathHealth + " HTTP/1.1\r\nHost: agent\r\n" + protocol.HeaderDeadline + ": " +
		strconv.FormatInt(time.Now().Add(time.Hour).UnixNano(), 10) + "\r\n\r\n"
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ln, err := net.Listen("unix", sock)
		if err != nil {
			b.Fatal(err)
		}
		lnFile, err := ln.(*net.UnixListener).File()
		if err != nil {
			b.Fatal(err)
		}
		conn, err := net.Dial("unix", sock)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Write([]byte(req)); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(bin, "agent", "-listen-fd", "3", "-root", root, "-workdir", "/workspace")
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		cmd.ExtraFiles = []*os.File{lnFile}
		b.StartTimer()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		b.StopTimer()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("health: %v %v", resp, err)
		}
		resp.Body.Close()
		conn.Close()
		lnFile.Close()
		ln.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// BenchmarkWire times each call on the client's fast paths and on the plain ones (Wire), against one
// agent, in alternation (the order swapped every pair), and reports both medians and their ratio.
func BenchmarkWire(b *testing.B) {
	a := start(b)
	ctx := context.Background()
	dial := func(ctx context.Context) (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, "unix", a.socket) }
	mib := bytes.Repeat([]byte("sandboxd"), 1<<17)
	if err := a.c.WriteFile(ctx, "read-1MiB", mib); err != nil {
		b.Fatal(err)
	}
	if err := a.c.WriteFile(ctx, "read-4KiB", mib[:4<<10]); err != nil {
		b.Fatal(err)
	}
	exec := func(argv ...string) func(c *agentclient.Client) error {
		cmd := sandbox.Command{Argv: argv, Timeout: 10 * time.Second}
		return func(c *agentclient.Client) error {
			_, err := c.Run(ctx, cmd, time.Second, time.Second)
			return err
		}
	}
	cases := []struct {
		name string
		op   func(c *agentclient.Client) error
	}{
		{"health", func(c *agentclient.Client) error { _, err := c.Health(ctx); return err }},
		{"exec true", exec("true")},
		{"exec 1 MiB output", exec("sh", "-c", "yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ | head -c 1048576")},
		{"write 4 KiB", func(c *agentclient.Client) error { return c.WriteFile(ctx, "w", mib[:4<<10]) }},
		{"read 4 KiB", func(c *agentclient.Client) error { _, err := c.ReadFile(ctx, "read-4KiB"); return err }},
		{"write 1 MiB", func(c *agentclient.Client) error { return c.WriteFile(ctx, "w", mib) }},
		{"read 1 MiB", func(c *agentclient.Client) error { _, err := c.ReadFile(ctx, "read-1MiB"); return err }},
	}
	for _, plain := range []agentclient.Wire{{PlainTransport: true}, {PlainExec: true}} {
		name := "plain=transport"
		if plain.PlainExec {
			name = "plain=exec"
		}
		for _, k := range cases {
			b.Run(name+"/"+k.name, func(b *testing.B) {
				clients := [2]*agentclient.Client{agentclient.NewWire(dial, agentclient.Wire{}), agentclient.NewWire(dial, plain)}
				defer clients[0].Close()
				defer clients[1].Close()
				var d [2][]time.Duration
				for i := range 2 { // warm both
					if err := k.op(clients[i]); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for j := range 2 {
						which := j ^ i&1
						t := time.Now()
						if err := k.op(clients[which]); err != nil {
							b.Fatal(err)
						}
						d[which] = append(d[which], time.Since(t))
					}
				}
				fast, slow := median(d[0]), median(d[1])
				b.ReportMetric(float64(fast.Microseconds()), "fast-µs")
				b.ReportMetric(float64(slow.Microseconds()), "plain-µs")
				b.ReportMetric(float64(slow)/float64(fast), "plain/fast")
			})
		}
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
