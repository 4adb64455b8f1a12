package agent_test

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHandover: a relay's hand-over of two pipes has the agent answer on them; one of regular files,
// of one descriptor or three, or with bytes beside its mark, is refused (the connection closed, every
// descriptor with it), and the agent serves on.
func TestHandover(t *testing.T) {
	a := start(t)
	send := func(data []byte, files ...*os.File) *net.UnixConn {
		t.Helper()
		conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: a.socket, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		if _, _, err := conn.WriteMsgUnix(data, unix.UnixRights(fds...), nil); err != nil {
			t.Fatal(err)
		}
		return conn
	}
	pipe := func() (*os.File, *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		return r, w
	}
	inR, inW := pipe()
	outR, outW := pipe()
	conn := send([]byte{0}, inR, outW)
	inR.Close()
	outW.Close()
	io.WriteString(inW, "GET /v1/healthz HTTP/1.1\r\nHost: agent\r\n\r\n")
	outR.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 12)
	if _, err := io.ReadFull(outR, buf); err != nil || string(buf) != "HTTP/1.1 200" {
		t.Fatalf("answer on the handed-over pipes: %q, %v", buf, err)
	}
	// A second request after a pause: the agent waited for it on the pipe.
	time.Sleep(50 * time.Millisecond)
	io.Copy(io.Discard, io.LimitReader(outR, 0))
	io.WriteString(inW, "GET /v1/healthz HTTP/1.1\r\nHost: agent\r\n\r\n")
	rest := make([]byte, 4096)
	n, _ := outR.Read(rest)
	for !strings.Contains(string(rest[:n]), "HTTP/1.1 200") {
		m, err := outR.Read(rest[n:])
		if err != nil {
			t.Fatalf("second answer on the handed-over pipes: %q, %v", rest[:n], err)
		}
		n += m
	}
	inW.Close() // the relay's caller goes away: the agent closes the socket
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("the socket after the connection ended: %v", err)
	}

	file, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	r1, w1 := pipe()
	for name, c := range map[string]*net.UnixConn{
		"regular files":     send([]byte{0}, file, file),
		"one descriptor":    send([]byte{0}, r1),
		"three descriptors": send([]byte{0}, r1, w1, r1),
		"bytes beside":      send([]byte{0, 'G'}, r1, w1),
	} {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil || strings.Contains(string(got), "200") {
			t.Errorf("%s: answered %q, %v", name, got, err)
		}
	}
	if _, err := a.c.Health(ctx(t)); err != nil {
		t.Fatalf("health after the refused hand-overs: %v", err)
	}
}
