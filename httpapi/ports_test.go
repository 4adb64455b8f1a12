package httpapi

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/corestack"
)

// portStub is the stub provider with portForwarding, whose every port is addr on the host.
type portStub struct {
	*stubProvider
	addr string
}

func (p portStub) Manifest(context.Context) (sandbox.Manifest, error) {
	return sandbox.Manifest{Name: "stub", Version: "1", RuntimeClass: "none", Capabilities: sandbox.Capabilities{PortForwarding: true}}, nil
}

func (p portStub) DialPort(ctx context.Context, _ sandbox.Ref, _ int) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, errors.Join(err, sandbox.ErrPortUnreachable)
	}
	return c, nil
}

// TestTCPRelayNeverHangs: a client that stops answering pings is dropped, and the connection to the
// port with it; a port that closes ends the socket with 1000 after its last bytes; nothing is left
// running.
func TestTCPRelayNeverHangs(t *testing.T) {
	oldPing, oldWrite := tcpPingInterval.Load(), tcpWriteTimeout.Load()
	tcpPingInterval.Store(int64(100 * time.Millisecond))
	tcpWriteTimeout.Store(int64(300 * time.Millisecond))
	t.Cleanup(func() { tcpPingInterval.Store(oldPing); tcpWriteTimeout.Store(oldWrite) })
	// Registered after the restore, so it runs first: the relays have ended before the bounds change.
	testenv.NoLeaks(t)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	rt := corestack.New(t, portStub{&stubProvider{refs: map[sandbox.Ref]bool{}}, ln.Addr().String()}).Runtime
	_, srv := serve(t, Config{Runtime: rt})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := rt.Create(ctx, sandbox.Spec{ClientRequestID: "ports"})
	if err != nil {
		t.Fatal(err)
	}
	for sb.State != sandbox.StateReady {
		time.Sleep(10 * time.Millisecond)
		if sb, err = rt.Get(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/sandboxes/" + string(sb.ID) + "/ports/" + strconv.Itoa(8080) + "/tcp"
	dial := func() (*websocket.Conn, net.Conn) {
		t.Helper()
		ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{tcpSubprotocol}})
		if err != nil {
			t.Fatal(err)
		}
		return ws, <-accepted
	}

	// A client that never reads answers no ping: dropped, and the port's connection closed.
	ws, port := dial()
	_ = port.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(port); err != nil {
		t.Errorf("the port's connection did not end when the client went silent: %v", err)
	}
	port.Close()
	ws.CloseNow()

	// The port writes and closes: the client reads it all, then a normal closure.
	ws, port = dial()
	port.Write([]byte("last words"))
	port.Close()
	_, got, err := ws.Read(ctx)
	if err != nil || string(got) != "last words" {
		t.Fatalf("read %q, %v", got, err)
	}
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after the port closed: %v", err)
	}
	ws.CloseNow()
}
