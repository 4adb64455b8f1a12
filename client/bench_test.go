package client_test

import (
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/fastpath"
)

// BenchmarkReadFile1MiB and BenchmarkExec1MiB are the client's side of large answers, against the real
// stack in process (host provider), decoded by jsondoc and, on the plain path, by encoding/json.
func BenchmarkReadFile1MiB(b *testing.B) {
	bothWays(b, func(b *testing.B) {
		c, sb := benchSandbox(b)
		data := make([]byte, 1<<20)
		if _, err := c.WriteFile(b.Context(), sb.ID, sb.Generation, "f.bin", data); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if got, err := c.ReadFile(b.Context(), sb.ID, sb.Generation, "f.bin"); err != nil || len(got) != len(data) {
				b.Fatal(len(got), err)
			}
		}
	})
}

func BenchmarkExec1MiB(b *testing.B) {
	bothWays(b, func(b *testing.B) {
		c, sb := benchSandbox(b)
		cmd := sandbox.Command{Argv: []string{"head", "-c", "1048576", "/dev/zero"}, MaxOutputBytes: 1 << 20, Timeout: time.Minute}
		b.SetBytes(1 << 20)
		for b.Loop() {
			if res, err := c.Exec(b.Context(), sb.ID, sb.Generation, cmd); err != nil || len(res.Stdout) != 1<<20 {
				b.Fatal(err)
			}
		}
	})
}

// bothWays runs f with the client's answers decoded by jsondoc, then by encoding/json.
func bothWays(b *testing.B, f func(b *testing.B)) {
	b.Run("jsondoc", f)
	b.Run("encoding-json", func(b *testing.B) {
		b.Setenv(fastpath.Env, fastpath.JSON)
		f(b)
	})
}

func benchSandbox(b *testing.B) (*client.Client, *sandbox.Sandbox) {
	url, stop, err := startDaemon(b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stop)
	c, err := client.New(url)
	if err != nil {
		b.Fatal(err)
	}
	sb, err := c.Create(b.Context(), sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	if sb, err = c.WaitReady(b.Context(), sb.ID); err != nil {
		b.Fatal(err)
	}
	return c, sb
}
