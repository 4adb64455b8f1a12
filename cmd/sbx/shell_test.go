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

// ptySession drives sbx from the other side of a local pty, as a person at a terminal would, against a
// real daemon (the host provider) with one ready sandbox.
type ptySession struct {
	t           *testing.T
	ctx         context.Context
	url         string
	sb          *sandbox.Sandbox
	master, tty *os.File
	leaks       testenv.Goroutines

	mu     sync.Mutex
	screen bytes.Buffer
}

// newPTYSession starts the daemon, a ready sandbox and a local pty of rows×cols, whose screen it reads
// from then on.
func newPTYSession(t *testing.T, rows, cols uint16) *ptySession {
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
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
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
	t.Cleanup(func() { c.Terminate(context.Background(), sb.ID, sb.Generation) })

	p := &ptySession{t: t, ctx: ctx, url: s.URL, sb: sb, leaks: testenv.RunningGoroutines()}
	if p.master, p.tty, err = pty.Open(); err != nil {
		t.Fatal(err)
	}
	if err := pty.Setsize(p.master, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		t.Fatal(err)
	}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := p.master.Read(b)
			p.mu.Lock()
			p.screen.Write(b[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return p
}

func (p *ptySession) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.screen.String()
}

// run runs sbx with args on the pty, and returns its exit status when it ends.
func (p *ptySession) run(args ...string) <-chan int {
	code := make(chan int, 1)
	go func() {
		code <- run(p.ctx, append([]string{"--url", p.url}, args...), p.tty, p.tty, p.tty)
	}()
	return code
}

// typeUntil types keys until want is on the screen.
func (p *ptySession) typeUntil(keys, want string) {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.text(), want) {
		if time.Now().After(deadline) {
			p.t.Fatalf("no %q after typing %q; screen %q", want, keys, p.text())
		}
		p.master.Write([]byte(keys))
		time.Sleep(300 * time.Millisecond)
	}
}

// waitUntil waits for want on the screen.
func (p *ptySession) waitUntil(want string) { p.t.Helper(); p.typeUntil("", want) }

// resize changes the window's size as a terminal would.
func (p *ptySession) resize(rows, cols uint16) {
	p.t.Helper()
	if err := pty.Setsize(p.master, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		p.t.Fatal(err)
	}
	// The pty is not this process's controlling terminal: the signal a window's change sends is sent here.
	syscall.Kill(os.Getpid(), syscall.SIGWINCH)
}

// end waits for sbx to exit with want, then closes the pty and checks that no goroutine is left.
func (p *ptySession) end(code <-chan int, want int) {
	p.t.Helper()
	select {
	case got := <-code:
		if got != want {
			p.t.Fatalf("sbx exited %d, want %d; screen %q", got, want, p.text())
		}
	case <-time.After(20 * time.Second):
		p.t.Fatalf("sbx did not exit; screen %q", p.text())
	}
	// sbx's reader of its stdin is blocked in a read of the tty, which no close ends: a line for it ends
	// it (the terminal is closed), then the tty's close ends the read of the master.
	p.master.Write([]byte("\n"))
	time.Sleep(100 * time.Millisecond)
	p.tty.Close()
	p.master.Close()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if err := p.leaks.Leftover(testenv.LeakWait); err != nil {
		p.t.Errorf("goroutines left running: %v", err)
	}
}

// TestShell drives `sbx shell` from the other side of a local pty against a real daemon: the shell
// sees this terminal's size and each new one (SIGWINCH), its keys arrive raw, and its exit status is
// sbx's.
func TestShell(t *testing.T) {
	p := newPTYSession(t, 30, 100)
	code := p.run("shell", string(p.sb.ID))
	p.typeUntil("stty size\r", "30 100")
	p.resize(41, 123)
	p.typeUntil("stty size\r", "41 123")
	// Raw mode: ^C is a key for the sandbox, which interrupts the shell's line, not sbx.
	p.master.Write([]byte("sleep 30\r"))
	time.Sleep(200 * time.Millisecond)
	p.master.Write([]byte{0x03})
	p.typeUntil("echo alive-$((40+2))\r", "alive-42")
	p.master.Write([]byte("exit 5\r"))
	p.end(code, 5)
}

// TestExecTTY drives `sbx exec -it ID -- cmd` the same way: the command runs on a pty the size of this
// terminal and follows its resize, its keys arrive raw (^D is the sandbox terminal's end of file), and
// its exit status is sbx's.
func TestExecTTY(t *testing.T) {
	p := newPTYSession(t, 27, 91)
	code := p.run("exec", "-it", string(p.sb.ID), "--", "sh", "-c", "stty size; while read line; do stty size; done; echo bye; exit 3")
	p.waitUntil("27 91")
	p.resize(33, 107)
	// Each line makes the command say its size again, until the new size has reached it.
	p.typeUntil("\r", "33 107")
	p.master.Write([]byte{0x04})
	p.waitUntil("bye")
	p.end(code, 3)
}
