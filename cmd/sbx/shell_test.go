package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/host"
)

// TestShell drives `sbx shell` from the other side of a local pty, as a person at a terminal would,
// against a real daemon: the shell sees this terminal's size and each new one (SIGWINCH), its keys
// arrive raw, and its exit status is sbx's.
func TestShell(t *testing.T) {
	dir := t.TempDir()
	logger := slog.New(slog.DiscardHandler)
	prov, err := host.New(host.Config{Dir: filepath.Join(dir, "sandboxes"), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	s, err := stack.Start(dir, prov, stack.Core(func(c *core.Config) { c.Logger = logger }),
		stack.API(func(c *httpapi.Config) { c.Logger = logger }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if sb, err = c.WaitState(ctx, sb.ID, sandbox.StateReady); err != nil {
		t.Fatal(err)
	}
	defer c.Terminate(context.Background(), sb.ID, sb.Generation)

	leaks := testenv.RunningGoroutines()
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := pty.Setsize(master, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var screen bytes.Buffer
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			mu.Lock()
			screen.Write(b[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	text := func() string {
		mu.Lock()
		defer mu.Unlock()
		return screen.String()
	}
	// typeUntil types keys until want is on the screen.
	typeUntil := func(keys, want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(text(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q after typing %q; screen %q", want, keys, text())
			}
			master.Write([]byte(keys))
			time.Sleep(300 * time.Millisecond)
		}
	}
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--url", s.URL, "shell", string(sb.ID)}, tty, tty, tty)
	}()
	typeUntil("stty size\r", "30 100")
	if err := pty.Setsize(master, &pty.Winsize{Rows: 41, Cols: 123}); err != nil {
		t.Fatal(err)
	}
	// The pty is not this process's controlling terminal: the signal a window's change sends is sent here.
	syscall.Kill(os.Getpid(), syscall.SIGWINCH)
	typeUntil("stty size\r", "41 123")
	// Raw mode: ^C is a key for the sandbox, which interrupts the shell's line, not sbx.
	master.Write([]byte("sleep 30\r"))
	time.Sleep(200 * time.Millisecond)
	master.Write([]byte{0x03})
	typeUntil("echo alive-$((40+2))\r", "alive-42")
	master.Write([]byte("exit 5\r"))
	select {
	case got := <-code:
		if got != 5 {
			t.Fatalf("sbx shell exited %d, want the shell's 5; screen %q", got, text())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("sbx shell did not exit; screen %q", text())
	}
	// sbx's reader of its stdin is blocked in a read of the tty, which no close ends: a line for it ends
	// it (the terminal is closed), then the tty's close ends the read of the master.
	master.Write([]byte("\n"))
	time.Sleep(100 * time.Millisecond)
	tty.Close()
	master.Close()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if err := leaks.Leftover(testenv.LeakWait); err != nil {
		t.Errorf("goroutines left running: %v", err)
	}
}
