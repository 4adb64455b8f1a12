package agent_test

import (
	"errors"
	"io"
	"net"
	"testing"

	"github.com/sandboxd/sandbox"
)

// TestPortRelay: the agent connects to a port on its own loopback and relays the bytes both ways,
// passing an end of input on as a half-close; a closed port is ErrPortUnreachable.
func TestPortRelay(t *testing.T) {
	a := start(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c) // to the client's half-close
				c.Write(append([]byte("echo:"), b...))
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	conn, err := a.c.DialPort(ctx(t), port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != "echo:hello" {
		t.Fatalf("got %q, %v", got, err)
	}
	ln.Close()
	if _, err := a.c.DialPort(ctx(t), port); !errors.Is(err, sandbox.ErrPortUnreachable) {
		t.Errorf("a closed port: %v", err)
	}
	if _, err := a.c.DialPort(ctx(t), 0); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Errorf("port 0: %v", err)
	}
}
