package agent_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
)

// TestSuspend: a suspended agent answers nothing until SIGUSR2, then serves on the socket named in the
// suspend, beside the first, with its background processes gone on meanwhile; a name that is a path,
// or does not begin "agent-", is refused and changes nothing.
func TestSuspend(t *testing.T) {
	a := start(t)
	for _, bad := range []string{"../agent-x", "other.sock", "agent-a/b", ""} {
		if err := a.c.Suspend(ctx(t), bad); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("suspend to %q: %v, want ErrInvalidRequest", bad, err)
		}
	}
	if _, err := a.c.Health(ctx(t)); err != nil {
		t.Fatalf("after refused suspends: %v", err)
	}
	p, err := a.c.StartProcess(ctx(t), sandbox.ProcessSpec{Argv: []string{"sh", "-c", "sleep 1; echo done"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.c.Suspend(ctx(t), "agent-next.sock"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := a.c.Health(ctx(t)); err == nil {
		t.Fatal("a suspended agent answered on its first socket")
	}
	if err := syscall.Kill(a.pid, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	next := agentclient.NewUnix(filepath.Join(filepath.Dir(a.socket), "agent-next.sock"))
	defer next.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := next.Health(ctx(t)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent did not bind its next socket after SIGUSR2")
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, err := next.Process(ctx(t), p.PID, 10*time.Second)
	if err != nil || got.Running || got.ExitCode == nil || *got.ExitCode != 0 {
		t.Errorf("the background process across the suspend: %+v %v", got, err)
	}
	if _, err := os.Stat(a.socket); err != nil {
		t.Errorf("the first socket's file is gone: %v", err)
	}
}
